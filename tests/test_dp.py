"""The two dynamic programs, ``dp`` (persistent class, solvers/dp.py) and ``dp-weak``
(weakly persistent class, solvers/dp_weak.py), against their oracles: the simulator
(every schedule replayed), exhaustive search restricted to the solver's class, the
unrestricted exhaustive optimum, a plain Dijkstra search of the class on the regression
chains (tests/_class_search.py), Revolve's closed form on homogeneous chains, and the first
implementation of the weak tables (tests/_dp_weak_reference.py).

Tests are by (solver, variation): each check runs for both DPs, on chains drawn plain
(overheads drawn), with recording costs (``fall_time``/``fall_overhead``) and with unsaved
outputs (``output_saved``).

Budget sweeps read every budget from one table per chain (:func:`solvers.dp_sweep.sweep`,
checked here against ``solvers.solve``).  The class optimum is compared at every budget
by comparing it at both ends of every run of budgets over which the DP's makespan is
constant: the class optimum does not increase with the budget, so equal at both ends of a
run means equal inside it (and a run's start is where the unrestricted optimum must be no
larger, for the same reason).
"""
from __future__ import annotations

import math
import random
from types import SimpleNamespace

import numpy as np
import pytest
from _tiers import examples as tier_examples
from hypothesis import given, settings
from hypothesis import strategies as st

import solvers
from _class_search import class_search
from remat_theory import Chain, simulate
from remat_theory.analysis import families
from remat_theory.model import persistence
from remat_theory.model.errors import SolverError, SolverLimitError, SolverOptionError
from remat_theory.model.persistence import is_persistent, is_weakly_persistent
from remat_theory.model.solution import INFEASIBLE, OPTIMAL
from remat_theory.strategies import chains, chains_and_budgets
from solvers import dp, dp_weak, exhaustive
from solvers._dp_tables import UnitChain
from solvers.dp import PersistentTable, min_memory_table, slot_info
from solvers.dp_sweep import sweep
from solvers.dp_weak import WeakTable

DPS = {
    "dp": SimpleNamespace(cls=persistence.PERSISTENT, optimal_for="persistent",
                          min_budget=dp.min_feasible_budget, member=is_persistent,
                          table=lambda uc, M: PersistentTable(uc, M).value),
    "dp-weak": SimpleNamespace(cls=persistence.WEAK, optimal_for="weakly-persistent",
                               min_budget=dp_weak.min_feasible_budget, member=is_weakly_persistent,
                               table=lambda uc, M: WeakTable(uc, M).w),
}
LABELS = list(DPS)

# (strategy, examples per solver): the examples each twin test had before the merge.
VARIATIONS = {
    "plain": (chains(1, 5), {"dp": 60, "dp-weak": 50}),
    "fall-costs": (chains(1, 5, fall_costs=True, overheads=True), {"dp": 40, "dp-weak": 30}),
    "unsaved-outputs": (chains(1, 4, unsaved_outputs=True, fall_costs=None),
                        {"dp": 60, "dp-weak": 50}),
}


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def _runs(answers: dict) -> list[tuple[int, int]]:
    """Maximal runs ``(first, last)`` of consecutive feasible budgets with one makespan."""
    out: list = []
    for b in sorted(answers):
        v = answers[b][0]
        if v == math.inf:
            continue
        if out and out[-1][1] == b - 1 and answers[out[-1][0]][0] == v:
            out[-1][1] = b
        else:
            out.append([b, b])
    return [tuple(r) for r in out]


