"""The simulator against hand-computed schedules, one test per rule of the operation
table, and properties over random chains and random valid schedules."""
import math

import pytest
from _tiers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from remat_theory import (BudgetExceededError, Chain, InvalidScheduleError, Schedule,
                          ScheduleParseError, simulate)
from remat_theory.model.errors import RematError
from remat_theory.model.schedule import Op
from remat_theory.strategies import chains, valid_schedules
from solvers.store_all import store_all_schedule

# Two stages with overheads; every number below is computed by hand from the operation table of docs/model.md.
C2 = Chain(fwd_time=[1, 2], bwd_time=[3, 4, 0.5], x_size=[4, 2, 3], tape_size=[5, 6],
           fwd_overhead=[1, 2], bwd_overhead=[1, 0, 2])
# Three stages with overheads.
C3 = Chain(fwd_time=[1, 1, 1], bwd_time=[2, 2, 2, 1], x_size=[2, 3, 1, 2], tape_size=[4, 2, 3],
           fwd_overhead=[0, 1, 2], bwd_overhead=[1, 2, 0, 1])


def profile_of(result):
    return [(s.op, s.memory_before, s.peak, s.memory_after) for s in result.profile]


def test_two_stage_store_all_by_hand():
    r = simulate(C2, "Fall0 Fall1 Loss B1 B0", budget=20)
    assert profile_of(r) == [
        ("Fall0", 4, 10, 9),   # x0 + t1(5) + overhead 1
        ("Fall1", 9, 17, 15),  # reads x1 inside t1; + t2(6) + 2
        ("Loss", 15, 20, 18),  # x2 inside t2 (kept); + d2(3) + 2
        ("B1", 18, 20, 11),    # + d1(2) + 0; frees d2, t2 (x1 lives in t1, kept)
        ("B0", 11, 16, 8),     # + d0(4) + 1; frees d1, t1; x0 is never freed
    ]
    assert r.makespan == 10.5 and r.peak_memory == 20
    assert [s.start for s in r.profile] == [0, 1, 3, 3.5, 7.5]
    assert r.profile[-1].held == "{x0, d0}"


def test_two_stage_with_recomputation_by_hand():
    r = simulate(C2, "Fck0 Fn1 Loss Fck0 Fall1 B1 Fall0 B0", budget=17)
    assert profile_of(r) == [
        ("Fck0", 4, 7, 6),     # + x1(2) + 1
        ("Fn1", 6, 11, 7),     # + x2(3) + 2; frees the plain x1
        ("Loss", 7, 12, 7),    # + d2(3) + 2; frees the plain x2
        ("Fck0", 7, 10, 9),    # recompute x1 while d2 is live
        ("Fall1", 9, 17, 15),  # + t2(6) + 2
        ("B1", 15, 17, 6),     # + d1(2); frees d2, t2 and the plain x1
        ("Fall0", 6, 12, 11),
        ("B0", 11, 16, 8),
    ]
    assert r.makespan == 14.5 and r.peak_memory == 17


def test_three_stage_by_hand():
    r = simulate(C3, "Fck0 Fn1 Fall2 Loss B2 Fall0 Fall1 B1 B0", budget=14)
    assert profile_of(r) == [
        ("Fck0", 2, 5, 5), ("Fn1", 5, 7, 3), ("Fall2", 3, 8, 6), ("Loss", 6, 9, 8),
        ("B2", 8, 9, 3), ("Fall0", 3, 7, 7), ("Fall1", 7, 10, 9), ("B1", 9, 14, 9),
        ("B0", 9, 12, 4),
    ]
    assert r.makespan == 12 and r.peak_memory == 14
    assert [s.held for s in r.profile][4] == "{x0, d2}"


# ----------------------------------------------------------------- one test per rule

