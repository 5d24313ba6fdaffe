"""The default ilp on short chains: where the moment relaxation leaves a gap, exhaustive
search (within its own stage guard) proves the optimum before the time-expanded model is
built, and the answer says so (``info["certificate"]``)."""
from __future__ import annotations

import numpy as np
import pytest

import solvers
from remat_theory.model.chain import Chain
from remat_theory.model.simulator import simulate
from solvers import exhaustive
from solvers.ilp.relaxation import lower_bound
from remat_theory.model.solution import INFEASIBLE
from solvers.exhaustive import min_feasible_budget

# the chain of tests/test_ilp_bound.py where the relaxation stops at 20 below the optimum 25
GAP_CHAIN = Chain(fwd_time=[1.0, 5.0, 4.0], bwd_time=[1.0, 5.0, 2.0, 2.0], x_size=[3, 1, 2, 1],
                  tape_size=[1, 5, 3], fwd_overhead=[5, 3, 5], bwd_overhead=[0, 3, 0, 0])


def test_a_gap_on_a_short_chain_is_closed_by_exhaustive_search():
    assert lower_bound(GAP_CHAIN, 15).value < 25.0
    sol = solvers.solve(GAP_CHAIN, 15, "ilp")
    oracle = solvers.solve(GAP_CHAIN, 15, "exhaustive")
    assert sol.status == "optimal" and sol.optimal_for == "all"
    assert sol.info["certificate"] == "exhaustive search"
    assert sol.makespan == oracle.makespan
    assert simulate(GAP_CHAIN, sol.schedule, 15).makespan == sol.makespan


def test_beyond_the_stage_guard_exhaustive_search_is_not_run(monkeypatch):
    """The guard is exhaustive search's own: lowered below the chain, the proven model
    decides, with the same optimum."""
    monkeypatch.setattr(exhaustive, "DEFAULT_MAX_STAGES", 2)
    sol = solvers.solve(GAP_CHAIN, 15, "ilp")
    assert sol.info["certificate"] == "proven model" and "exhaustive" not in sol.info
    assert sol.makespan == 25.0


def _chain(rng, L):
    x = rng.integers(1, 10, L + 1)
    return Chain(fwd_time=rng.uniform(1, 10, L).round(1).tolist(),
                 bwd_time=rng.uniform(1, 10, L + 1).round(1).tolist(),
                 x_size=x.tolist(),
                 tape_size=(x[1:] + rng.integers(0, 10, L)).tolist(),
                 fwd_overhead=rng.integers(0, 30, L).tolist(),
                 bwd_overhead=rng.integers(0, 30, L + 1).tolist())


@pytest.mark.parametrize("seed", range(4))
def test_default_ilp_equals_exhaustive_on_random_short_chains(seed):
    """An independent generator (numpy; overheads up to three times the sizes, where the
    relaxation leaves gaps), budgets across [smallest feasible, store-all]: whichever step
    proves it, the default ilp's optimum is exhaustive search's."""
    rng = np.random.default_rng(seed)
    chain = _chain(rng, 4)
    lo, hi = exhaustive.min_feasible_budget(chain), chain.store_all_memory()
    for b in sorted({lo, (lo + hi) // 2, hi}):
        sol = solvers.solve(chain, b, "ilp")
        oracle = solvers.solve(chain, b, "exhaustive")
        assert sol.status == "optimal" and sol.optimal_for == "all"
        assert sol.makespan == pytest.approx(oracle.makespan)
        assert sol.info["certificate"] in ("moment relaxation", "exhaustive search")


C39 = Chain(fwd_time=[5, 0.584, 7, 7, 4], bwd_time=[7, 5, 7, 8.485, 9, 7.071],
            x_size=[726376, 637804, 783132, 1048576, 687167, 65536],
            tape_size=[637804, 783132, 1048582, 687171, 65540],
            output_saved=[True, True, False, True, False], name="c39")


def test_an_infeasible_budget_on_large_coprime_sizes_gets_its_exact_smallest_budget():
    """Issue #29: sizes in bytes with no common factor (c39, 5 stages), one byte below the
    smallest feasible budget: the min-budget MILP ran the whole time limit and answered
    "between"; exhaustive search's bottleneck search (its work independent of the sizes)
    answers exactly on chains within its stage guard."""
    low = min_feasible_budget(C39)
    sol = solvers.solve(C39, low - 1, "ilp", time_limit=30)
    assert sol.status == INFEASIBLE and sol.optimal_for == "all"
    assert sol.min_budget == low
    assert sol.info["min_budget_by"] == "exhaustive search (bottleneck)"
