"""O.20-O.21 (proofs/offload.md): the normal form of two-stream schedules and the length
bound it gives, which let ``ilp-offload -o proven=true`` certify chains with cheap copies.

O.20 is checked three ways: its exchange (:func:`normalize`) on random valid schedules,
replayed by the independent interpreter (``tests/_offload_reference.py``): valid, no
longer, peak and makespan no larger, in normal form; the restricted search's optimum
against ``exhaustive-offload``'s on random chains (some optimal schedule is in normal
form); the MILP, which is restricted to the normal form, against ``exhaustive-offload -o
max_ops=N`` elsewhere (``tests/test_offload_solvers.py``).  O.21 on the normal-form
schedules: their transfers are at most the charge of their compute ops, and their length at
most the bound at their own makespan.
"""
from __future__ import annotations

import random

import _bench
import pytest
from _offload_reference import TwoStreamReference

from remat_theory import Chain, simulate
from remat_theory.analysis import families
from remat_theory.model.schedule import Schedule
from solvers import registry
from solvers.offload.ilp_bounds import general_length_bound, length_bound
from solvers.offload.normal import (is_normal_form, normal_length_bound, normalize,
                                        op_weight, search_normal_form, violations)
from solvers.offload.exhaustive import min_feasible_budget
from test_offload_ilp_proof import _random_chain, _walk


def _reference(chain: Chain, schedule: Schedule):
    ref = TwoStreamReference(chain)
    for op in schedule:
        assert ref.apply(op.token) is not False, (chain, str(schedule), op.token)
    return ref.result()


def _with_unsaved(chain: Chain, rng: random.Random) -> Chain:
    return chain.replace(output_saved=[rng.random() < 0.5 for _ in range(chain.length)])


def _random_walks(seed: int):
    """160 random chains of 1-3 stages (a third with zero sizes, half with some outputs
    unsaved), each with one random valid schedule of it where the walk finds one."""
    rng = random.Random(seed)
    for k in range(160):
        chain = _random_chain(rng, rng.randint(1, 3), zero_sizes=k % 3 == 1)
        if k % 2:
            chain = _with_unsaved(chain, rng)
        s = _walk(chain, rng)
        if s is not None:
            yield chain, s


def test_the_exchange_never_raises_the_peak_nor_delays_the_end():
    """O.20 on random valid schedules (1-3 stages, unsaved outputs, values of 0 bytes):
    the normalized schedule is valid in the independent interpreter, no longer, in normal
    form, with no larger peak nor makespan; a normal-form schedule is left as it is."""
    seen = changed = 0
    for chain, s in _random_walks(20):
        seen += 1
        ms, peak = _reference(chain, s)
        n = normalize(chain, s)
        nms, npeak = _reference(chain, n)
        assert is_normal_form(chain, n) and len(n) <= len(s)
        assert npeak <= peak and nms <= ms * (1 + 1e-12), (chain, str(s), str(n))
        changed += len(n) < len(s)
        if not violations(chain, s):
            assert list(n) == list(s)
    assert seen >= 80 and changed >= 40  # the walks break the normal form often


def test_the_violations_are_the_ones_named():
    c = Chain(fwd_time=[1, 1], bwd_time=[1, 1, 0], x_size=[2, 4, 4], tape_size=[6, 6],
              bandwidth=2.0)
    # Pret1 (4) leaves again untouched (5); Offt2 (6) undone by Pret2 (7) before any
    # compute op; the second Pret1 (9) is touched by B0 (B1 reads the plain x1 of Fck0)
    s = Schedule.parse("Fall0 Fall1 Offt1 Loss Pret1 Offt1 Offt2 Pret2 Fck0 Pret1 B1 B0")
    assert violations(c, s) == [("P", 4, 5), ("Q", 6, 7)]
    assert str(normalize(c, s)) == "Fall0 Fall1 Offt1 Loss Fck0 Pret1 B1 B0"
    assert violations(c, "Fall0 Fall1 Offt1 Loss Pret1 B1 B0") == []


