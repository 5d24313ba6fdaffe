"""The solver interface: registry, Solution, verification by replay, store-all."""
import pytest
from hypothesis import given, settings

import solvers
from remat_theory import Chain, Schedule, Solution, SolverError
from remat_theory.model.errors import RematError
from remat_theory.model.solution import FEASIBLE, INFEASIBLE, OPTIMAL
from remat_theory.strategies import chains
from solvers.registry import _REGISTRY, register
from solvers.store_all import store_all_schedule

C2 = Chain(fwd_time=[1, 2], bwd_time=[3, 4, 0.5], x_size=[4, 2, 3], tape_size=[5, 6],
           fwd_overhead=[1, 2], bwd_overhead=[1, 0, 2])


def test_registry_lists_store_all_and_exhaustive():
    names = solvers.names()
    assert "store-all" in names and "exhaustive" in names
    assert solvers.get("exhaustive").exact and not solvers.get("store-all").exact


def test_unknown_solver_and_option_are_named():
    with pytest.raises(SolverError, match="unknown solver 'nope'"):
        solvers.solve(C2, 20, "nope")
    with pytest.raises(SolverError, match="solver 'store-all' does not take option 'slots'"):
        solvers.solve(C2, 20, "store-all", slots=10)
    with pytest.raises(RematError, match="budget = -3 is negative"):
        solvers.solve(C2, -3, "store-all")
    with pytest.raises(RematError, match="chain must be a Chain"):
        solvers.solve("chain.json", 3, "store-all")


def test_store_all_solution():
    sol = solvers.solve(C2, 20, "store-all")
    assert sol.status == OPTIMAL and sol.makespan == 10.5 and sol.peak_memory == 20
    assert sol.schedule.tokens() == ["Fall0", "Fall1", "Loss", "B1", "B0"]
    assert sol.wall_time > 0 and sol.bound == sol.makespan
    d = sol.to_dict()
    assert d["schedule"] == sol.schedule.tokens() and d["status"] == "optimal"
    sol = solvers.solve(C2, 19, "store-all")
    assert sol.status == INFEASIBLE and sol.schedule is None and sol.min_budget == 20


@settings(max_examples=50)
@given(chains(1, 8))
def test_store_all_matches_simulator(chain):
    sol = solvers.solve(chain, chain.store_all_memory(), "store-all")
    assert sol.schedule == store_all_schedule(chain)
    assert sol.makespan == pytest.approx(chain.ideal_makespan())


def _liar(chain, budget):
    # Claims the ideal makespan for a schedule that recomputes.
    s = Schedule.parse("Fck0 Fn1 Loss Fck0 Fall1 B1 Fall0 B0")
    return Solution("liar", FEASIBLE, s, 10.5, 17, budget)


def _wrong_peak(chain, budget):
    s = Schedule.parse("Fall0 Fall1 Loss B1 B0")
    return Solution("wrong-peak", FEASIBLE, s, 10.5, 19, budget)


def _invalid(chain, budget):
    return Solution("invalid", FEASIBLE, Schedule.parse("Fall0 Loss B1 B0"), 1.0, 1, budget)


@pytest.mark.parametrize("func, message", [
    (_liar, "claims makespan 10.5 but the simulator measures 14.5"),
    (_wrong_peak, "claims peak 19 but the simulator measures 20"),
    (_invalid, "returned an invalid schedule: step 1 (Loss)"),
])
def test_registry_catches_lying_solvers(func, message):
    name = func.__name__
    register(name, optimal_for="none")(func)
    try:
        with pytest.raises(SolverError, match=message.replace("(", r"\(").replace(")", r"\)")):
            solvers.solve(C2, 100, name)
    finally:
        del _REGISTRY[name]


def test_solution_rejects_unknown_status():
    with pytest.raises(ValueError, match="status = 'great'"):
        Solution("x", "great", None, None, None, 1)


def test_reserved_option_names_are_refused():
    def clashing(chain, budget, *, solver="x"):
        raise AssertionError("never called")

    with pytest.raises(SolverError, match="option name 'solver' is reserved"):
        register("clashing", optimal_for="none")(clashing)
    assert "clashing" not in _REGISTRY