# ---------------------------------------------------------------------- the class optimum
def _check_every_budget(chain: Chain, label: str) -> None:
    """``label`` == exhaustive search restricted to its class at every budget from the
    memory lower bound (below which nothing fits) to store-all; every schedule valid, in
    the class, at the claimed makespan; exhaustive(all) <= dp-weak <= dp; the same answers
    through ``solvers.solve`` (status, claims, smallest budget)."""
    info = DPS[label]
    top = chain.store_all_memory()
    budgets = range(max(0, chain.memory_lower_bound() - 1), top + 1)
    answers = sweep(chain, budgets, label)
    feasible = [b for b in budgets if answers[b][1] is not None]
    assert feasible and feasible == list(range(feasible[0], top + 1))  # feasible from least on
    least = feasible[0]
    assert info.min_budget(chain) == least
    persistent = sweep(chain, budgets, "dp") if label == "dp-weak" else answers
    prev = math.inf
    for b in feasible:  # every budget: replay, class, monotone, weak <= persistent
        makespan, schedule = answers[b]
        r = simulate(chain, schedule, b)
        assert _close(r.makespan, makespan) and r.peak_memory <= b, b
        assert info.member(chain, schedule), (b, schedule)
        assert makespan <= prev + 1e-9
        prev = makespan
        if persistent[b][1] is not None:
            assert makespan <= persistent[b][0] + 1e-9, b
    assert _close(prev, chain.ideal_makespan())
    checked = sorted({least - 1} | {b for run in _runs(answers) for b in run} - {-1})
    for b in checked:  # the oracles at both ends of every run
        e = solvers.solve(chain, b, "exhaustive", schedule_class=info.cls)
        s = solvers.solve(chain, b, label)  # replayed by the registry
        if b < least:
            assert e.schedule is None and s.status == INFEASIBLE and s.schedule is None
            assert s.min_budget == e.min_budget == least, b
            continue
        assert _close(e.makespan, answers[b][0]), (b, e.makespan, answers[b][0])
        assert s.status == OPTIMAL and s.optimal_for == info.optimal_for
        assert s.bound == s.makespan == answers[b][0] and s.schedule == answers[b][1]
    for first, _ in _runs(answers):
        a = solvers.solve(chain, first, "exhaustive")
        assert a.makespan <= answers[first][0] + 1e-9, first


@pytest.mark.parametrize("variation", list(VARIATIONS))
@pytest.mark.parametrize("label", LABELS)
def test_dp_equals_the_class_optimum_at_every_budget(label, variation):
    strategy, examples = VARIATIONS[variation]

    @settings(max_examples=tier_examples(examples[label], 6), deadline=None)
    @given(strategy)
    def check(chain):
        _check_every_budget(chain, label)

    check()


@pytest.mark.parametrize("label, stages, examples", [("dp", (1, 6), 40), ("dp-weak", (5, 6), 30)])
def test_overheads_at_a_middle_budget(label, stages, examples):
    """Longer chains, overheads always on, one budget halfway to store-all."""
    @settings(max_examples=tier_examples(examples, 5), deadline=None)
    @given(chains(*stages, overheads=True))
    def check(chain):
        budget = (DPS[label].min_budget(chain) + chain.store_all_memory()) // 2
        d = solvers.solve(chain, budget, label)
        e = solvers.solve(chain, budget, "exhaustive", schedule_class=DPS[label].cls)
        assert _close(d.makespan, e.makespan)

    check()


# ---------------------------------------------------------------------- feasibility
@pytest.mark.parametrize("label, examples", [("dp", 60), ("dp-weak", 40)])
def test_min_feasible_budget_is_exact(label, examples):
    """The DP's smallest budget is its class's (exhaustive), never below the smallest
    budget of all schedules (and dp-weak's never above dp's); the DP is feasible there and
    infeasible one byte below, reporting that budget."""
    @settings(max_examples=tier_examples(examples, 8), deadline=None)
    @given(chains(1, 6))
    def check(chain):
        mb = DPS[label].min_budget(chain)
        assert mb == exhaustive.min_feasible_budget(chain, schedule_class=DPS[label].cls)
        assert mb >= exhaustive.min_feasible_budget(chain)
        if label == "dp-weak":
            assert mb <= dp.min_feasible_budget(chain)
        assert solvers.solve(chain, mb, label).status == OPTIMAL
        below = solvers.solve(chain, mb - 1, label)
        assert below.status == INFEASIBLE and below.min_budget == mb and below.schedule is None

    check()


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(chains(1, 6))
def test_persistent_min_budget_equals_global_min_budget(chain):
    """Conjecture (proofs/persistent_dp.md): the smallest budget of persistent schedules is
    the smallest budget of all schedules."""
    assert dp.min_feasible_budget(chain) == exhaustive.min_feasible_budget(chain)


def test_min_budget_scales_with_the_size_unit():
    c = families.make("random", 5, 3)
    big = Chain(c.fwd_time, c.bwd_time, [v * 1000 for v in c.x_size],
                [v * 1000 for v in c.tape_size], [v * 1000 for v in c.fwd_overhead],
                [v * 1000 for v in c.bwd_overhead])
    assert dp.min_feasible_budget(big) == 1000 * dp.min_feasible_budget(c)
    assert solvers.solve(big, 1000 * dp.min_feasible_budget(c) - 1, "dp").status == "infeasible"


