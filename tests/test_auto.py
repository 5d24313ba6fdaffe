"""The ``auto`` solver: which solver answers, and that its answer is that solver's, checked
against independent oracles (exhaustive search, the simulator, the solvers run directly)."""
import pytest

import solvers
from remat_theory import Chain, SolverError, simulate
from remat_theory.analysis.families import make
from remat_theory.model.solution import CLASS_ALL, FEASIBLE, INFEASIBLE, OPTIMAL
from solvers import auto
from solvers.exhaustive import min_feasible_budget


def _budgets(chain):
    lo, hi = min_feasible_budget(chain), chain.store_all_memory()
    return sorted({lo, (lo + hi) // 2, hi - 1} - {hi})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_short_chains_get_the_proven_optimum(seed):
    chain = make("random", 5, seed)
    for budget in _budgets(chain):
        sol = solvers.solve(chain, budget, "auto")
        assert sol.solver == "auto" and sol.info["answered_by"] == "ilp"
        assert sol.message.startswith("answered by ilp")
        exact = solvers.solve(chain, budget, "exhaustive")  # the oracle
        if sol.status == OPTIMAL and sol.optimal_for == CLASS_ALL:
            assert sol.makespan == pytest.approx(exact.makespan, rel=1e-9)
        else:  # not proven: never below the optimum
            assert sol.makespan >= exact.makespan * (1 - 1e-9)


def test_store_all_when_it_fits_and_infeasible_budgets():
    chain = make("random", 4, 3)
    top = chain.store_all_memory()
    sol = solvers.solve(chain, top, "auto")
    assert sol.info["answered_by"] == "store-all" and sol.status == OPTIMAL
    assert sol.optimal_for == CLASS_ALL and sol.makespan == pytest.approx(chain.ideal_makespan())
    low = min_feasible_budget(chain)
    sol = solvers.solve(chain, low - 1, "auto")
    assert sol.status == INFEASIBLE and sol.schedule is None and sol.min_budget == low


def test_longer_chains_go_to_the_weak_dp(monkeypatch):
    monkeypatch.setattr(auto, "ILP_MAX_STAGES", 6)  # the rule, on a chain cheap to solve
    chain = Chain.homogeneous(8, fwd_time=1.0, bwd_time=2.0, x_size=1, tape_size=2)
    budget = 8
    sol = solvers.solve(chain, budget, "auto")
    direct = solvers.solve(chain, budget, "dp-weak")
    assert sol.info["answered_by"] == "dp-weak"
    assert (sol.status, sol.optimal_for, sol.makespan) == (direct.status, direct.optimal_for,
                                                           direct.makespan)


def test_a_short_time_limit_discretizes_or_falls_back():
    chain = make("random", 200, 0)
    budget = chain.store_all_memory() // 3
    plan = auto.plan(chain, budget, 1.0)
    assert [n for n, _, _ in plan] == ["dp"] and "slots" in plan[0][1]
    sol = solvers.solve(chain, budget, "auto", time_limit=1.0)
    assert sol.info["answered_by"] == "dp" and sol.info["slots"] == plan[0][1]["slots"]
    assert simulate(chain, sol.schedule, budget).makespan == pytest.approx(sol.makespan)
    assert sol.info["auto_time_limit"] == 1.0

    long = make("random", 600, 0)
    budget = long.store_all_memory() // 3
    assert auto.plan(long, budget, 0.1) == []
    sol = solvers.solve(long, budget, "auto", time_limit=0.1)
    assert sol.status == FEASIBLE and sol.info["answered_by"] in auto.FALLBACK
    best = min(solvers.solve(long, budget, n).makespan for n in auto.FALLBACK)
    assert sol.makespan == best and "not proven optimal" in sol.message


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), True, "5"])
def test_bad_time_limit_is_named(bad):
    with pytest.raises(SolverError, match="option time_limit"):
        solvers.solve(make("random", 3, 0), 100, "auto", time_limit=bad)
