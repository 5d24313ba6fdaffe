"""The ``auto`` solver: which solver answers, and that its answer is that solver's, checked
against independent oracles (exhaustive search, the simulator, the solvers run directly)."""
from unittest import mock

import pytest
from _tiers import examples
from hypothesis import given, settings

import solvers
from remat_theory import Chain, SolverError, simulate
from remat_theory.analysis.families import make
from remat_theory.model.solution import CLASS_ALL, FEASIBLE, INFEASIBLE, OPTIMAL, TIME_LIMIT
from remat_theory.strategies import chains_and_budgets
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
    chain = Chain.homogeneous(9, fwd_time=1.0, bwd_time=2.0, x_size=1, tape_size=2)
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
    assert sol.info["auto_tried"][0].startswith("dp: ")
    if sol.info["answered_by"] == "dp":
        assert sol.info["slots"] == plan[0][1]["slots"]
    else:  # a loaded machine: the slot DP reached the limit, a baseline answered
        assert sol.info["auto_tried"][0] == "dp: time_limit"
        assert sol.info["answered_by"] in auto.FALLBACK
    assert simulate(chain, sol.schedule, budget).makespan == pytest.approx(sol.makespan)
    assert sol.info["auto_time_limit"] == 1.0

    long = make("random", 600, 0)
    budget = long.store_all_memory() // 3
    assert auto.plan(long, budget, 0.1) == []
    sol = solvers.solve(long, budget, "auto", time_limit=0.1)
    assert sol.status == FEASIBLE and sol.info["answered_by"] in auto.FALLBACK
    ran = [t.split(":")[0] for t in sol.info["auto_tried"] if "not run" not in t]
    assert ran[0] == auto.FALLBACK[0]  # the cheapest always runs
    best = min(solvers.solve(long, budget, n).makespan for n in ran)  # of those that fit
    assert sol.makespan == best and "not proven optimal" in sol.message


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), True, "5"])
def test_bad_time_limit_is_named(bad):
    with pytest.raises(SolverError, match="option time_limit"):
        solvers.solve(make("random", 3, 0), 100, "auto", time_limit=bad)


# Issue #29: auto said "infeasible" where a schedule exists.
C39 = Chain(fwd_time=[5, 0.584, 7, 7, 4], bwd_time=[7, 5, 7, 8.485, 9, 7.071],
            x_size=[726376, 637804, 783132, 1048576, 687167, 65536],
            tape_size=[637804, 783132, 1048582, 687171, 65540],
            output_saved=[True, True, False, True, False], name="c39")
# every output saved, forward overheads only: the weak DP's smallest budget is 10, the
# global one 9 (found by a random search; exhaustive search is the oracle below)
OVERHEAD_GAP = Chain([1, 3], [2, 2, 3], [1, 2, 0], [4, 0], fwd_overhead=[4, 5])


def test_sizes_without_a_common_factor_get_a_schedule_where_one_exists():
    """c39: sizes in bytes with gcd 1 (2.8 million memory units); at 3568248 the persistent
    DP has no schedule but one exists (exhaustive search: 92.308)."""
    budget = 3568248
    exact = solvers.solve(C39, budget, "exhaustive")
    assert exact.status == OPTIMAL
    assert solvers.solve(C39, budget, "dp").status == INFEASIBLE  # the class answer stays
    sol = solvers.solve(C39, budget, "auto")
    assert sol.status == OPTIMAL and sol.optimal_for == CLASS_ALL
    assert sol.makespan == pytest.approx(exact.makespan, rel=1e-9)
    assert {p["solver"] for p in sol.info["proofs"]} >= {sol.info["answered_by"]}
    below = solvers.solve(C39, budget - 1, "auto")
    assert below.status == INFEASIBLE and below.optimal_for == CLASS_ALL
    assert below.min_budget == budget == min_feasible_budget(C39)


def _class_first(monkeypatch, *exclude):
    """auto with the weak DP planned first (as on a long chain), so that a class answer
    must be decided over all schedules; ``exclude``: deciders made unavailable."""
    monkeypatch.setattr(auto, "plan", lambda chain, budget, tl: [("dp-weak", {}, "test")])
    for name in exclude:
        monkeypatch.setattr(auto, {"exhaustive": "EXHAUSTIVE_MAX_STAGES",
                                   "ilp": "ILP_MAX_STAGES"}[name], 0)


