"""The moment relaxation with its objective capped below a makespan
(``relaxation.capped_bound``, ``prove -o cap=true``): infeasible exactly when no relaxation
point is faster, so on chains where exhaustive search says the weak DP is optimal it proves
the DP's makespan, and capped above the optimum it finds a point instead of a proof, at
every feasibility tolerance it is given (its docstring: why a looser one stays sound)."""
import pytest
from _tiers import examples
from hypothesis import assume, given, settings

import solvers
from remat_theory.analysis.families import make
from remat_theory.model.errors import RematError, SolverOptionError
from remat_theory.strategies import chains
from solvers.bounds.lp_tree import granularity
from solvers.exhaustive import min_feasible_budget, search
from solvers.ilp import relaxation

#: the driver's, HiGHS's own, and looser still
TOLERANCES = (1e-9, 1e-6, 1e-4)


def _instances():
    for seed in range(4):
        chain = make("random", 5, seed)
        lo = solvers.solve(chain, 0, "dp-weak").min_budget
        for budget in (lo, (lo + chain.store_all_memory()) // 2):
            yield chain, budget


@pytest.mark.parametrize("k", range(8))
def test_capped_at_the_optimum_it_proves_it_and_above_it_finds_a_point(k):
    chain, budget = list(_instances())[k]
    opt = search(chain, budget)[1]  # exhaustive: the optimum over all schedules
    plain = relaxation.lower_bound(chain, budget, time_limit=60)
    assert plain.proven_optimal
    at = relaxation.capped_bound(chain, budget, opt, time_limit=60)
    if plain.value >= opt - 1e-9:  # the relaxation's optimum is the optimum
        assert at.proven_optimal and at.value == opt
    else:  # a relaxation point below the optimum: the cap finds one, proves nothing
        assert not at.proven_optimal and "cannot prove" in at.status_text
    worse = solvers.solve(chain, budget, "recompute-all").makespan
    if worse > plain.value + 1e-9:
        above = relaxation.capped_bound(chain, budget, worse, time_limit=60)
        assert not above.proven_optimal
        assert "cannot prove" in above.status_text
        assert above.value is None or above.value <= plain.value + 1e-6


def _small_chains():
    """Random chains of 4-6 stages, each at its smallest budget and at a tight one."""
    for L, seed in ((4, 1), (5, 4), (6, 2), (6, 5)):
        chain = make("random", L, seed)
        lo = solvers.solve(chain, 0, "dp-weak").min_budget
        for budget in (lo, lo + (chain.store_all_memory() - lo) // 4):
            yield chain, budget


@pytest.mark.parametrize("k", range(8))
def test_every_tolerance_proves_only_what_exhaustive_search_confirms(k):
    """The tolerance parameter against exhaustive search: capped one granule above the
    optimum (the optimal schedule's point lies under the cap) no tolerance proves
    anything; capped at the optimum each proves it exactly when the relaxation's own
    optimum (solved at the driver's tolerance) reaches it."""
    chain, budget = list(_small_chains())[k]
    opt = search(chain, budget)[1]
    assert granularity(chain) > 0
    _agrees_with_exhaustive_search(chain, budget, opt)
    for tol in TOLERANCES:
        sol = solvers.solve(chain, budget, "prove", cap=True, cap_tolerance=tol,
                            time_limit=120)
        assert sol.status == "optimal" and sol.makespan == pytest.approx(opt), tol


def _agrees_with_exhaustive_search(chain, budget, opt):
    delta = granularity(chain)
    plain = relaxation.lower_bound(chain, budget, time_limit=60)
    assert plain.proven_optimal and plain.value <= opt + 1e-9
    for tol in TOLERANCES:
        above = relaxation.capped_bound(chain, budget, opt + delta, time_limit=60,
                                        feasibility_tolerance=tol)
        assert not above.proven_optimal, (tol, above)
        at = relaxation.capped_bound(chain, budget, opt, time_limit=60,
                                     feasibility_tolerance=tol)
        assert at.proven_optimal == (plain.value >= opt - 1e-9), (tol, plain, at)
    return plain.value < opt - 1e-9


#: a chain with overheads and unsaved outputs where the relaxation's optimum (28) is below
#: the optimum (30) at budget 19 (found by the test below)
GAP_CHAIN = {"format": "remat-chain/1", "name": "gap", "fwd_time": [2.0, 2.0],
             "bwd_time": [3.0, 10.0, 9.0], "x_size": [6, 5, 2], "tape_size": [6, 6],
             "fwd_overhead": [3, 5], "bwd_overhead": [1, 1, 2], "fall_time": [2.0, 4.0],
             "fall_overhead": [1, 2], "output_saved": [False, False]}


def test_where_the_relaxation_is_below_the_optimum_no_tolerance_proves_it():
    chain = type(make("random", 2, 0)).from_dict(GAP_CHAIN)
    opt = search(chain, 19)[1]
    assert opt == 30
    assert _agrees_with_exhaustive_search(chain, 19, opt)  # the gap is there
    for tol in TOLERANCES:
        at = relaxation.capped_bound(chain, 19, opt, time_limit=60, feasibility_tolerance=tol)
        assert "cannot prove" in at.status_text and at.value <= 28 + 1e-6


@settings(max_examples=examples(60, 8), deadline=None)
@given(chains(1, 5, max_size=6, fall_costs=None, unsaved_outputs=None))
def test_on_chains_with_overheads_every_tolerance_agrees_with_exhaustive_search(chain):
    """The same on chains with overheads, recording costs and unsaved outputs, where the
    relaxation's own optimum is sometimes below the optimum (then capped at the optimum
    every tolerance finds a point instead of a proof), at the smallest budget and a tight
    one."""
    assume(granularity(chain) > 0)
    lo = min_feasible_budget(chain)
    for b in sorted({lo, lo + (chain.store_all_memory() - lo) // 10}):
        _agrees_with_exhaustive_search(chain, b, search(chain, b)[1])


def test_prove_with_the_cap_answers_the_exhaustive_optimum():
    chain = make("random", 6, 1)
    budget = solvers.solve(chain, 0, "dp-weak").min_budget + 2
    opt = search(chain, budget)[1]
    sol = solvers.solve(chain, budget, "prove", cap=True, time_limit=120)
    assert sol.status == "optimal" and sol.makespan == pytest.approx(opt)
    if sol.info["certificate"] == "moment relaxation":
        assert sol.info["relaxation"]["capped"] is True


def test_the_tolerance_is_checked():
    chain = make("random", 4, 0)
    with pytest.raises(RematError, match="feasibility_tolerance"):
        relaxation.capped_bound(chain, chain.store_all_memory(), 100.0,
                                feasibility_tolerance=1e-12)
    with pytest.raises(Exception, match="cap_tolerance"):
        solvers.solve(chain, chain.store_all_memory(), "prove", cap=True, cap_tolerance=2.0)


def test_the_cap_needs_integer_times():
    chain = make("random", 4, 0)
    d = chain.to_dict()
    d["fwd_time"] = [t + 0.5 for t in d["fwd_time"]]
    frac = type(chain).from_dict(d)
    assert granularity(frac) == 0.0
    with pytest.raises(RematError, match="not all integers"):
        relaxation.capped_bound(frac, frac.store_all_memory(), 100.0)
    # prove refuses the option there, naming it and why (it once ignored it silently)
    budget = solvers.solve(frac, 0, "dp-weak").min_budget + 2
    with pytest.raises(SolverOptionError, match="cap = true needs integer times"):
        solvers.solve(frac, budget, "prove", cap=True, time_limit=120)
    # without the option the same instance is answered exactly
    sol = solvers.solve(frac, budget, "prove", time_limit=120)
    assert sol.status == "optimal"
    assert sol.makespan == pytest.approx(search(frac, budget)[1])


def test_the_cap_is_refused_with_extra_rows():
    chain = make("random", 4, 0)
    with pytest.raises(SolverOptionError, match="cap = true cannot be combined with cuts"):
        solvers.solve(chain, chain.store_all_memory(), "prove", cap=True, cuts="reach")