# Every rule that makes a schedule invalid, one row each: (rule, schedule, options, step
# of the offending op or None when the schedule as a whole is at fault, the message).
INVALID = [
    ("a forward needs its input", "Fn1", {}, 0, "x1 is not available"),
    ("recomputing a held activation", "Fck0 Fck0", {}, 1, "x1 is already held"),
    ("recomputing a held tape", "Fall0 Fall0", {}, 1, "t1 is already held"),
    ("the loss needs its input", "Fall0 Loss", {}, 1, "x2 is not available"),
    ("the loss runs once", "Fall0 Fall1 Loss Fck1 Loss", {}, 4, "the loss has already run"),
    ("a backward needs the loss", "Fall0 Fall1 B1", {}, 2, "the loss has not run"),
    ("a backward needs its gradient", "Fall0 Fall1 Loss B0", {}, 3,
     "d1 is not available (the live gradient is d2)"),
    ("a backward needs its tape", "Fck0 Fn1 Loss B1", {}, 3, "t2 is not held"),
    ("a backward needs its input", "Fall0 Fall1 Fn1 Loss B1", {}, 4, "x1 is not available"),
    ("a backward runs once", "Fall0 Fall1 Loss B1 B1", {}, 4, "B1 has already run"),
    ("no forward after its backward", "Fall0 Fall1 Loss B1 Fall1", {}, 4, "B1 has already run"),
    ("a forward stage in range", "Fall0 Fn5", {}, 1, "stage index 5 is out of range 0..1"),
    ("a backward stage in range", "Fall0 Fall1 Loss B7", {}, 3, "stage index 7 is out of range"),
    ("the schedule ends with d0", "Fall0 Fall1 Loss B1", {}, None,
     "ends without computing d0 (the last gradient computed is d1)"),
    ("the loss must run", "", {}, None, "the loss never ran"),
    ("the budget holds x0", "Fall0 Fall1 Loss B1 B0", {"budget": 3}, None,
     "below the size of the input x0"),
    ("Drop is opt-in", "Fck0 Dropx1 Fall0 Fall1 Loss B1 B0", {}, 1,
     "Drop operations are not allowed"),
    ("Drop never frees x0", "Dropx0", {"allow_drop": True}, 0, "x0 is never freed"),
    ("Drop frees only what is held", "Dropt1", {"allow_drop": True}, 0, "t1 is not held"),
    ("Drop names a tape in range", "Dropt0", {"allow_drop": True}, 0,
     "tape index 0 is out of range"),
]


@pytest.mark.parametrize("rule, text, options, step, message", INVALID,
                         ids=[row[0] for row in INVALID])
def test_invalid_schedules_are_refused_naming_the_step_and_the_rule(rule, text, options, step,
                                                                    message):
    with pytest.raises(InvalidScheduleError) as e:
        simulate(C2, text, **options)
    assert e.value.step == step and message in str(e.value)
    if step is not None:
        assert e.value.op == text.split()[step]


def test_fn_frees_plain_input():
    r = simulate(C3, "Fck0 Fn1 Fall2 Loss B2 Fall0 Fall1 B1 B0")
    assert r.profile[1].held == "{x0, x2}"


def test_fn_frees_the_tape_it_read_from():
    r = simulate(C2, "Fall0 Fn1 Loss Fall0 Fall1 B1 B0")
    assert r.profile[1].held == "{x0, x2}"  # t1 released by Fn1
    assert r.profile[1].memory_after == 4 + 3


def test_fn0_never_frees_x0():
    r = simulate(C2, "Fn0 Fall1 Loss B1 Fall0 B0")
    assert r.profile[0].held == "{x0, x1}"


def test_fck_and_fall_keep_their_input():
    r = simulate(C3, "Fall0 Fck1 Fall1 Fall2 Loss B2 B1 B0")
    assert r.profile[1].held == "{x0, x2, t1}"
    assert r.profile[2].held == "{x0, x2, t1, t2}"


def test_plain_and_tape_copies_both_count():
    r = simulate(C2, "Fck0 Fall0 Fall1 Loss B1 B0")
    assert r.profile[1].memory_after == 4 + 2 + 5


def test_loss_frees_plain_input_but_not_the_tape():
    r = simulate(C2, "Fall0 Fck1 Loss Fall1 B1 B0")
    assert r.profile[2].held == "{x0, t1, d2}"
    r = simulate(C2, "Fall0 Fall1 Loss B1 B0")
    assert r.profile[2].held == "{x0, t1, t2, d2}"


def test_backward_frees_gradient_tape_and_plain_input():
    r = simulate(C2, "Fck0 Fn1 Loss Fck0 Fall1 B1 Fall0 B0")
    assert r.profile[5].held == "{x0, d1}"


def test_overheads_count_only_while_the_op_runs():
    r = simulate(C2, "Fall0 Fall1 Loss B1 B0")
    assert all(s.peak >= s.memory_before for s in r.profile)
    assert r.profile[0].peak - r.profile[0].memory_after == 1