@pytest.mark.parametrize("label", LABELS)
def test_budget_below_x0(label):
    c = Chain([1.0], [1.0, 1.0], [5, 1], [1])
    s = solvers.solve(c, 4, label)
    assert s.status == "infeasible" and s.min_budget == DPS[label].min_budget(c) > 5


# ---------------------------------------------------------------------- monotonicity
@pytest.mark.parametrize("label, stages, examples", [("dp", (1, 8), 30), ("dp-weak", (1, 10), 25)])
def test_monotone_in_budget_on_longer_chains(label, stages, examples):
    """Longer chains than the oracle reaches: the makespan never increases with the budget,
    reaches the ideal one at store-all, dp-weak is never worse than dp, and the table read
    at every budget gives what ``solvers.solve`` gives at the smallest one."""
    @settings(max_examples=tier_examples(examples, 5), deadline=None)
    @given(chains(*stages))
    def check(chain):
        lo, hi = DPS[label].min_budget(chain), chain.store_all_memory()
        budgets = range(lo, hi + 2)
        answers = sweep(chain, budgets, label)
        persistent = sweep(chain, budgets, "dp") if label == "dp-weak" else answers
        prev = math.inf
        for b in budgets:
            m = answers[b][0]
            assert m <= prev + 1e-9
            if persistent[b][1] is not None:
                assert m <= persistent[b][0] + 1e-9
            prev = m
        assert _close(prev, chain.ideal_makespan())
        s = solvers.solve(chain, lo, label)
        assert s.makespan == answers[lo][0] and s.schedule == answers[lo][1]

    check()


# ---------------------------------------------------------------------- slots
SLOT_VARIATIONS = {"plain": chains_and_budgets(1, 7),
                   "unsaved-outputs": chains_and_budgets(2, 4, unsaved_outputs=True,
                                                         fall_costs=None)}


@pytest.mark.parametrize("variation, examples", [("plain", 60), ("unsaved-outputs", 20)])
@pytest.mark.parametrize("label", LABELS)
def test_slots_valid_and_never_better_than_exact(label, variation, examples):
    """Slots mode (sizes rounded up, held tapes on their own): every schedule fits the real
    budget (solvers.solve replays it), is never shorter than the exact optimum, and is at
    most the exact optimum at the guaranteed budget it reports; optimal only when nothing
    was rounded."""
    @settings(max_examples=tier_examples(examples, 10), deadline=None)
    @given(SLOT_VARIATIONS[variation], st.integers(1, 40))
    def check(cb, slots):
        chain, budget = cb
        s = solvers.solve(chain, budget, label, slots=slots)
        info = s.info
        assert info["slots"] == slots and info["slot_size"] == budget / slots
        assert 0 <= info["guaranteed_budget"] <= budget
        if s.schedule is None:
            assert s.status == "infeasible" and s.min_budget == DPS[label].min_budget(chain)
            return
        g = info["guaranteed_budget"]
        answers = sweep(chain, {budget, g}, label)
        exact, at_g = answers[budget], answers[g]
        assert exact[1] is not None and s.makespan >= exact[0] - 1e-9
        assert s.peak_memory <= budget
        if at_g[1] is not None:
            assert s.makespan <= at_g[0] + 1e-9
        if s.status == OPTIMAL:
            assert info["rounding_exact"] and s.makespan == exact[0]
        else:
            assert s.status == "feasible" and "rounding_exact" not in info

    check()


@pytest.mark.parametrize("variation, examples", [("plain", 40), ("unsaved-outputs", 20)])
def test_slot_bound_is_a_lower_bound(variation, examples):
    """Sizes rounded down relax every peak: the bound is at most the exact persistent
    optimum, and equal to it when the status is optimal."""
    strategy = chains_and_budgets(1, 7, feasible_only=True) if variation == "plain" else \
        chains_and_budgets(2, 4, feasible_only=True, unsaved_outputs=True, fall_costs=None)

    @settings(max_examples=examples, deadline=None)
    @given(strategy, st.integers(1, 40))
    def check(cb, slots):
        chain, budget = cb
        s = solvers.solve(chain, budget, "dp", slots=slots, slot_bound=True)
        if s.schedule is None:  # infeasible once rounded up: no bound computed
            assert s.status == "infeasible"
            return
        exact = solvers.solve(chain, budget, "dp")
        assert s.bound is not None and s.bound <= exact.makespan + 1e-9
        if s.status == OPTIMAL:
            assert _close(s.makespan, exact.makespan)

    check()


