"""The moment relaxation (solvers/ilp_bound.py, proofs/ilp.md section 9): every valid
schedule is a point of it, so its optimum is a lower bound over all schedules; checked
against exhaustive search, the oracle with no modelling argument."""
import math

import pytest
from _tiers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from remat_theory import Chain, simulate
from remat_theory.model.schedule import Schedule
from remat_theory.analysis.families import make
from remat_theory.strategies import chains, valid_schedules
from _breakpoints import breakpoints, optimal_search
from solvers.exhaustive import min_feasible_budget, search
from solvers.ilp.relaxation import (build_relaxation, lower_bound, min_budget_bound, objective_of,
                               relaxation_point, violated_rows)


@settings(max_examples=examples(60, 11), deadline=None)
@given(st.data(), chains(1, 5, max_size=6))
def test_every_valid_schedule_is_a_point_of_the_relaxation(data, chain):
    """The constructive half of Theorem 3: the map of section 9 sends a valid schedule to a
    point that satisfies every row at the schedule's own peak, with an objective no larger
    than its makespan; and the point is not feasible one byte below that peak only when a
    backward peak is the schedule's peak (the relaxation sees nothing else)."""
    sched = data.draw(valid_schedules(chain, 40))
    ref = simulate(chain, sched)
    point = relaxation_point(chain, sched)
    model = build_relaxation(chain, ref.peak_memory)
    assert violated_rows(model, point) == []
    assert objective_of(chain, point) <= ref.makespan + 1e-9
    # the min-budget variant at this point: the budget row binds at the largest backward peak
    mb = build_relaxation(chain, None)
    assert violated_rows(mb, dict(point, budget=ref.peak_memory)) == []


def test_the_point_of_a_schedule_names_what_it_holds():
    """A hand-checked point: 2 stages, store-all, then Fn-recompute in phase 1."""
    chain = Chain([1.0, 2.0], [1.0, 1.0, 1.0], [1, 2, 3], [4, 5])
    sched = "Fall0 Fn1 Loss Fall0 Fall1 B1 B0"
    # Fn1 reads t_1's copy of x_1 (no plain x_1 is held), so it frees t_1: a value of stage
    # 1 made in the loss phase and freed there (a_0_2); the plain x_2 it makes is held at the
    # loss, which frees it; phase 1 makes t_1 and t_2 again for B1 and B0
    point = relaxation_point(chain, Schedule.parse(sched))
    assert point["z_0_2"] == point["c_1_2"] == point["a_0_2"] == 1
    assert point["c_0_2"] == point["z_1_2"] == 0
    assert point["h_0_2"] == point["h_1_2"] == point["g_1_2"] == 0 and point["g_2_2"] == 1
    assert point["z_0_1"] == point["z_1_1"] == 1 and point["c_0_1"] == point["c_1_1"] == 0
    assert point["h_0_1"] == point["h_1_1"] == 1 and point["g_1_1"] == 0
    assert objective_of(chain, point) == simulate(chain, sched).makespan


@settings(max_examples=examples(25, 3), deadline=None)
@given(chains(1, 5, max_size=6))
def test_the_bound_never_exceeds_the_exhaustive_optimum(chain):
    """At every budget breakpoint (and one below each): the relaxation is infeasible exactly
    where no schedule exists or earlier never; its optimum is at most the exhaustive optimum."""
    for b, opt in breakpoints(chain).items():
        res = lower_bound(chain, b)
        if opt is None:
            continue  # infeasible budgets: the relaxation may or may not see it
        assert not res.infeasible, (b, opt)
        assert res.proven_optimal
        assert res.value <= opt + 1e-9, (b, res.value, opt)
        # started from an optimal schedule's point, the same optimum
        best = optimal_search(chain, b)[0]  # breakpoints' own search
        started = lower_bound(chain, b, schedule=best)
        assert started.proven_optimal and started.value == pytest.approx(res.value)