def test_budget_is_checked_at_every_peak():
    with pytest.raises(BudgetExceededError) as e:
        simulate(C2, "Fall0 Fall1 Loss B1 B0", budget=19)
    assert e.value.step == 2 and e.value.op == "Loss" and e.value.peak == 20
    assert "peak memory 20 exceeds the budget 19" in str(e.value)


def test_drop_frees_at_no_time_when_allowed():
    r = simulate(C2, "Fck0 Dropx1 Fall0 Fall1 Loss B1 B0", allow_drop=True)
    assert r.profile[1].held == "{x0}" and r.profile[1].time == 0


def test_bad_budget_values():
    for b, msg in [(-1, "negative"), (2.5, "not an integer"), (True, "not a number"),
                   ("9", "not a number"), (float("nan"), "not an integer")]:
        with pytest.raises(RematError, match=msg):
            simulate(C2, "Fall0 Fall1 Loss B1 B0", b)


# ----------------------------------------------------------------- tokens

def test_token_parse_and_print():
    s = Schedule.parse(" Fck0 Fn1\tFall2  Loss\nB2 Dropx3 Dropt1 ")
    assert s.tokens() == ["Fck0", "Fn1", "Fall2", "Loss", "B2", "Dropx3", "Dropt1"]
    with pytest.raises(ScheduleParseError, match="separated by spaces"):  # no commas
        Schedule.parse("Fck0 Fn1,Fall2")
    assert Schedule.parse(str(s)) == s and len(s) == 7 and s[1] == Op("Fn", 1)


@pytest.mark.parametrize("text, message", [
    ("Fck0 Fx1", "token 1: unknown op token 'Fx1'"),
    ("Loss1", "unknown op token 'Loss1'"),
    ("B-1", "unknown op token 'B-1'"),
    ("Fn", "unknown op token 'Fn'"),
    ("Dropz1", "unknown op token 'Dropz1'"),
])
def test_unknown_tokens_are_named(text, message):
    with pytest.raises(ScheduleParseError) as e:
        Schedule.parse(text)
    assert message in str(e.value)


def test_op_validation():
    with pytest.raises(ScheduleParseError, match="needs a stage index"):
        Op("Fn", -1)
    with pytest.raises(ScheduleParseError, match="unknown operation kind"):
        Op("Fwd", 1)


# ----------------------------------------------------------------- properties

@settings(max_examples=examples(100, 28))
@given(chains(1, 7))
def test_store_all_is_valid_at_its_peak_and_not_one_byte_below(chain):
    s = store_all_schedule(chain)
    peak = chain.store_all_memory()
    assert simulate(chain, s, peak).peak_memory == peak
    with pytest.raises(BudgetExceededError):
        simulate(chain, s, peak - 1)


@settings(max_examples=examples(100, 41))
@given(chains(1, 7, integer_times=False))
def test_store_all_makespan_is_the_sum_of_all_times(chain):
    r = simulate(chain, store_all_schedule(chain))
    assert math.isclose(r.makespan, sum(chain.fwd_time) + sum(chain.bwd_time), rel_tol=1e-12)


@settings(max_examples=examples(100, 14))
@given(st.data(), chains(1, 5), st.integers(0, 50))
def test_a_valid_schedule_replays_consistently(data, chain, extra):
    """On random valid schedules (each property on the same 100 schedules, drawn once):
    more memory never invalidates one and one byte below its peak does; its token form
    round-trips; its profile is consistent (memory carried from step to step, each peak
    above both sides, the peak the largest, the makespan at least the ideal one)."""
    s = data.draw(valid_schedules(chain))
    r = simulate(chain, s)
    # more memory never invalidates it; one byte below its peak does
    again = simulate(chain, s, r.peak_memory + extra)
    assert again.makespan == r.makespan and again.peak_memory == r.peak_memory
    if r.peak_memory > chain.x_size[0]:
        with pytest.raises(BudgetExceededError):
            simulate(chain, s, r.peak_memory - 1)
    # the token form round-trips
    assert Schedule.parse(str(s)) == s
    assert Schedule(s.tokens()) == s
    assert simulate(chain, str(s)).makespan == r.makespan
    # the profile is consistent
    mem = chain.x_size[0]
    t = 0.0
    for step in r.profile:
        assert step.memory_before == mem and step.start == t
        assert step.peak >= max(step.memory_before, step.memory_after)
        mem, t = step.memory_after, t + step.time
    assert r.peak_memory == max([chain.x_size[0]] + [p.peak for p in r.profile])
    assert r.makespan >= chain.ideal_makespan() - 1e-9  # every op runs at least once