def test_slots_on_a_large_budget_chain():
    """Sizes in bytes with gcd 1: slots keep the table small and the schedule valid."""
    c = families.make("resnet", 30, 1, unit=4097)
    budget = (c.memory_lower_bound() + c.store_all_memory()) // 2
    s = solvers.solve(c, budget, "dp", slots=200)
    assert s.schedule is not None and s.peak_memory <= budget
    assert s.info["rounding_loss_max"] < budget / 200


def test_slot_info_by_hand():
    c = Chain([1.0], [1.0, 1.0], [3, 5], [7])
    info = slot_info(c, 20, 4)  # slot of 5 bytes: 3->5, 5->5, 7->10, zeros->0
    assert info["slot_size"] == 5.0
    assert info["rounding_loss_max"] == 3.0
    assert info["rounding_loss"] == 2.0 + 0.0 + 3.0  # L + 4 = 5 largest of (2, 0, 3, 0, 0, 0)
    assert info["guaranteed_budget"] == 15


@pytest.mark.parametrize("label", LABELS)
def test_slots_that_round_nothing_are_exact(label):
    """When every size is a whole number of slots the slot DP is the exact DP: optimal."""
    c = Chain([1.0, 2.0, 3.0], [1.0, 1.0, 1.0, 1.0], [2, 2, 2, 2], [4, 4, 4])
    budgets = range(DPS[label].min_budget(c), c.store_all_memory() + 1, 2)
    exact = sweep(c, budgets, label)
    for budget in budgets:
        s = solvers.solve(c, budget, label, slots=budget // 2)
        assert s.status == "optimal" and s.info["rounding_exact"] and s.makespan == exact[budget][0]
    odd = solvers.solve(c, 17, label, slots=6)  # slots of 17/6 bytes: rounding happens
    assert odd.status == "feasible" and "rounding_exact" not in odd.info


# ---------------------------------------------------------------------- Revolve
def _revolve_advances(l: int, s: int) -> int:
    """Griewank & Walther's minimal number of forward steps (not counting the l forward
    sweeps of the reverse steps themselves) to reverse l steps with s checkpoint slots, the
    initial state occupying one of them: t(l, s) = r l - beta(s+1, r-1), where beta(s, r) =
    C(s+r, s) and r is the unique integer with beta(s, r-1) < l <= beta(s, r)
    (Griewank and Walther 2000, "Algorithm 799: revolve", Proposition 1)."""
    def beta(a, b):
        return math.comb(a + b, a) if b >= 0 else 0

    r = 0
    while not (beta(s, r - 1) < l <= beta(s, r)):
        r += 1
    return r * l - beta(s + 1, r - 1)


@pytest.mark.parametrize("L", [1, 2, 3, 5, 8, 13, 21])
def test_homogeneous_chain_equals_revolve_closed_form(L):
    """Homogeneous chain, activations of 1 unit, tapes of T units, free loss.

    Mapping (proofs/persistent_dp.md, section "Homogeneous chains"): with
    T + 4 <= budget <= 2T + 2 no tape can be held together with another one, so every Fall_i
    is followed by B_i (the loss in between for i = L-1) and the budget left for plain
    activations at a backward is budget - T - 2 units, x_0 and the working x_i included: the
    schedule is a Revolve schedule with s = budget - T - 3 checkpoint slots, and
    makespan = (t(L, s) + L) * fwd_time + L * bwd_time.
    """
    T = L + 3
    fwd, bwd = 2.0, 3.0
    chain = Chain.homogeneous(L, fwd_time=fwd, bwd_time=bwd, x_size=1, tape_size=T, loss_time=0.0)
    first = T + 3 if L == 1 else T + 4
    assert dp.min_feasible_budget(chain) == first
    budgets = range(first, 2 * T + 3)
    answers = sweep(chain, budgets, "dp")
    for budget in budgets:
        s = budget - T - 3
        makespan, schedule = answers[budget]
        expected = (_revolve_advances(L, max(s, 1)) + L) * fwd + L * bwd
        assert makespan == expected, (budget, s)
        assert schedule.forward_count() == _revolve_advances(L, max(s, 1)) + L
        assert simulate(chain, schedule, budget).makespan == expected
    assert solvers.solve(chain, first, "dp").makespan == answers[first][0]


def test_revolve_closed_form_small_values():
    """The closed form itself, on values known from the recursion."""
    assert [_revolve_advances(l, 1) for l in range(1, 6)] == [0, 1, 3, 6, 10]
    assert _revolve_advances(4, 2) == 4 and _revolve_advances(3, 2) == 2
    assert _revolve_advances(10, 20) == 9


# ---------------------------------------------------------------------- bigger chains
FAMILY_CASES = [("dp", f, 30, 2) for f in ("random", "resnet", "transformer", "rnn")] + \
    [("dp-weak", f, 12, 1) for f in ("random", "resnet", "transformer")]


@pytest.mark.parametrize("label, family, L, seed", FAMILY_CASES)
def test_family_chains(label, family, L, seed):
    """Family chains at the smallest, a middle and the store-all budget: optimal, replayed
    by the registry, in the class; dp-weak never worse than dp."""
    chain = families.make(family, L, seed)
    lo, hi = DPS[label].min_budget(chain), chain.store_all_memory()
    for budget in sorted({lo, (2 * lo + hi) // 3, hi}):
        d = solvers.solve(chain, budget, label)
        assert d.status == OPTIMAL and DPS[label].member(chain, d.schedule)
        if label == "dp-weak":
            p = solvers.solve(chain, budget, "dp")
            assert p.schedule is None or d.makespan <= p.makespan + 1e-9


def test_float32_table_is_exact_when_claimed():
    """With integer times the table may be float32; it must equal the float64 table."""
    chain = families.make("random", 25, 4)
    uc, _ = UnitChain.exact(chain)
    M = chain.store_all_memory() // 2
    t32 = PersistentTable(uc, M, np.float32)
    t64 = PersistentTable(uc, M, np.float64)
    for s in range(uc.L + 1):
        assert np.array_equal(t32.V[s].astype(np.float64), t64.V[s])


@pytest.mark.parametrize("label", LABELS)
def test_non_integer_times(label):
    chain = families.make("random", 12, 1, integer_times=False)
    budget = (DPS[label].min_budget(chain) + chain.store_all_memory()) // 2
    assert solvers.solve(chain, budget, label).status == OPTIMAL


def test_min_memory_table_matches_value_table():
    chain = families.make("resnet", 10, 0)
    uc, _ = UnitChain.exact(chain)
    mm = min_memory_table(uc)
    table = PersistentTable(uc, uc.store_all_units())
    for s in range(uc.L + 1):
        for t in range(s, uc.L + 1):
            assert all(math.isinf(table.value(s, t, m)) for m in range(mm[s, t]))
            assert math.isfinite(table.value(s, t, mm[s, t]))


# ---------------------------------------------------------------------- bad input
BAD_OPTIONS = [("dp", {"slots": 0}, "slots"), ("dp", {"slots": "9"}, "slots"),
               ("dp", {"slots": True}, "slots"), ("dp", {"slot_bound": True}, "slot_bound"),
               ("dp", {"slots": 4, "slot_bound": 1}, "slot_bound"),
               ("dp-weak", {"slots": -1}, "slots")]
BAD_TIME_LIMITS = [0, -1.0, -2, float("nan"), float("inf"), "10", "5", True, False]


@pytest.mark.parametrize("label, opts, word",
                         BAD_OPTIONS + [(label, {"time_limit": bad}, "time_limit")
                                        for label in LABELS for bad in BAD_TIME_LIMITS])
def test_bad_options(label, opts, word):
    c = families.make("random", 3, 0)
    with pytest.raises(SolverError, match=word):
        solvers.solve(c, c.store_all_memory(), label, **opts)


def test_exact_mode_too_large_asks_for_slots():
    """Byte sizes with gcd 1 would need an enormous exact table: a clear error, and slots work."""
    c = families.make("resnet", 60, 0, unit=1000003)
    x = list(c.x_size)
    x[0] += 1
    c = Chain(c.fwd_time, c.bwd_time, x, c.tape_size, c.fwd_overhead, c.bwd_overhead)
    budget = (c.memory_lower_bound() + c.store_all_memory()) // 2
    for name in LABELS:
        with pytest.raises(SolverError, match="slots"):
            solvers.solve(c, budget, name)
    assert solvers.solve(c, budget, "dp", slots=300).peak_memory <= budget


@pytest.mark.parametrize("label, L, slots, time_limit", [("dp", 2000, 1000, 10),
                                                         ("dp-weak", 400, 2000, None)])
def test_far_past_the_limits_is_refused_up_front_naming_slots(label, L, slots, time_limit):
    """Refused before any work (a limit, not misuse), with the estimate and, as a fact, a
    slot count that fits; no command-line syntax in the library's message."""
    c = families.make("homogeneous", L, 0)
    with pytest.raises(SolverLimitError, match=r"pass slots=\d+ or less") as e:
        solvers.solve(c, c.store_all_memory() // 2, label, slots=slots, time_limit=time_limit)
    assert not isinstance(e.value, SolverOptionError)
    assert e.value.solver == label
    if time_limit is not None:
        assert e.value.estimate_s > 10 * time_limit
    (name, relation, fit), = e.value.remedies[0].options
    assert (name, relation) == ("slots", "<=") and 10 <= fit < slots
    assert "--" not in str(e.value)


def test_too_big_a_table_is_refused_up_front():
    c = families.make("homogeneous", 3000, 0)
    with pytest.raises(SolverLimitError, match="GiB of table") as e:
        solvers.solve(c, c.store_all_memory() // 2, "dp", slots=5000)
    assert e.value.estimate_bytes > 8 * 2 ** 30


# ---------------------------------------------------------------------- common factor
@pytest.mark.parametrize("label, examples", [("dp", 30), ("dp-weak", 20)])
def test_common_factor_divided_out_gives_the_same_table(label, examples):
    """Sizes all multiples of k: the table of the divided chain at m // k equals the table
    of the original at m, at every m up to store-all (proofs/persistent_dp.md Lemma 2.5,
    the same argument for both tables; slots mode relies on it)."""
    @settings(max_examples=examples, deadline=None)
    @given(chains(1, 6 if label == "dp" else 5), st.integers(2, 4 if label == "dp" else 3))
    def check(chain, k):
        uc, _ = UnitChain.exact(chain)
        big = UnitChain(uc.x * k, uc.tape * k, uc.fo * k, uc.bo * k, uc.fwd, uc.bwd,
                        uc.fao * k, uc.fall)
        assert big.size_gcd() == k * uc.size_gcd()
        M = big.store_all_units()
        tb, ts = DPS[label].table(big, M), DPS[label].table(big.divided(k), M // k)
        for s in range(uc.L + 1):
            for t in range(s, uc.L + 1):
                for m in range(M + 1):
                    assert tb(s, t, m) == ts(s, t, m // k)

    check()


# ---------------------------------------------------------------------- time limit
@pytest.mark.parametrize("label, L, slots", [("dp", 60, None), ("dp", 60, 60),
                                             ("dp-weak", 14, None), ("dp-weak", 14, 40)])
def test_time_limit_stops_with_a_bound_and_no_claim(label, L, slots):
    """A limit too short to build anything: status time_limit, no schedule, the ideal
    makespan as bound (below the true optimum), a message that says so."""
    c = families.make("random", L, 1 if label == "dp" else 2)
    budget = (DPS[label].min_budget(c) + c.store_all_memory()) // 2
    s = solvers.solve(c, budget, label, slots=slots, time_limit=1e-9)
    full = solvers.solve(c, budget, label, slots=slots)
    assert s.status == "time_limit" and s.schedule is None and s.makespan is None
    assert s.bound == c.ideal_makespan() <= full.makespan
    assert "not proven optimal" in s.message and s.info["stopped_by"] == "time_limit"


def test_generous_time_limit_changes_nothing():
    c = families.make("resnet", 20, 3)
    budget = (dp.min_feasible_budget(c) + c.store_all_memory()) // 2
    a = solvers.solve(c, budget, "dp", time_limit=600)
    b = solvers.solve(c, budget, "dp")
    assert a.status == b.status == "optimal" and a.makespan == b.makespan


# ---------------------------------------------------------------------- fall costs
def _random_fall_chain(rng, L):
    """A chain with fall costs that differ from the forward ones, from plain random numbers."""
    x = [rng.randint(1, 6) for _ in range(L + 1)]
    return Chain([float(rng.randint(1, 9)) for _ in range(L)],
                 [float(rng.randint(0, 9)) for _ in range(L + 1)], x,
                 [x[i + 1] + rng.randint(0, 5) for i in range(L)],
                 [rng.randint(0, 3) for _ in range(L)], [rng.randint(0, 3) for _ in range(L + 1)],
                 fall_time=[float(rng.randint(1, 12)) for _ in range(L)],
                 fall_overhead=[rng.randint(0, 6) for _ in range(L)])


@pytest.mark.parametrize("seed", range(6))
def test_dp_with_fall_costs_on_random_chains(seed):
    """The class check on chains built from random numbers (6 stages, middle budgets), and
    slots mode stays valid at the real budget."""
    chain = _random_fall_chain(random.Random(seed), 6)
    assert chain.has_fall_costs
    lo, hi = dp.min_feasible_budget(chain), chain.store_all_memory()
    budgets = sorted({lo, (lo + hi) // 2, (lo + 3 * hi) // 4})
    answers = sweep(chain, budgets + [hi], "dp")
    for budget in budgets:
        e = solvers.solve(chain, budget, "exhaustive", schedule_class="persistent")
        assert _close(answers[budget][0], e.makespan)
        s = solvers.solve(chain, budget, "dp", slots=17)
        assert s.schedule is None or s.makespan >= answers[budget][0] - 1e-9
    assert answers[hi][0] == chain.ideal_makespan()


# ---------------------------------------------------------------------- regression chains
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


def _check_against_class_search(chain: Chain, label: str):
    """The DP against the plain Dijkstra search of its class (tests/_class_search.py):
    smallest budget, and makespan, replay and class at six budgets around it and store-all."""
    cls, min_budget = DPS[label].cls, DPS[label].min_budget
    least, _ = class_search(chain, cls, None)
    assert min_budget(chain) == least, f"{label}: smallest feasible budget"
    top = chain.store_all_memory()
    for budget in sorted({max(0, least - 1), least, least + 1, (least + top) // 2, top - 1, top}):
        sol = solvers.solve(chain, budget, label)  # replayed by solvers.solve
        want, witness = class_search(chain, cls, budget)
        if want == math.inf:
            assert sol.status == INFEASIBLE and sol.min_budget == least, (budget, sol)
            continue
        assert sol.status == OPTIMAL, (budget, sol.status, witness)
        assert sol.makespan == pytest.approx(want, rel=1e-12), (budget, sol.schedule, witness)
        assert persistence.is_class_member(chain, sol.schedule, cls), sol.schedule
        best_all, _ = class_search(chain, persistence.ALL, budget)
        assert best_all <= sol.makespan + 1e-9


# Found by random search: the weak optimum at budget 44 records stage 0 first (Fall0 leaves
# the unsaved x1 as a plain value), releases x1 (Fn1), and later makes it again from x0
# (Fck0) while t1 is held: the option A-release of proofs/weak_persistence.md 3.7.  Nothing
# else fits 44: the persistent class needs 45.
RELEASE = Chain(fwd_time=[5.0, 3.0, 2.0, 8.0], bwd_time=[8.0, 5.0, 7.0, 9.0, 2.0],
                x_size=[2, 4, 7, 14, 8], tape_size=[5, 11, 17, 14], fwd_overhead=[30, 8, 5, 8],
                bwd_overhead=[2, 5, 3, 3, 1], fall_time=[6.0, 5.0, 5.0, 2.0],
                fall_overhead=[0, 1, 1, 5], output_saved=[False, True, False, True])


def test_weak_releases_an_unsaved_output_and_makes_it_again():
    assert class_search(RELEASE, persistence.WEAK, None)[0] == 44
    assert class_search(RELEASE, persistence.PERSISTENT, None)[0] == 45
    assert class_search(RELEASE, persistence.ALL, None)[0] == 44  # the global smallest budget
    for label in LABELS:
        _check_against_class_search(RELEASE, label)
    sol = solvers.solve(RELEASE, 44, "dp-weak")
    ops = sol.schedule.tokens()
    assert ops[ops.index("Fall0") + 1] == "Fn1"  # x1 released right after Fall0 made it


def test_mlp_store_all_fits_at_its_own_peak():
    """Linear | ReLU | Linear (docs/model.md): both DPs find store-all at its peak (400 B,
    the classic table would need 500) and nothing one byte below it."""
    c = Chain(fwd_time=[1.0, 0.5, 1.0], bwd_time=[2.0, 0.5, 2.0, 0.1],
              x_size=[100, 100, 100, 10], tape_size=[100, 100, 10],
              output_saved=[False, True, False])
    for label in LABELS:
        sol = solvers.solve(c, 400, label)
        assert sol.status == OPTIMAL and sol.makespan == pytest.approx(c.ideal_makespan())
        _check_against_class_search(c, label)


# The schedule the frontier's open-stage clause keeps out of the classes (found by random
# search with the clause removed): x1 is unsaved and Fall1 frees it, so after B2 nothing
# marks stage 1 as the frontier but its held tape t2; without the clause Fall0 could run
# before B1 (the frontier would fall to x0), while d2 and t2 (2 bytes) are live instead of
# d1 (14 bytes).  It is valid and shorter than every schedule of the class, which the DP's
# segments describe exactly (proofs/persistent_dp.md 2.10).
ESCAPE = Chain(fwd_time=[3.0, 4.0, 4.0], bwd_time=[5.0, 1.0, 3.0, 5.0], x_size=[1, 14, 1, 12],
               tape_size=[17, 1, 15], fwd_overhead=[8, 4, 6], bwd_overhead=[0, 0, 2, 3],
               output_saved=[False, True, False])


def test_the_open_stage_clause_keeps_the_segment_structure():
    from remat_theory.model.schedule import Schedule
    from remat_theory.model.simulator import State, transition

    early = "Fn0 Fall1 Fall2 Loss B2 Fall0 B1 B0"
    state, memory = State.initial(ESCAPE), ESCAPE.x_size[0]
    for op in Schedule.parse("Fn0 Fall1 Fall2 Loss B2"):
        r = transition(ESCAPE, state, memory, op)
        state, memory = r.state, r.memory_after
    # x1 is gone (Fall1 freed it), t2 is held: stage 1 is open, B1 still to run
    assert state == State(plain=0b1, tapes=0b100, bwd_next=1)
    assert persistence.frontier(ESCAPE, state) == 1  # not x0, below the open stage
    assert simulate(ESCAPE, early, 34).makespan == 28.0
    assert not persistence.is_weakly_persistent(ESCAPE, early)
    with pytest.raises(Exception, match="frontier"):
        persistence.check_class(ESCAPE, early, persistence.PERSISTENT)
    for label in LABELS:
        assert solvers.solve(ESCAPE, 34, label).makespan == 32.0
        _check_against_class_search(ESCAPE, label)
    assert class_search(ESCAPE, persistence.ALL, 34)[0] <= 28.0


# ---------------------------------------------------------------------- the sweep
@pytest.mark.parametrize("label", LABELS)
def test_sweep_refuses_bad_input(label):
    from remat_theory.model.errors import SolverOptionError

    c = families.make("random", 3, 0)
    with pytest.raises(SolverOptionError, match="solver = 'ilp'"):
        sweep(c, [10], "ilp")
    for bad in (-1, 2.5, True):
        with pytest.raises(SolverOptionError, match="budget"):
            sweep(c, [10, bad], label)


# ---------------------------------------------------------------------- the weak tables
def _assert_tables_equal(uc: UnitChain, M: int):
    from _dp_weak_reference import ReferenceWeakTable

    new, ref = WeakTable(uc, M), ReferenceWeakTable(uc, M)
    for (s, t), row in ref.W.items():
        np.testing.assert_array_equal(new.Wa[s][t - s], row)
    for (i, t, j), row in ref.R.items():
        np.testing.assert_array_equal(new.Ra[i, t][j - i - 1], row)


@settings(max_examples=tier_examples(40, 16), deadline=None)
@given(chains(1, 7, fall_costs=None, overheads=True))
def test_vectorized_tables_equal_the_reference_implementation(chain):
    """The vectorized tables (one numpy operation per split for all return points) hold
    exactly the values of the first implementation (one operation per candidate row,
    tests/_dp_weak_reference.py), every W and R row at every memory value up to store-all."""
    uc, _ = UnitChain.exact(chain)
    _assert_tables_equal(uc, uc.store_all_units())


@pytest.mark.parametrize("family", ["random", "resnet", "homogeneous"])
def test_vectorized_tables_equal_the_reference_on_family_chains(family):
    chain = families.make(family, 14, 5)
    uc = UnitChain.rounded(chain, chain.store_all_memory() // 2, 60)
    _assert_tables_equal(uc, 60 - int(uc.x[0]))


# ---------------------------------------------------------------------- through the CLI
def test_cli_passes_time_limit_to_dp(tmp_path, capsys):
    """``remat solve CHAIN --solver dp --time-limit T`` reaches the solver: a generous limit
    answers as without one, a limit too short to build anything answers time_limit."""
    import json

    from remat_theory.cli import main

    c = families.make("random", 40, 3)
    path = tmp_path / "chain.json"
    path.write_text(json.dumps(c.to_dict()))
    budget = (dp.min_feasible_budget(c) + c.store_all_memory()) // 2
    assert main(["solve", str(path), "--budget", str(budget), "--solver", "dp",
                 "--time-limit", "600", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "optimal"
    assert out["makespan"] == solvers.solve(c, budget, "dp").makespan
    assert main(["solve", str(path), "--budget", str(budget), "--solver", "dp",
                 "--time-limit", "1e-9", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "time_limit" and out["schedule"] is None
