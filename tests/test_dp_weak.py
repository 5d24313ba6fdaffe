"""The weak-persistence DP (solvers/dp_weak.py) against exhaustive search restricted to the
weakly persistent class, the persistent DP, the unrestricted optimum and the simulator."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import solvers
from remat_theory import Chain, simulate
from remat_theory.analysis import families
from remat_theory.model.errors import SolverError, SolverLimitError
from remat_theory.model.persistence import is_persistent, is_weakly_persistent
from remat_theory.strategies import chains, chains_and_budgets
from solvers import dp, dp_weak, exhaustive


@settings(max_examples=50, deadline=None)
@given(chains(1, 5))
def test_dp_weak_equals_exhaustive_weak_at_every_budget(chain):
    """dp-weak == exhaustive(schedule_class="weak"), exhaustive(all) <= dp-weak <= dp, at
    every budget from below the smallest feasible one to store-all."""
    lo = exhaustive.min_feasible_budget(chain)
    for budget in range(max(0, lo - 1), chain.store_all_memory() + 1):
        w = solvers.solve(chain, budget, "dp-weak")
        e = solvers.solve(chain, budget, "exhaustive", schedule_class="weak")
        assert (w.schedule is None) == (e.schedule is None), budget
        if w.schedule is None:
            assert w.status == "infeasible" and w.min_budget == e.min_budget
            continue
        assert w.status == "optimal" and w.optimal_for == "weakly-persistent"
        assert is_weakly_persistent(chain, w.schedule)
        assert math.isclose(w.makespan, e.makespan, rel_tol=1e-9, abs_tol=1e-9), budget
        d = solvers.solve(chain, budget, "dp")
        a = solvers.solve(chain, budget, "exhaustive")
        assert a.makespan <= w.makespan + 1e-9
        if d.schedule is not None:
            assert w.makespan <= d.makespan + 1e-9


@settings(max_examples=30, deadline=None)
@given(chains(5, 6, overheads=True))
def test_dp_weak_with_overheads_matches_class_search(chain):
    budget = (dp_weak.min_feasible_budget(chain) + chain.store_all_memory()) // 2
    w = solvers.solve(chain, budget, "dp-weak")
    e = solvers.solve(chain, budget, "exhaustive", schedule_class="weak")
    assert math.isclose(w.makespan, e.makespan, rel_tol=1e-9, abs_tol=1e-9)


@settings(max_examples=40, deadline=None)
@given(chains(1, 6))
def test_weak_min_budget(chain):
    mb = dp_weak.min_feasible_budget(chain)
    assert mb == exhaustive.min_feasible_budget(chain, schedule_class="weak")
    assert exhaustive.min_feasible_budget(chain) <= mb <= dp.min_feasible_budget(chain)
    assert solvers.solve(chain, mb, "dp-weak").status == "optimal"
    assert solvers.solve(chain, mb - 1, "dp-weak").status == "infeasible"


@settings(max_examples=25, deadline=None)
@given(chains(1, 10))
def test_monotone_and_never_worse_than_dp(chain):
    prev = math.inf
    for budget in range(dp_weak.min_feasible_budget(chain), chain.store_all_memory() + 1):
        w = solvers.solve(chain, budget, "dp-weak").makespan
        d = solvers.solve(chain, budget, "dp")
        assert w <= prev + 1e-9
        if d.schedule is not None:
            assert w <= d.makespan + 1e-9
        prev = w


# The smallest instance found by random search where weak persistence strictly helps:
# checkpoint x_1 (1 unit) is released by Fn1 after B3 and x_1 comes back inside the tape
# t_1 of Fall0, which the persistent class cannot do without holding x_1 through.
STRICT = Chain(fwd_time=[1.0, 1.0, 3.0, 2.0], bwd_time=[1.0, 0.0, 0.0, 0.0, 2.0],
               x_size=[3, 1, 2, 2, 1], tape_size=[1, 3, 2, 2], name="weak-beats-persistent")
STRICT_BUDGET = 11


def test_weak_strictly_better_regression():
    d = solvers.solve(STRICT, STRICT_BUDGET, "dp")
    w = solvers.solve(STRICT, STRICT_BUDGET, "dp-weak")
    assert d.makespan == 17.0 and w.makespan == 16.0
    assert simulate(STRICT, w.schedule, STRICT_BUDGET).makespan == 16.0
    assert simulate(STRICT, d.schedule, STRICT_BUDGET).makespan == 17.0
    assert is_weakly_persistent(STRICT, w.schedule) and not is_persistent(STRICT, w.schedule)
    # the class searches agree with both numbers
    assert solvers.solve(STRICT, STRICT_BUDGET, "exhaustive", schedule_class="persistent").makespan == 17.0
    assert solvers.solve(STRICT, STRICT_BUDGET, "exhaustive", schedule_class="weak").makespan == 16.0
    hand = "Fck0 Fck1 Fn2 Fall3 Loss B3 Fn1 Fall2 B2 Fall0 Fall1 B1 B0"
    assert simulate(STRICT, hand, STRICT_BUDGET).makespan == 16.0
    assert is_weakly_persistent(STRICT, hand) and not is_persistent(STRICT, hand)


@settings(max_examples=30, deadline=None)
@given(chains_and_budgets(1, 6), st.integers(1, 30))
def test_slots_valid_and_never_better_than_exact(cb, slots):
    chain, budget = cb
    s = solvers.solve(chain, budget, "dp-weak", slots=slots)
    if s.schedule is None:
        assert s.status == "infeasible" and s.min_budget == dp_weak.min_feasible_budget(chain)
        return
    exact = solvers.solve(chain, budget, "dp-weak")
    assert s.peak_memory <= budget
    assert s.makespan >= exact.makespan - 1e-9
    if s.status == "optimal":  # only when no size was rounded
        assert s.info["rounding_exact"] and s.makespan == exact.makespan
    else:
        assert s.status == "feasible"


@pytest.mark.parametrize("family", ["random", "resnet", "transformer"])
def test_family_chains(family):
    chain = families.make(family, 12, 1)
    lo, hi = dp_weak.min_feasible_budget(chain), chain.store_all_memory()
    for budget in (lo, (2 * lo + hi) // 3, hi):
        w = solvers.solve(chain, budget, "dp-weak")
        d = solvers.solve(chain, budget, "dp")
        assert is_weakly_persistent(chain, w.schedule)
        assert d.schedule is None or w.makespan <= d.makespan + 1e-9


def test_bad_slots():
    c = families.make("random", 3, 0)
    with pytest.raises(SolverError, match="slots"):
        solvers.solve(c, c.store_all_memory(), "dp-weak", slots=-1)


def test_unrestricted_can_beat_weak():
    """Weak persistence is not globally optimal: the optimum below releases a tape (Fn1
    reads x_1 from t_1) and computes away from the frontier (proofs/weak_persistence.md)."""
    c = Chain(fwd_time=[4.0, 5.0, 4.0, 2.0], bwd_time=[5.0, 6.0, 0.0, 3.0, 2.0],
              x_size=[3, 4, 1, 5, 3], tape_size=[7, 3, 5, 3], fwd_overhead=[0, 1, 2, 1],
              bwd_overhead=[1, 2, 0, 2, 2])
    w = solvers.solve(c, 21, "dp-weak")
    a = solvers.solve(c, 21, "exhaustive")
    assert w.makespan == 53.0 and a.makespan == 50.0
    best = "Fall0 Fn1 Fall2 Fall3 Fn2 Fn3 Loss B3 Fn0 Fall1 B2 B1 Fall0 B0"
    assert simulate(c, best, 21).makespan == 50.0
    assert not is_weakly_persistent(c, best)
    assert solvers.solve(c, 21, "exhaustive", schedule_class="weak").makespan == 53.0


# ---------------------------------------------------------------------- fall costs
@settings(max_examples=30, deadline=None)
@given(chains(1, 5, fall_costs=True, overheads=True))
def test_dp_weak_with_fall_costs_equals_class_search_at_every_budget(chain):
    """Fall_i with its own time and overhead: dp-weak == exhaustive(schedule_class="weak")
    at every budget (schedules replayed by the registry), never worse than dp."""
    lo = exhaustive.min_feasible_budget(chain, schedule_class="weak")
    assert dp_weak.min_feasible_budget(chain) == lo
    for budget in range(max(0, lo - 1), chain.store_all_memory() + 1):
        w = solvers.solve(chain, budget, "dp-weak")
        e = solvers.solve(chain, budget, "exhaustive", schedule_class="weak")
        assert (w.schedule is None) == (e.schedule is None), budget
        if w.schedule is None:
            continue
        assert math.isclose(w.makespan, e.makespan, rel_tol=1e-9, abs_tol=1e-9), budget
        d = solvers.solve(chain, budget, "dp")
        assert d.schedule is None or w.makespan <= d.makespan + 1e-9


# ---------------------------------------------------------------------- limits
@pytest.mark.parametrize("bad", [0, -2, float("nan"), "5", False])
def test_bad_time_limit(bad):
    c = families.make("random", 3, 0)
    with pytest.raises(SolverError, match="time_limit"):
        solvers.solve(c, c.store_all_memory(), "dp-weak", time_limit=bad)


@pytest.mark.parametrize("slots", [None, 40])
def test_time_limit_stops_with_a_bound_and_no_claim(slots):
    c = families.make("random", 14, 2)
    budget = (dp_weak.min_feasible_budget(c) + c.store_all_memory()) // 2
    s = solvers.solve(c, budget, "dp-weak", slots=slots, time_limit=1e-9)
    assert s.status == "time_limit" and s.schedule is None and s.makespan is None
    assert s.bound == c.ideal_makespan() <= solvers.solve(c, budget, "dp-weak", slots=slots).makespan
    assert "not proven optimal" in s.message


def test_too_big_is_refused_up_front_naming_slots():
    c = families.make("homogeneous", 400, 0)
    with pytest.raises(SolverLimitError, match=r"pass slots=\d+ or less") as e:
        solvers.solve(c, c.store_all_memory() // 2, "dp-weak", slots=2000)
    (name, relation, fit), = e.value.remedies[0].options
    assert (name, relation) == ("slots", "<=") and 10 <= fit < 2000


@settings(max_examples=20, deadline=None)
@given(chains(1, 5), st.integers(2, 3))
def test_common_factor_divided_out_gives_the_same_tables(chain, k):
    """All sizes multiples of k: W of the divided chain at m // k equals W of the original
    at m (proofs/persistent_dp.md Lemma 2.5, the same argument for both tables)."""
    from solvers._dp_tables import UnitChain
    from solvers.dp_weak import WeakTable

    uc, _ = UnitChain.exact(chain)
    big = UnitChain(uc.x * k, uc.tape * k, uc.fo * k, uc.bo * k, uc.fwd, uc.bwd, uc.fao * k, uc.fall)
    M = big.store_all_units()
    tb, ts = WeakTable(big, M), WeakTable(big.divided(k), M // k)
    for m in range(M + 1):
        assert tb.w(0, uc.L, m) == ts.w(0, uc.L, m // k)


# ---------------------------------------------------------------------- against the first implementation
@settings(max_examples=40, deadline=None)
@given(chains(1, 7, fall_costs=None, overheads=True))
def test_vectorized_tables_equal_the_reference_implementation(chain):
    """The vectorized tables (one numpy operation per split for all return points) hold
    exactly the values of the first implementation (one operation per candidate row,
    tests/_dp_weak_reference.py), every W and R row at every memory value up to store-all."""
    from solvers._dp_tables import UnitChain
    from solvers.dp_weak import WeakTable
    from _dp_weak_reference import ReferenceWeakTable

    uc, _ = UnitChain.exact(chain)
    M = uc.store_all_units()
    new, ref = WeakTable(uc, M), ReferenceWeakTable(uc, M)
    for (s, t), row in ref.W.items():
        np.testing.assert_array_equal(new.Wa[s][t - s], row)
    for (i, t, j), row in ref.R.items():
        np.testing.assert_array_equal(new.Ra[i, t][j - i - 1], row)


@pytest.mark.parametrize("family", ["random", "resnet", "homogeneous"])
def test_vectorized_tables_equal_the_reference_on_family_chains(family):
    from solvers._dp_tables import UnitChain
    from solvers.dp_weak import WeakTable
    from _dp_weak_reference import ReferenceWeakTable

    chain = families.make(family, 14, 5)
    uc, _ = UnitChain.rounded(chain, chain.store_all_memory() // 2, 60), None
    new, ref = WeakTable(uc, 60 - int(uc.x[0])), ReferenceWeakTable(uc, 60 - int(uc.x[0]))
    for (s, t), row in ref.W.items():
        np.testing.assert_array_equal(new.Wa[s][t - s], row)
    for (i, t, j), row in ref.R.items():
        np.testing.assert_array_equal(new.Ra[i, t][j - i - 1], row)