@pytest.mark.parametrize("exclude", [(), ("exhaustive",)])
def test_a_class_answer_infeasible_is_decided_over_all_schedules(monkeypatch, exclude):
    chain = OVERHEAD_GAP
    low = min_feasible_budget(chain)
    weak = solvers.solve(chain, low, "dp-weak")
    assert weak.status == INFEASIBLE and weak.min_budget > low  # the class's budget is higher
    _class_first(monkeypatch, *exclude)
    sol = solvers.solve(chain, low, "auto")
    exact = solvers.solve(chain, low, "exhaustive")
    assert sol.status == OPTIMAL and sol.optimal_for == CLASS_ALL
    assert sol.makespan == pytest.approx(exact.makespan, rel=1e-9)
    assert sol.info["answered_by"] == ("ilp" if exclude else "exhaustive")
    first = sol.info["proofs"][0]
    assert (first["solver"], first["status"], first["optimal_for"], first["min_budget"]) == \
        ("dp-weak", INFEASIBLE, "weakly-persistent", weak.min_budget)
    below = solvers.solve(chain, low - 1, "auto")
    assert below.status == INFEASIBLE and below.optimal_for == CLASS_ALL
    assert below.min_budget in (low, None)


def test_undecided_is_never_infeasible(monkeypatch):
    """When no solver covering all schedules can run, a class's "infeasible" becomes "not
    decided" (status time_limit, no schedule), with the class's smallest budget."""
    chain = OVERHEAD_GAP
    low = min_feasible_budget(chain)
    _class_first(monkeypatch, "exhaustive", "ilp")
    sol = solvers.solve(chain, low, "auto")
    assert sol.status == TIME_LIMIT and sol.schedule is None
    assert "not proven optimal" in sol.message and "not decided" in sol.message
    assert sol.info["class_min_budget"] == solvers.solve(chain, low, "dp-weak").min_budget
    # below the memory lower bound nothing fits: that is proven without a search
    lb = chain.memory_lower_bound()
    sol = solvers.solve(chain, lb - 1, "auto")
    assert sol.status == INFEASIBLE and sol.optimal_for == CLASS_ALL
    assert sol.info["answered_by"] == "memory lower bound"


@settings(max_examples=examples(25, 6), deadline=None)
@given(chains_and_budgets(1, 4, max_size=8, max_time=6, overheads=True, fall_costs=None,
                          unsaved_outputs=None))
def test_auto_agrees_with_exhaustive_on_feasibility(cb):
    """The referee's property: auto (class DP first) says infeasible exactly where
    exhaustive search finds no schedule, and its optimum over all is exhaustive's."""
    chain, budget = cb
    exact = solvers.solve(chain, budget, "exhaustive")
    with mock.patch.object(auto, "plan", lambda c, b, tl: [("dp-weak", {}, "test")]):
        sol = solvers.solve(chain, budget, "auto")
    assert (sol.status == INFEASIBLE) == (exact.status == INFEASIBLE)
    if sol.status == OPTIMAL and sol.optimal_for == CLASS_ALL:
        assert sol.makespan == pytest.approx(exact.makespan, rel=1e-9)
    if sol.schedule is not None:
        assert sol.makespan >= exact.makespan * (1 - 1e-9)


def test_a_chain_too_long_for_the_time_limit_is_refused_up_front(monkeypatch):
    """Issue #29: a time limit holds at any size.  When not even the fastest baseline (its
    replay included) fits, auto refuses before any work, naming a limit that would do."""
    chain = Chain.homogeneous(2000, x_size=1, tape_size=1)
    monkeypatch.setattr(auto, "FALLBACK_SECONDS_PER_STAGE", 1.0)  # as if 2,000 s were needed
    with pytest.raises(SolverError, match=r"raise the time limit to about \d+ s"):
        solvers.solve(chain, chain.store_all_memory() // 2, "auto", time_limit=1.0)
