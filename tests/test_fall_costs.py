"""The optional recording-forward costs ``fall_time`` / ``fall_overhead`` (docs/model.md):
absent, every answer is what it was; present, only Fall_i uses them.  Oracles: the
simulator replaying hand-built schedules, exhaustive search for the smallest budget.
(Exhaustive search on such chains, where recording may be cheaper than a no-grad forward,
is checked against plain Dijkstra in tests/test_exhaustive.py.)"""
import json
import math

import pytest
from _tiers import examples
from hypothesis import given, settings

from remat_theory import Chain, ChainError, simulate
from remat_theory.analysis.families import FAMILIES, make, with_fall_costs
from remat_theory.strategies import chains
from solvers.exhaustive import min_feasible_budget
from solvers.store_all import store_all_schedule

TWO = dict(fwd_time=[1.0, 2.0], bwd_time=[3.0, 4.0, 0.5], x_size=[4, 5, 6], tape_size=[7, 8],
           fwd_overhead=[10, 20], bwd_overhead=[1, 2, 3])


def test_absent_fields_default_to_the_no_grad_forward_and_are_not_written():
    c = Chain(**TWO)
    assert c.fall_time == c.fwd_time and c.fall_overhead == c.fwd_overhead
    assert not c.has_fall_costs
    d = c.to_dict()
    assert "fall_time" not in d and "fall_overhead" not in d
    assert Chain.from_dict(d) == c


def test_present_fields_round_trip_and_compare():
    c = Chain(**TWO, fall_time=[1.5, 2.5], fall_overhead=[0, 20])
    assert c.has_fall_costs and c != Chain(**TWO)
    d = json.loads(c.to_json())
    assert d["fall_time"] == [1.5, 2.5] and d["fall_overhead"] == [0, 20]
    assert Chain.from_json(c.to_json()) == c
    # only the field that differs is written
    only_time = Chain(**TWO, fall_time=[1.5, 2.5])
    assert "fall_overhead" not in only_time.to_dict()


@pytest.mark.parametrize("field,value,message", [
    ("fall_time", [1.0], "fall_time has length 1, expected 2"),
    ("fall_time", [1.0, -1.0], r"fall_time\[1\] = -1.0 is negative"),
    ("fall_time", [1.0, math.nan], r"fall_time\[1\] is NaN"),
    ("fall_overhead", [0, 1.5], r"fall_overhead\[1\] = 1.5 is not an integer"),
    ("fall_overhead", [0, 1, 2], "fall_overhead has length 3, expected 2"),
])
def test_bad_values_name_the_field_and_index(field, value, message):
    with pytest.raises(ChainError, match=message):
        Chain(**TWO, **{field: value})
    data = Chain(**TWO).to_dict() | {field: value}
    with pytest.raises(ChainError, match=message):
        Chain.from_dict(data)


def test_only_fall_uses_the_recording_costs():
    c = Chain(**TWO, fall_time=[100.0, 200.0], fall_overhead=[1000, 2000])
    # Fck0 Fck1 (no-grad forwards) cost the forward's; Fall1 and Fall0 the recording ones.
    r = simulate(c, "Fck0 Fck1 Loss Fall1 B1 Fall0 B0")
    steps = {s.op: s for s in r.profile}
    assert steps["Fck0"].time == 1.0 and steps["Fck0"].peak == 4 + 5 + 10
    assert steps["Fck1"].time == 2.0 and steps["Fck1"].peak == 4 + 5 + 6 + 20
    assert steps["Fall1"].time == 200.0 and steps["Fall1"].peak == 4 + 5 + 6 + 8 + 2000
    assert steps["Fall0"].time == 100.0 and steps["Fall0"].peak == 4 + 5 + 7 + 1000
    assert r.makespan == 1 + 2 + 0.5 + 200 + 4 + 100 + 3


@settings(max_examples=examples(60, 10))
@given(chains(1, 5, fall_costs=True))
def test_lower_bound_is_below_exact_smallest_budget_with_fall_costs(chain):
    assert chain.memory_lower_bound() <= min_feasible_budget(chain) <= chain.store_all_memory()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_fall_costs_are_seeded_and_valid(family):
    base = make(family, 8, seed=2)
    a, b = with_fall_costs(base, 5), with_fall_costs(base, 5)
    assert a == b and a.has_fall_costs
    assert all(ft >= t for ft, t in zip(a.fall_time, a.fwd_time))
    assert all(0 <= fo <= o for fo, o in zip(a.fall_overhead, a.fwd_overhead))
    assert simulate(a, store_all_schedule(a)).peak_memory == a.store_all_memory()


def test_scaling_and_renaming_keep_the_fall_costs():
    c = Chain(**TWO, fall_time=[1.5, 2.5], fall_overhead=[0, 20]).scaled_sizes(1)
    assert c.fall_overhead == (0, 20) and c.with_name("x").fall_time == (1.5, 2.5)
    d = Chain([1.0], [1.0, 1.0], [2, 2], [4], [2], [0, 0], fall_overhead=[4]).scaled_sizes(2)
    assert d.fall_overhead == (2,) and d.size_gcd() == 1