def test_normal_form_schedules_fit_the_charge_and_the_bound():
    """O.21 on the normalized random schedules: transfers at most the compute ops' charge
    (op_weight), length at most the bound at the schedule's own makespan, and that bound
    no larger than O.14's."""
    tighter = 0
    for chain, s in _random_walks(21):
        n = normalize(chain, s)
        moves = sum(op.is_transfer for op in n)
        charge = sum(op_weight(chain, op.kind, op.index) for op in n if not op.is_transfer)
        assert moves <= charge, (chain, str(n))
        ms = simulate(chain, n).makespan
        assert len(n) <= normal_length_bound(chain, ms), (chain, str(n))
        assert length_bound(chain, ms) <= general_length_bound(chain, ms)
        tighter += length_bound(chain, ms) < general_length_bound(chain, ms)
    assert tighter >= 40  # O.21 is below O.14 on many of them


@pytest.mark.parametrize("L", [1, 2])
def test_some_optimal_schedule_is_in_normal_form(L):
    """O.20: the optimum over normal-form schedules is exhaustive-offload's (random chains
    at copy times of 0.3, 1 and 3 forwards, some outputs unsaved, the smallest feasible and
    a middle budget)."""
    rng = random.Random(200 + L)
    for k in range(12):
        chain = _random_chain(rng, L, zero_sizes=k % 4 == 1)
        if k % 2:
            chain = _with_unsaved(chain, rng)
        lo, hi = min_feasible_budget(chain), chain.store_all_memory()
        for b in sorted({lo, (lo + hi) // 2}):
            ex = registry.solve(chain, b, "exhaustive-offload")
            sched, ms = search_normal_form(chain, b)
            assert is_normal_form(chain, sched)
            assert ms == pytest.approx(ex.makespan, rel=1e-9), (chain, b)


@pytest.mark.slow
def test_some_optimal_schedule_is_in_normal_form_on_the_benchmark_chains():
    """O.20 on offload_dp_gap's distribution (2-3 stages, seeds 0-9, copy times 0.3, 1, 3
    forwards, with and without unsaved outputs, 5 budgets from the smallest feasible to
    store-all)."""
    mod = _bench.load("offload_dp_gap")
    for L in (2, 3):
        for seed in range(10):
            base = families.make("random", L, seed)
            for ratio in (0.3, 1.0, 3.0):
                for unsaved in (None, seed):
                    c = mod.with_channel(base, ratio, unsaved)
                    lo, hi = min_feasible_budget(c), c.store_all_memory()
                    for b in sorted({lo + j * (hi - lo) // 4 for j in range(5)}):
                        ex = registry.solve(c, b, "exhaustive-offload")
                        _, ms = search_normal_form(c, b)
                        assert ms == pytest.approx(ex.makespan, rel=1e-9), (c, b)


def test_proven_certifies_two_stages_with_cheap_copies():
    """O.21 in use: copies of 0.3 forwards (the smallest value), where O.14's bound of the
    optimum asks for more positions than the old guard of 16; the normal-form bound asks
    for 17, and the proven answer is exhaustive-offload's, over all schedules."""
    c = Chain(fwd_time=[1, 3], bwd_time=[0, 3, 2], x_size=[3, 4, 6], tape_size=[8, 8],
              bandwidth=20 / 3)
    budget = min_feasible_budget(c)
    ref = registry.solve(c, budget, "exhaustive-offload")
    assert general_length_bound(c, ref.makespan) > 16
    sol = registry.solve(c, budget, "ilp-offload", proven=True, max_proven_ops=20)
    assert sol.optimal_for == "all+offload" and sol.status == "optimal"
    assert sol.makespan == pytest.approx(ref.makespan, rel=1e-9)
    assert sol.info["length_bound"] == length_bound(c, sol.makespan) <= sol.info["max_ops"]
    assert sol.info["max_ops"] < general_length_bound(c, ref.makespan)