@settings(max_examples=examples(15, 4), deadline=None)
@given(chains(1, 5, max_size=6))
def test_infeasibility_and_min_budget_bound(chain):
    """A budget where the relaxation is infeasible has no schedule at all, and the min-budget
    relaxation never exceeds the exhaustive smallest budget."""
    lo = min_feasible_budget(chain)
    mb = min_budget_bound(chain)
    assert mb is not None and mb <= lo
    assert not lower_bound(chain, lo).infeasible
    assert lower_bound(chain, mb - 1).infeasible
    assert lower_bound(chain, chain.x_size[0] - 1).infeasible


@pytest.mark.parametrize("L,seed,kind", [(6, 0, "tight"), (8, 1, "tight"), (8, 2, "middle")])
def test_the_bound_meets_the_optimum_on_benchmark_chains(L, seed, kind):
    """On random benchmark chains (bench_ilp.py budgets) the relaxation reaches the optimum
    (the measured fact the solver's certificate relies on; it is not a theorem, which is why
    the solver checks it on each instance rather than assuming it)."""
    from benchmarks.bench_ilp import budgets_of

    chain = make("random", L, seed)
    b = budgets_of(chain)[kind]
    opt = search(chain, b)[1]
    assert lower_bound(chain, b).value == pytest.approx(opt)


def test_a_mip_start_cannot_make_highs_misreport_the_optimum():
    """HiGHS 1.16 with presolve, given this MIP start, reported an optimum of 1.0 (and an
    equal dual bound) while its returned point is worth 2.0, the true optimum: the driver
    reads the objective at the point and solves again without presolve when they differ."""
    chain = Chain(fwd_time=[1.0, 0.0, 0.0, 0.0, 0.0], bwd_time=[0.0] * 6, x_size=[1] * 6,
                  tape_size=[2, 1, 1, 1, 6])
    best, opt = search(chain, 11)[:2]
    assert opt == 2.0
    plain = lower_bound(chain, 11)
    started = lower_bound(chain, 11, schedule=best)
    assert plain.proven_optimal and started.proven_optimal
    assert plain.value == pytest.approx(2.0) and started.value == pytest.approx(2.0)


def test_a_misreported_start_costs_the_bound_a_restart_not_the_run():
    """HiGHS 1.16 with presolve announces the weak DP's start on the random 30-stage chain
    at its smallest budget (57) at 588 where its point is worth 596 (backward times
    aside).  The driver used to notice only at the end and solve again without presolve in
    the 0.01 s left, so a run of any length answered a bound of 208 (the backward times
    alone, below even the ideal makespan 374).  The incumbent is now checked as it is
    announced and the run restarted at once: the bound is at least the rows' own LP
    optimum (weak duality, computed here apart with HiGHS's LP solver) and at most the
    schedule's makespan."""
    import solvers
    from solvers.bounds.lp_tree import highs_lp, lp_rows
    from solvers.ilp import backends
    from solvers.ilp.relaxation import relaxation_point

    chain = make("random", 30, 0)
    weak = solvers.solve(chain, 57, "dp-weak")
    assert weak.makespan == 793.0
    rows = lp_rows(chain, 57)
    lp = highs_lp(rows)
    lp.run()
    root = lp.getInfo().objective_function_value + rows.constant
    assert root > chain.ideal_makespan()
    model = build_relaxation(chain.scaled_sizes(chain.size_gcd()), 57)
    res = backends.run_model(model, "highs", 6.0, relaxation_point(chain, weak.schedule), 1,
                             chain.ideal_makespan())
    assert any("announced below" in r for r in res.retries)
    assert res.bound is not None and root - 1e-6 <= res.bound <= weak.makespan + 1e-6


