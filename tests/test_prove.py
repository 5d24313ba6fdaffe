"""The ``prove`` solver (solvers/prove.py) and the extra relaxation rows (solvers/ilp/cuts.py):
every answer and every bound checked against exhaustive search and plain Dijkstra over the
simulator's states, the oracles with no modelling argument."""
from pathlib import Path

import pytest
from _tiers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import solvers
from remat_theory import Chain, simulate
from remat_theory.analysis.certificates import load, replay, reprove
from remat_theory.analysis.families import make
from remat_theory.model.errors import SolverOptionError
from remat_theory.strategies import chains, valid_schedules
from solvers.exhaustive import min_feasible_budget, search
from solvers.ilp import cuts
from solvers.ilp.relaxation import build_relaxation, lower_bound, relaxation_point, violated_rows
from solvers.prove import bounded_search

CERT_DIR = Path(__file__).resolve().parent.parent / "proofs" / "certificates"


def _budgets(chain):
    lo = min_feasible_budget(chain)
    hi = chain.store_all_memory()
    return sorted({lo, lo + (hi - lo) // 10, lo + (hi - lo) // 2})


@settings(max_examples=examples(30, 4), deadline=None)
@given(chains(1, 5, max_size=6, unsaved_outputs=None))
def test_bounded_search_cut_off_at_the_optimum_finds_nothing_and_above_finds_it(chain):
    """The pruning rule against plain Dijkstra (no heuristic, no cutoff): cut off at the
    optimum, the search runs dry with the cutoff as its bound (no faster schedule); cut off
    just above it, it returns a schedule of exactly the optimum; with no cutoff it is the
    optimum.  Chains with unsaved outputs drawn too (the simple heuristic there); the oracle
    asks the simulator about every operation (no peak precheck)."""
    for b in _budgets(chain):
        sched, opt, bound, stopped, _ = bounded_search(chain, b, float("inf"), heuristic="none",
                                                       precheck=False)
        assert sched is not None and stopped is None
        assert simulate(chain, sched, b).makespan == pytest.approx(opt)
        found, value, bound, stopped, _ = bounded_search(chain, b, opt)
        assert found is None and stopped is None and bound == opt
        found, value, bound, stopped, _ = bounded_search(chain, b, opt + 0.5)
        assert found is not None and value == pytest.approx(opt)
        assert simulate(chain, found, b).makespan == pytest.approx(opt)


@settings(max_examples=examples(20, 3), deadline=None)
@given(chains(1, 5, max_size=6))
def test_prove_equals_the_exhaustive_optimum(chain):
    """``prove`` with and without its relaxation step answers the exhaustive optimum, optimal
    over all schedules, and names what proved it."""
    for b in _budgets(chain):
        opt = search(chain, b)[1]
        for relax in (True, False):
            sol = solvers.solve(chain, b, "prove", relaxation=relax)
            assert sol.status == "optimal" and sol.optimal_for == "all"
            assert sol.makespan == pytest.approx(opt)
            assert sol.info["certificate"] in ("moment relaxation", "bounded search",
                                               "ideal makespan")
            if sol.info["certificate"] == "ideal makespan":  # no recomputation at all
                assert sol.makespan == pytest.approx(chain.ideal_makespan())
            elif not relax:
                assert sol.info["certificate"] == "bounded search"


def test_bounded_search_finds_a_schedule_faster_than_the_weak_dp():
    """On the persistence-gap certificate the weak DP's schedule (3) is not optimal (2): the
    search cut off at 3 returns the faster one, which is optimal."""
    cert = load(CERT_DIR / "persistence_gap_weak.json")
    sol = solvers.solve(cert.chain, cert.budget, "prove", relaxation=False)
    assert sol.status == "optimal" and sol.info["incumbent_from"] == "bounded search"
    assert sol.makespan == pytest.approx(cert.makespan("opt"))
    assert sol.makespan < solvers.solve(cert.chain, cert.budget, "dp-weak").makespan


def test_a_state_limit_leaves_the_weak_dp_schedule_with_a_bound_not_an_optimum():
    chain = make("random", 8, 1)
    b = min_feasible_budget(chain) + 3
    sol = solvers.solve(chain, b, "prove", relaxation=False, max_states=1)
    opt = search(chain, b)[1]
    assert sol.status == "time_limit" and "not proven optimal" in sol.message
    assert sol.schedule is not None and sol.bound <= opt + 1e-9 <= sol.makespan + 1e-9


def test_no_schedule_fits_is_proven_by_the_search():
    chain = make("random", 4, 0)
    lo = min_feasible_budget(chain)
    sol = solvers.solve(chain, lo - 1, "prove")
    assert sol.status == "infeasible" and sol.min_budget == lo


@pytest.mark.parametrize("opts,field", [({"cuts": "bogus"}, "bogus"),
                                        ({"relaxation_share": 0}, "relaxation_share"),
                                        ({"max_states": 0}, "max_states"),
                                        ({"relaxation": 1}, "relaxation")])
def test_bad_options_name_the_option(opts, field):
    with pytest.raises(SolverOptionError, match=field):
        solvers.solve(make("random", 3, 0), 100, "prove", **opts)


# ---------------------------------------------------------------------- the cuts

@settings(max_examples=examples(60, 11), deadline=None)
@given(st.data(), chains(1, 5, max_size=6))
def test_every_valid_schedule_satisfies_the_cut_rows(data, chain):
    """The constructive half of proofs/ilp.md section 11: a valid schedule's point, extended
    by :func:`cuts.cut_point`, satisfies every relaxation row and every added row at the
    schedule's own peak."""
    sched = data.draw(valid_schedules(chain, 40))
    peak = simulate(chain, sched).peak_memory
    model = build_relaxation(chain, peak)
    cuts.add_cuts(model, peak)
    point = cuts.cut_point(chain, sched, relaxation_point(chain, sched))
    assert violated_rows(model, point) == []


@settings(max_examples=examples(20, 3), deadline=None)
@given(chains(1, 5, max_size=6))
def test_the_bound_with_cuts_never_exceeds_the_exhaustive_optimum(chain):
    """With the rows, the relaxation's optimum stays at most the optimum, and at least the
    optimum without them (rows only ever raise it)."""
    for b in _budgets(chain):
        opt = search(chain, b)[1]
        plain = lower_bound(chain, b)
        cut = lower_bound(chain, b, cuts=cuts.FAMILIES)
        assert cut.proven_optimal and plain.proven_optimal
        assert plain.value - 1e-9 <= cut.value <= opt + 1e-9


def test_the_reach_rows_raise_the_lp_on_a_small_homogeneous_chain():
    """What the reach rows cut off: a fractional recomputation halving its way down (half
    Fn, half Fall per stage).  On the homogeneous 8-stage chain at budget 5 the LP optimum
    rises strictly (measured 29.03 to 32.5; the integer optimum, 43, is unchanged)."""
    import pulp
    chain = make("homogeneous", 8)
    values = []
    for fams in ((), ("reach",)):
        model = build_relaxation(chain, 5)
        if fams:
            cuts.add_cuts(model, 5, fams)
        for v in model.prob.variables():
            v.cat = pulp.LpContinuous
        model.prob.solve(pulp.HiGHS(msg=False))
        values.append(pulp.value(model.prob.objective))
    assert values[1] > values[0] + 1


def test_cuts_refuse_unsaved_outputs_and_unknown_families():
    chain = make("random", 3, 0)
    unsaved = chain.replace(output_saved=[False] + [True] * (chain.length - 1))
    model = build_relaxation(unsaved, 100)
    with pytest.raises(SolverOptionError, match="output_saved"):
        cuts.add_cuts(model, 100)
    with pytest.raises(SolverOptionError, match="nope"):
        cuts.add_cuts(build_relaxation(chain, 100), 100, ("nope",))


@pytest.mark.slow
def test_the_homogeneous_20_stage_proof_reproves():
    """proofs/certificates/prove_homogeneous20_tight.json: bounded search, run again, proves
    the weak DP's schedule optimal over all schedules (minutes on 2 cores: slow suite)."""
    cert = load(CERT_DIR / "prove_homogeneous20_tight.json")
    replay(cert)
    sol = reprove(cert, {"opt"})["opt"]
    assert sol.info["certificate"] == "bounded search"
    assert sol.makespan == cert.makespan("dp-weak")


@pytest.mark.parametrize("L", [7, 8, 9])
def test_revolve_closed_form_is_globally_optimal_beyond_exhaustive_reach(L):
    """proofs/homogeneous.md, Theorem 7.1's global part, where exhaustive search checked
    L <= 6: on the tape-dominated homogeneous chain at budget T + 3 + c, bounded search cut
    off at the closed form's makespan finds no faster schedule, and just above it finds one
    of exactly that makespan (longer chains: benchmarks/bench_prove.py --revolve)."""
    from math import comb

    def advances(l, c):
        r = 0
        while comb(c + r, c) < l:
            r += 1
        return r * l - (comb(c + 1 + r - 1, c + 1) if r >= 1 else 0)

    for c in (1, 2, 3):
        chain = Chain.homogeneous(L, 1.0, 2.0, 1, c + 1, 0.0)
        budget = c + 1 + 3 + c
        formula = L * 3.0 + advances(L, c)
        found, _, bound, stopped, _ = bounded_search(chain, budget, formula - 1e-9)
        assert found is None and stopped is None, (L, c)
        found, value, _, _, _ = bounded_search(chain, budget, formula + 0.5)
        assert value == formula, (L, c)


@settings(max_examples=examples(10, 3), deadline=None)
@given(chains(2, 4, max_size=6, unsaved_outputs=True))
def test_on_unsaved_outputs_prove_answers_the_optimum(chain):
    """A chain with unsaved outputs: the relaxation (proofs/ilp.md section 10), then the
    search with the simple bound; the answer is plain Dijkstra's, and the extra rows are
    refused."""
    for b in _budgets(chain):
        opt = bounded_search(chain, b, float("inf"), heuristic="none", precheck=False)[1]
        sol = solvers.solve(chain, b, "prove")
        assert sol.status == "optimal" and sol.makespan == pytest.approx(opt)
    if chain.has_unsaved_outputs:
        with pytest.raises(SolverOptionError, match="output_saved"):
            solvers.solve(chain, _budgets(chain)[-1], "prove", cuts="reach")


def test_the_incumbent_at_depth_is_the_weak_dp_s_under_a_minute():
    """Under a time limit the seed DPs run where their estimate fits; the estimate was
    numpy's old rate (23 s for dp-weak on 60 stages at the smallest budget, 1.2 s measured),
    so under 60 s prove started from the persistent DP's schedule (1540 against 1484)."""
    from remat_theory.analysis.families import make
    from solvers._deadline import Deadline
    from solvers.ilp import seeds
    chain = make("random", 60, 0)
    budget = 59  # the weak DP's smallest budget (bench_prove_depth.py's first budget)
    schedule, makespan, source = seeds.incumbent(chain, budget, True, Deadline(60.0))
    assert source == "dp-weak"
    assert makespan == solvers.solve(chain, budget, "dp-weak").makespan
    assert makespan < solvers.solve(chain, budget, "dp").makespan
