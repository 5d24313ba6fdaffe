"""Claim 5 of proofs/ (proofs/np_hardness.md): the SUBSET-SUM / PARTITION reduction.

The oracle is exhaustive search over simulator states (no modelling argument), checked
against the optimum the proof derives, ``2*sum(a) - best_subset_sum(a, C)``, and against
brute-force PARTITION.
"""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import solvers
from remat_theory import RematError, simulate
from remat_theory.analysis.hardness import (all_instances, best_kept_set, best_subset_sum,
                                   is_partition_yes, partition_instance, subset_sum_instance,
                                   subset_sum_optimum, witness_schedule)


def _check(values, *, allow_drop=False):
    inst = partition_instance(values)
    opt = solvers.solve(inst.chain, inst.budget, "exhaustive", allow_drop=allow_drop)
    assert opt.status == "optimal"
    assert opt.makespan == subset_sum_optimum(values, inst.capacity), values
    assert (opt.makespan <= inst.threshold) == is_partition_yes(values), values


def test_every_partition_instance_up_to_4_items_of_value_4():
    """The iff of the theorem, on every sequence of 1..4 values in 1..4 (340 instances,
    chains of 2..5 stages), in the canonical model."""
    n = 0
    for values in all_instances(4, 4):
        _check(values)
        n += 1
    assert n == 4 + 16 + 64 + 256


@pytest.mark.slow  # the iff by default on every instance up to 4 items of value 4 (above)
def test_larger_multisets_up_to_seven_stages():
    """Every multiset of 5 values in 1..3 and of 6 values in 1..2 (chains of 6 and 7
    stages), items in sorted order."""
    for n, top in ((5, 3), (6, 2)):
        for values in itertools.combinations_with_replacement(range(1, top + 1), n):
            _check(values)


def test_reduction_holds_with_explicit_deletions():
    """The proof never uses the absence of Drop: same optimum with allow_drop=True, for
    every capacity (the SUBSET-SUM form)."""
    for values in itertools.product(range(1, 4), repeat=3):
        for cap in range(sum(values) + 1):
            inst = subset_sum_instance(values, cap)
            opt = solvers.solve(inst.chain, inst.budget, "exhaustive", allow_drop=True)
            assert opt.makespan == subset_sum_optimum(values, cap), (values, cap)


@pytest.mark.slow
def test_every_partition_instance_up_to_5_items_of_value_5():
    for values in all_instances(5, 5):
        _check(values)
    for values in itertools.combinations_with_replacement(range(1, 5), 6):
        _check(values)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 10_000), min_size=1, max_size=14), st.data())
def test_witness_schedule_is_valid_and_meets_the_formula(values, data):
    """The "if" direction's schedule, at sizes far beyond exhaustive search: valid under the
    budget, makespan 2*sum - sum(kept), for any kept set that fits."""
    cap = data.draw(st.integers(0, sum(values)))
    inst = subset_sum_instance(values, cap)
    n = len(values)
    if n <= 10:
        kept = best_kept_set(values, cap)
        assert sum(values[i] for i in kept) == best_subset_sum(values, cap)
    else:
        kept, room = [], cap  # any feasible kept set works; a greedy one here
        for i in sorted(range(n), key=lambda i: -values[i]):
            if values[i] <= room:
                kept.append(i)
                room -= values[i]
    sim = simulate(inst.chain, witness_schedule(values, kept), inst.budget)
    assert sim.makespan == 2 * sum(values) - sum(values[i] for i in kept)
    assert sim.peak_memory <= inst.budget


def test_best_subset_sum_matches_brute_force():
    for values in itertools.product(range(1, 5), repeat=3):
        for cap in range(sum(values) + 2):
            brute = max(s for r in range(4) for c in itertools.combinations(values, r)
                        if (s := sum(c)) <= cap)
            assert best_subset_sum(values, cap) == brute


def test_bad_input_names_the_field():
    with pytest.raises(RematError, match=r"values\[1\]"):
        partition_instance([1, 0, 2])
    with pytest.raises(RematError, match="empty"):
        partition_instance([])
    with pytest.raises(RematError, match="capacity"):
        subset_sum_instance([1, 2], -1)
    with pytest.raises(RematError, match="kept index"):
        witness_schedule([1, 2], [5])


def test_persistent_dp_is_optimal_on_the_reduction():
    """Remark of proofs/np_hardness.md: the DP solves these chains exactly (so the
    persistent problem is NP-hard too, consistent with its pseudo-polynomial DP)."""
    for values in all_instances(4, 4):
        inst = partition_instance(values)
        dp = solvers.solve(inst.chain, inst.budget, "dp")
        assert dp.makespan == subset_sum_optimum(values, inst.capacity), values


def test_witness_schedules_are_persistent():
    from remat_theory.model.persistence import is_persistent

    for values in all_instances(3, 3):
        chain = partition_instance(values).chain
        for r in range(len(values) + 1):
            for kept in itertools.combinations(range(len(values)), r):
                assert is_persistent(chain, witness_schedule(values, kept))


@pytest.mark.parametrize("multisets", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_positive_variant(multisets):
    """Theorem 5.4 (no zero size or time): OPT = Q(2A - best) + n + 3 and the iff, on every
    PARTITION sequence of up to 4 values in 1..4 and (under slow) the multisets of 5 and 6
    values, and every capacity of the SUBSET-SUM form for all triples in 1..3."""
    def check(values):
        inst = partition_instance(values, positive=True)
        c = inst.chain
        assert min(c.x_size + c.tape_size) >= 1 and min(c.fwd_time + c.bwd_time) > 0
        opt = solvers.solve(c, inst.budget, "exhaustive")
        assert opt.makespan == subset_sum_optimum(values, inst.capacity, positive=True), values
        assert (opt.makespan <= inst.threshold) == is_partition_yes(values), values
        kept = best_kept_set(values, inst.capacity)
        assert simulate(c, witness_schedule(values, kept), inst.budget).makespan == opt.makespan

    for values in all_instances(4, 4):
        check(values)
    for n, top in ((5, 3), (6, 2)) if multisets else ():
        for values in itertools.combinations_with_replacement(range(1, top + 1), n):
            check(values)
    for values in itertools.product(range(1, 4), repeat=3):
        for cap in range(sum(values) + 1):
            inst = subset_sum_instance(values, cap, positive=True)
            opt = solvers.solve(inst.chain, inst.budget, "exhaustive")
            assert opt.makespan == subset_sum_optimum(values, cap, positive=True)