def test_a_run_past_its_limit_is_interrupted_with_a_valid_bound_and_never_proven(monkeypatch):
    """HiGHS does not check its time limit inside every step of its search (its first cut
    round on a deep relaxation was seen to run far past it); the driver interrupts a run
    from HiGHS's callback once the limit has passed.  Here the grace is made negative so
    that the interrupt comes before HiGHS's own limit, on a relaxation HiGHS cannot prove in
    that time: the run stops at once, says time limit, is not proven, and its bound is
    still a bound (at most the weak DP's makespan, which the relaxation's optimum reaches
    here: proofs/ilp.md section 9; at least the rows' LP optimum)."""
    import time

    import solvers
    from solvers.bounds.lp_tree import highs_lp, lp_rows
    from solvers.ilp import backends
    from solvers.ilp.relaxation import relaxation_point

    chain = make("random", 30, 0)
    weak = solvers.solve(chain, 85, "dp-weak")
    assert weak.makespan == 531.0
    model = build_relaxation(chain.scaled_sizes(chain.size_gcd()), 85)
    monkeypatch.setattr(backends._WarmHighs, "OVERRUN_GRACE", -58.0)
    t0 = time.perf_counter()
    res = backends.run_model(model, "highs", 60.0, relaxation_point(chain, weak.schedule), 1,
                             chain.ideal_makespan())
    assert time.perf_counter() - t0 < 30  # interrupted by the driver, not by HiGHS at 60 s
    assert not res.proven and res.status_text.startswith("Time limit reached (interrupted")
    rows = lp_rows(chain, 85)
    lp = highs_lp(rows)
    lp.run()
    root = lp.getInfo().objective_function_value + rows.constant
    assert res.bound is not None and root - 1e-6 <= res.bound <= weak.makespan - 1


# A chain where the relaxation stays below the optimum (found by a random search): the
# phases must order their operations around forward overheads, which it does not see.
GAP_CHAIN = Chain(fwd_time=[1.0, 5.0, 4.0], bwd_time=[1.0, 5.0, 2.0, 2.0], x_size=[3, 1, 2, 1],
                  tape_size=[1, 5, 3], fwd_overhead=[5, 3, 5], bwd_overhead=[0, 3, 0, 0])


def test_where_the_bound_leaves_a_gap_the_proven_model_decides(monkeypatch):
    """The default ilp does not trust the relaxation to be exact: here its bound (20) is
    below the optimum (25), so the answer comes from the proven model, with the bound as a
    cut, and equals exhaustive search (with exhaustive search's own step switched off: it
    would decide this 3-stage chain first)."""
    import solvers
    import solvers.exhaustive

    monkeypatch.setattr(solvers.exhaustive, "DEFAULT_MAX_STAGES", 0)

    opt = search(GAP_CHAIN, 15)[1]
    assert opt == 25.0
    assert lower_bound(GAP_CHAIN, 15).value == pytest.approx(20.0)
    sol = solvers.solve(GAP_CHAIN, 15, "ilp")
    assert sol.status == "optimal" and sol.optimal_for == "all" and sol.makespan == opt
    assert sol.info["certificate"] == "proven model"
    assert sol.info["relaxation_cut"] == pytest.approx(20.0)


def test_where_the_proven_model_is_too_large_a_gap_is_feasible_not_optimal(monkeypatch):
    """With the proven model refused (max_binaries), a gap the relaxation leaves is reported
    as such: status feasible, the relaxation's bound, never optimal (exhaustive search's
    step switched off: on this 3-stage chain it would prove the optimum)."""
    import solvers
    import solvers.exhaustive

    monkeypatch.setattr(solvers.exhaustive, "DEFAULT_MAX_STAGES", 0)

    sol = solvers.solve(GAP_CHAIN, 15, "ilp", max_binaries=10)
    assert sol.status == "feasible" and sol.info["certificate"] is None
    assert sol.makespan >= 25.0 and sol.bound == pytest.approx(20.0)
    assert "not proven optimal" in sol.message
    # the fast mode's answer is certified only when the bound reaches it
    fast = solvers.solve(GAP_CHAIN, 15, "ilp", passes=1, pairs=True, certify=True)
    assert fast.optimal_for == "weak-runs<=1" and fast.info["relaxation"]["bound"] == pytest.approx(20.0)


