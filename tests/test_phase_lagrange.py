"""The phase-block Lagrangian bound (solvers/bounds/phase_lagrange.py,
proofs/phase_lagrange.md) against exhaustive search: for ANY prices the bound is at most
the optimum (weak duality), so random prices are checked as well as the ascent's."""
from __future__ import annotations

import math

import numpy as np
import pytest

import solvers
from remat_theory.analysis.families import make, with_fall_costs
from solvers.bounds.phase_lagrange import Blocks, lagrangian_bound


def _budgets(chain):
    lo = solvers.solve(chain, 0, "dp-weak").min_budget
    hi = chain.store_all_memory()
    return sorted({lo, lo + 1, (lo + hi) // 2, hi})


def _cases(n, seed):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        L = int(rng.integers(1, 5))
        s = int(rng.integers(10 ** 6))
        chain = make("random", L, s, max_size=int(rng.integers(2, 8)))
        if rng.random() < 0.4:
            chain = with_fall_costs(chain, s)
        yield rng, chain


@pytest.mark.parametrize("drops", [False, True])
def test_never_above_the_optimum(drops):
    """Bound <= OPT (exhaustive search; with Drop when ``drops``) at random prices and after
    the ascent; and the ascent reaches the optimum on some of them (the check can fail)."""
    checked = reached = 0
    for rng, chain in _cases(25, 7 + drops):
        bwd = math.fsum(chain.bwd_time)
        for b in _budgets(chain):
            ex = solvers.solve(chain, b, "exhaustive", allow_drop=drops)
            assert ex.status == "optimal"
            opt = ex.makespan
            blocks = Blocks(chain, b, drops)
            L = chain.length
            for _ in range(3):
                mp = rng.normal(0, 3, (L + 2, L + 2))
                mt = rng.normal(0, 3, (L + 2, L + 2))
                value, _ = blocks.value(mp, mt)
                assert value + bwd <= opt + 1e-9, (chain, b, value + bwd, opt)
                checked += 1
            res = lagrangian_bound(chain, b, upper=opt, iterations=40, drops=drops)
            assert res["bound"] <= opt + 1e-9, (chain, b, res["bound"], opt)
            reached += res["bound"] >= opt - 1e-6
    assert checked >= 200
    assert reached >= 10


def test_below_every_weak_dp_schedule_and_above_ideal_at_tight_budgets():
    """On 10 stages at the smallest budget: at most the weak DP's makespan (a valid
    schedule) and well above the ideal makespan (the bound sees the recomputation)."""
    chain = make("random", 10, 0)
    b = solvers.solve(chain, 0, "dp-weak").min_budget
    weak = solvers.solve(chain, b, "dp-weak")
    res = lagrangian_bound(chain, b, upper=weak.makespan, iterations=150)
    assert res["bound"] <= weak.makespan + 1e-9
    assert res["bound"] > chain.ideal_makespan() + 0.5 * (weak.makespan - chain.ideal_makespan())


def test_infeasible_moment_and_unsaved_outputs():
    chain = make("random", 4, 1)
    assert lagrangian_bound(chain, chain.x_size[0])["infeasible"]
    from remat_theory.analysis.families import with_unsaved_outputs
    with pytest.raises(ValueError):
        Blocks(with_unsaved_outputs(chain, 0, 1.0), chain.store_all_memory())


def test_compiled_kernel_equals_numpy():
    """The numba kernel and the numpy program give the same block minima (random prices,
    both memory modes, with and without Drop)."""
    pytest.importorskip("numba")
    from solvers.bounds.phase_lagrange import _kernel
    assert _kernel() is not None
    rng = np.random.default_rng(3)
    for _, chain in _cases(20, 11):
        L = chain.length
        lo = solvers.solve(chain, 0, "dp-weak").min_budget
        b = int(rng.integers(lo, chain.store_all_memory() + 1))
        for drops in (False, True):
            for both in (False, True):
                mp = rng.normal(0, 3, (L + 2, L + 2))
                mt = rng.normal(0, 3, (L + 2, L + 2))
                a, _ = Blocks(chain, b, drops, both, "numpy").value(mp, mt)
                c, _ = Blocks(chain, b, drops, both, "auto").value(mp, mt)
                assert a == pytest.approx(c, abs=1e-9)


def test_prove_option_claims_optimal_only_at_the_optimum():
    """``prove -o lagrange=...`` with the relaxation off: every ``optimal`` answer equals
    exhaustive search's optimum, and some of them are proven by the Lagrangian bound."""
    by_lagrange = 0
    for _, chain in _cases(12, 5):
        for b in _budgets(chain):
            ex = solvers.solve(chain, b, "exhaustive")
            sol = solvers.solve(chain, b, "prove", lagrange=2.0, relaxation=False)
            assert sol.status == ex.status
            if ex.status == "optimal":
                assert sol.makespan == pytest.approx(ex.makespan)
                assert sol.bound <= ex.makespan + 1e-9
                by_lagrange += sol.info.get("certificate") == "phase Lagrangian"
    assert by_lagrange >= 3


def test_windows_never_above_the_optimum():
    """The windows' bound (solvers/bounds/window_lagrange.py): at random prices and after a
    few steps, never above exhaustive search's optimum; it reaches it on some."""
    from solvers.bounds.window_lagrange import Windows, window_bound
    checked = reached = 0
    for rng, chain in _cases(8, 21):
        bwd = math.fsum(chain.bwd_time)
        L = chain.length
        for b in _budgets(chain)[:2]:
            ex = solvers.solve(chain, b, "exhaustive")
            opt = ex.makespan
            for width in (1, 2):
                value, _ = Windows(chain, b, width).solve(rng.normal(0, 3, (L + 2, L + 2)),
                                                          rng.normal(0, 3, (L + 2, L + 2)), 10)
                assert value + bwd <= opt + 1e-7
                checked += 1
            res = window_bound(chain, b, width=1, upper=opt, schedule=ex.schedule,
                               iterations=5)
            assert res["bound"] <= opt + 1e-7
            reached += res["bound"] >= opt - 1e-6
    assert checked >= 30 and reached >= 3


def test_windows_at_a_tight_budget():
    """On 10 stages at the smallest budget, windows of 4 phases from the phase blocks'
    prices: at most the weak DP's makespan, well above the ideal one."""
    from solvers.bounds.window_lagrange import window_bound
    chain = make("random", 10, 0)
    b = solvers.solve(chain, 0, "dp-weak").min_budget
    weak = solvers.solve(chain, b, "dp-weak")
    ph = lagrangian_bound(chain, b, upper=weak.makespan, iterations=300, both=True)
    w = window_bound(chain, b, width=4, upper=weak.makespan, schedule=weak.schedule,
                     mu=ph["mu"], iterations=6)
    assert w["bound"] <= weak.makespan + 1e-7
    ideal = chain.ideal_makespan()
    assert w["bound"] > ideal + 0.5 * (weak.makespan - ideal)