def test_a_certified_fast_mode_answer_is_optimal_for_all_schedules():
    import solvers

    chain = make("random", 8, 1)
    from benchmarks.bench_ilp import budgets_of

    b = budgets_of(chain)["tight"]
    fast = solvers.solve(chain, b, "ilp", passes=1, pairs=True, certify=True)
    assert fast.status == "optimal" and fast.optimal_for == "all"
    assert fast.info["certificate"] == "moment relaxation"
    assert fast.makespan == search(chain, b)[1]


def test_an_infeasible_budget_is_proven_by_the_relaxation_with_its_smallest_budget():
    import solvers

    lo = min_feasible_budget(GAP_CHAIN)
    sol = solvers.solve(GAP_CHAIN, lo - 1, "ilp")
    assert sol.status == "infeasible" and sol.min_budget == lo
    # without the proven model: the smallest budget is proven when the min-budget
    # relaxation meets the DP's / fast mode's, else reported as a range
    big = solvers.solve(GAP_CHAIN, lo - 1, "ilp", max_binaries=10)
    assert big.status == "infeasible"
    if big.min_budget is None:
        assert big.info["min_budget_bound"] <= lo <= big.info["min_budget_found"]
    else:
        assert big.min_budget == lo


def test_a_relaxation_contradicting_a_schedule_is_an_error_not_an_answer(monkeypatch):
    """Theorem 3 says the bound never exceeds a valid schedule's makespan; if a solver bug
    ever made it do so, ilp raises rather than report an optimum (or infeasibility)."""
    import solvers
    import solvers.ilp.relaxation as ib
    from remat_theory.model.errors import SolverError

    chain = make("random", 5, 0)
    b = chain.store_all_memory()
    monkeypatch.setattr(ib, "lower_bound", lambda *a, **k: ib.Bound(1e9, False, True, "x", 0.0))
    with pytest.raises(SolverError, match="contradicts a valid schedule"):
        solvers.solve(chain, b, "ilp")
    monkeypatch.setattr(ib, "lower_bound", lambda *a, **k: ib.Bound(None, True, True, "x", 0.0))
    with pytest.raises(SolverError, match="contradicts a valid schedule"):
        solvers.solve(chain, b, "ilp")


def test_a_time_limit_leaves_the_dp_schedule_with_a_bound_not_an_optimum():
    """20 stages at a tight budget: the relaxation needs tens of seconds to reach the weak
    DP's makespan, so a 1 s limit answers time_limit with that schedule and the proven
    bound (at least the ideal makespan), never optimal."""
    import solvers
    from benchmarks.bench_ilp import budgets_of

    chain = make("random", 20, 0)
    b = budgets_of(chain)["tight"]
    sol = solvers.solve(chain, b, "ilp", time_limit=1.0)
    weak = solvers.solve(chain, b, "dp-weak")
    assert sol.status == "time_limit" and sol.schedule is not None
    assert sol.makespan <= weak.makespan + 1e-9
    assert chain.ideal_makespan() <= sol.bound <= sol.makespan
    assert sol.info["certificate"] is None and "not proven optimal" in sol.message


@settings(max_examples=examples(12, 3), deadline=None)
@given(chains(1, 4, max_size=6, fall_costs=True))
def test_fall_costs_the_bound_never_exceeds_the_exhaustive_optimum(chain):
    for b, opt in breakpoints(chain).items():
        if opt is None:
            continue
        res = lower_bound(chain, b, schedule=optimal_search(chain, b)[0])
        assert res.proven_optimal and not res.infeasible
        assert res.value <= opt + 1e-9, (b, res.value, opt)
