"""Baselines (recompute-all, periodic, Chen, Revolve, Gruslys, DTR): their published numbers
reproduced from closed forms, their schedules valid, never better than the exact optimum,
and feasible wherever their own theory says so.

Oracles: the simulator (every schedule goes through ``solvers.solve``, which replays it),
Griewank-Walther's closed form t(l, c) and a memoized brute-force of its recursion, a
memoized transcription of Gruslys et al.'s equations, exhaustive search, and torch's own
``checkpoint_sequential`` (counting how often each module runs).
"""
from __future__ import annotations

import functools
import math

import pytest
from _tiers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import solvers
from remat_theory import Chain, simulate
from remat_theory.analysis import families
from remat_theory.model.errors import SolverError
from remat_theory.model.schedule import DROP, FALL, FCK, FN
from remat_theory.model.solution import FEASIBLE, INFEASIBLE, OPTIMAL
from remat_theory.strategies import chains, chains_and_budgets
from solvers._schedules import segments_cost, segments_schedule
from solvers.chen import greedy_plan, sqrt_checkpoints
from solvers.gruslys import VARIANTS, gruslys_table, min_units, units
from solvers.periodic import periodic_checkpoints, periodic_costs
from solvers.recompute_all import recompute_all_schedule
from solvers.revolve import (beta, revolve_advances, revolve_schedule, revolve_split,
                             slot_budget)

# Every registered heuristic but store-all (which is exact where it fits): from the registry,
# so a baseline added as a module is tested here without a hand-kept list.
BASELINES = tuple(n for n in solvers.names()
                  if not solvers.get(n).exact and n != "store-all" and not solvers.get(n).external)


def advances(schedule) -> int:
    return schedule.count(FCK) + schedule.count(FN)


def per_stage_forwards(schedule, length: int) -> list[int]:
    counts = [0] * length
    for op in schedule:
        if op.is_forward:
            counts[op.index] += 1
    return counts


# --------------------------------------------------------------------------- registry
def test_every_baseline_is_registered_as_a_heuristic():
    for name in BASELINES:
        info = solvers.get(name)
        assert not info.exact and info.optimal_for == "none"
        assert info.description


@pytest.mark.parametrize("name, options, field", [
    ("periodic", {"segments": 0}, "segments"),
    ("periodic", {"segments": 7}, "segments"),  # more segments than the 6 stages
    ("periodic", {"segments": 2.5}, "segments"),
    ("revolve", {"slots": 0}, "slots"),
    ("revolve", {"slots": True}, "slots"),
    ("gruslys", {"variant": "both"}, "variant"),
    ("chen-greedy", {"b": -1}, "b"),
    ("chen-greedy", {"b": float("nan")}, "b"),
    ("chen-greedy", {"grid": 0}, "grid"),
])
def test_bad_options_are_named(name, options, field):
    chain = families.make("random", 6, 0)
    with pytest.raises(SolverError, match=field):
        solvers.solve(chain, chain.store_all_memory(), name, **options)


# --------------------------------------------------------------------------- segment schedules
@settings(max_examples=examples(80, 26), deadline=None)
@given(chains(1, 9), st.data())
def test_segments_cost_equals_the_simulator(chain, data):
    L = chain.length
    cps = sorted(data.draw(st.sets(st.integers(1, L - 1)))) if L > 1 else []
    makespan, peak = segments_cost(chain, cps)
    sim = simulate(chain, segments_schedule(chain, cps))
    assert peak == sim.peak_memory
    assert makespan == pytest.approx(sim.makespan, rel=1e-12)


# --------------------------------------------------------------------------- recompute-all
@pytest.mark.parametrize("L", [1, 2, 5, 13])
def test_recompute_all_runs_l_l_plus_1_over_2_forwards(L):
    chain = families.make("random", L, L)
    sched = recompute_all_schedule(chain)
    assert sched.forward_count() == L * (L + 1) // 2
    assert per_stage_forwards(sched, L) == [L - i for i in range(L)]
    # Keeping only x_0, it peaks at B_i: x_0, x_i, t_{i+1}, d_{i+1} and d_i; on a homogeneous
    # chain that is exactly the memory lower bound every schedule needs.
    h = Chain.homogeneous(L, x_size=2, tape_size=3)
    peak = simulate(h, recompute_all_schedule(h)).peak_memory
    assert peak == (2 + 2 + 3 + 2 + 2 if L > 1 else 2 + 3 + 2 + 2) == h.memory_lower_bound()


# --------------------------------------------------------------------------- periodic vs torch
@pytest.mark.torch
def test_periodic_checkpoints_are_those_of_checkpoint_sequential():
    torch = pytest.importorskip("torch")
    from torch.utils.checkpoint import checkpoint_sequential

    class Counted(torch.nn.Module):
        def __init__(self, counts, i):
            super().__init__()
            self.counts, self.i = counts, i
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x):
            self.counts[self.i] += 1
            return torch.tanh(self.lin(x))

    for L in range(1, 10):
        chain = Chain.homogeneous(L)
        for k in range(1, L + 1):
            counts = [0] * L
            seq = torch.nn.Sequential(*[Counted(counts, i) for i in range(L)])
            x = torch.randn(2, 3, requires_grad=True)
            checkpoint_sequential(seq, k, x, use_reentrant=False).sum().backward()
            ours = per_stage_forwards(segments_schedule(chain, periodic_checkpoints(L, k)), L)
            assert ours == counts, (L, k)


@settings(max_examples=examples(40, 20), deadline=None)
@given(chains(1, 8))
def test_periodic_picks_the_fastest_k_that_fits(chain):
    L = chain.length
    costs = {k: segments_cost(chain, periodic_checkpoints(L, k)) for k in range(1, L + 1)}
    smallest = min(p for _, p in costs.values())
    budget = sorted(p for _, p in costs.values())[len(costs) // 2]
    sol = solvers.solve(chain, budget, "periodic")
    assert sol.status == FEASIBLE and sol.min_budget == smallest
    assert sol.makespan == pytest.approx(min(m for m, p in costs.values() if p <= budget))
    below = solvers.solve(chain, smallest - 1, "periodic")
    assert below.status == INFEASIBLE and below.min_budget == smallest
    fixed = solvers.solve(chain, costs[L][1], "periodic", segments=L)
    assert fixed.status == FEASIBLE and fixed.peak_memory == costs[L][1]


@settings(max_examples=examples(60, 9), deadline=None)
@given(chains(1, 40, max_size=12, overheads=None, fall_costs=None, unsaved_outputs=None))
def test_every_k_at_once_equals_the_closed_form_of_each(chain):
    """periodic_costs (prefix sums and block maxima shared by every k of one segment size)
    against segments_cost, k by k (itself checked against the simulator)."""
    L = chain.length
    ks, makespans, peaks = periodic_costs(chain)
    assert list(ks) == list(range(1, L + 1))
    for k, m, p in zip(ks, makespans, peaks):
        ref_m, ref_p = segments_cost(chain, periodic_checkpoints(L, int(k)))
        assert int(p) == ref_p, k
        assert m == pytest.approx(ref_m, rel=1e-12, abs=1e-12), k


def test_a_time_limit_stops_the_sweep_over_k_with_what_it_evaluated():
    """Deadline-aware: an expired deadline still evaluates k = 1 (an answer), and says so."""
    from solvers._deadline import Deadline

    chain = Chain.homogeneous(3000, x_size=1, tape_size=1)
    ks, _, _ = periodic_costs(chain, Deadline(1e-9))
    assert list(ks) == [1]
    sol = solvers.solve(chain, chain.store_all_memory() // 2, "periodic", time_limit=1e-9)
    assert sol.info["ks_evaluated"] >= 1 and "time limit" in sol.message
    assert sol.min_budget is None  # not every k was evaluated: no claim


# --------------------------------------------------------------------------- Chen et al.
def test_chen_sqrt_on_a_homogeneous_chain_holds_about_2_sqrt_n_and_one_extra_forward():
    n = 900
    chain = Chain.homogeneous(n, x_size=1, tape_size=1)
    cps = sqrt_checkpoints(n)
    assert len(cps) + 1 == 30
    makespan, peak = segments_cost(chain, cps)
    # x_0, 29 checkpoints, a segment of 30 tapes, the live gradient and the one produced.
    assert 2 * math.sqrt(n) <= peak <= 2 * math.sqrt(n) + 3
    extra_forwards = makespan - chain.ideal_makespan()
    assert extra_forwards == n - n // 30  # every stage but the last segment's: one more pass


def test_chen_greedy_plan_follows_algorithm_3():
    chain = Chain([1.0] * 6, [1.0] * 7, [1] * 7, [2, 1, 3, 1, 1, 4])
    # running tape sums 2, 3 > b=2.5 -> checkpoint x_2; 3 > 2.5 -> x_3; 1, 2, then the end
    cps, x, y = greedy_plan(chain, 2.5)
    assert cps == [2, 3] and x == 2 and y == 6
    assert greedy_plan(chain, sum(chain.tape_size))[0] == []
    assert greedy_plan(chain, 0)[0] == [1, 2, 3, 4, 5]


# --------------------------------------------------------------------------- Revolve
@functools.lru_cache(maxsize=None)
def _revolve_dp(l: int, c: int) -> float:
    """Fewest advances by brute force over every split (Griewank's recursion)."""
    if l == 1:
        return 0
    if c == 0:
        return math.inf
    return min(m + _revolve_dp(l - m, c - 1) + _revolve_dp(m, c) for m in range(1, l))


def test_revolve_closed_form_is_the_optimum_of_its_recursion():
    for l in range(1, 41):
        for c in range(1, 7):
            assert revolve_advances(l, c) == _revolve_dp(l, c), (l, c)


@pytest.mark.parametrize("longest", [60, pytest.param(200, marks=pytest.mark.slow)])
def test_revolve_schedules_count_exactly_the_closed_form(longest):
    """Every chain up to ``longest`` stages (200 with ``-m slow``) at 1..10 slots; the
    1000-stage, 50-slot schedule is counted in the next test."""
    for l in range(1, longest + 1):
        chain = Chain.homogeneous(l)
        for c in range(1, 11):
            sched = revolve_schedule(chain, c)
            assert advances(sched) == revolve_advances(l, c), (l, c)
            assert sched.count(FALL) == l
    assert revolve_advances(1000, 50) == 1948


def test_revolve_1000_steps_50_slots_gives_1948_advances():
    chain = Chain.homogeneous(1000, 1.0, 2.0, 1, 4)
    sol = solvers.solve(chain, slot_budget(chain, 50), "revolve", slots=50)
    assert sol.status == FEASIBLE
    assert advances(sol.schedule) == 1948 and sol.schedule.count(FALL) == 1000
    assert sol.makespan == pytest.approx(1948 + 1000 + 2 * 1000)  # forward 1, backward 2


def test_revolve_split_keeps_both_halves_in_their_rank():
    for c in range(1, 8):
        for l in range(2, 300):
            m = revolve_split(l, c)
            assert 1 <= m < l
            assert m + revolve_advances(l - m, c - 1) + revolve_advances(m, c) == revolve_advances(l, c) \
                if c > 1 else m == l - 1
    assert beta(3, -1) == 0 and beta(2, 3) == 10


@settings(max_examples=examples(60, 25), deadline=None)
@given(chains(1, 9), st.integers(1, 10))
def test_revolve_fits_its_slot_budget(chain, s):
    sol = solvers.solve(chain, slot_budget(chain, s), "revolve", slots=s)
    assert sol.status == FEASIBLE
    assert sol.peak_memory <= slot_budget(chain, s)
    default = solvers.solve(chain, slot_budget(chain, s), "revolve")
    assert default.status == FEASIBLE and default.info["slots"] >= min(s, chain.length)
    m1 = slot_budget(chain, 1)
    assert solvers.solve(chain, m1, "revolve").status == FEASIBLE
    low = solvers.solve(chain, m1 - 1, "revolve")
    assert low.status == INFEASIBLE and low.min_budget == m1


# --------------------------------------------------------------------------- Gruslys et al.
def _gruslys_equations(alpha: int, variant: str):
    """Their recursions transcribed directly, memoized (independent of the numpy table)."""
    @functools.lru_cache(maxsize=None)
    def C(l, m):
        if l == 0:
            return 0
        if l == 1:
            return 1
        best = math.inf
        if variant != "internal" and m >= 1:  # HSM: y + C(t - y, m - 1) + C(y, m)
            best = min(best, min(y + C(l - y, m - 1) + C(y, m) for y in range(1, l)))
        if variant != "hidden":  # ISM: y + C(t - y, m - alpha') + C(y - 1, m), y = j + 1
            for y in range(1, l + 1):
                cost = alpha + (1 if y > 1 else 0)
                if m >= cost:
                    best = min(best, y + C(l - y, m - cost) + C(y - 1, m))
        return best
    return C


def test_gruslys_table_equals_their_equations():
    for alpha in (1, 2, 3):
        for variant in VARIANTS:
            C = _gruslys_equations(alpha, variant)
            table, _, _ = gruslys_table(14, 3 * alpha + 6, alpha, variant)
            for l in range(15):
                for m in range(3 * alpha + 7):
                    assert table[l, m] == C(l, m), (alpha, variant, l, m)


def test_gruslys_hidden_is_binomial_checkpointing():
    for L in (2, 7, 30):
        chain = Chain.homogeneous(L, 1.0, 2.0, 1, 3)
        X, alpha, R = units(chain)
        for m in range(1, 8):
            sol = solvers.solve(chain, chain.x_size[0] + R + m * X, "gruslys", variant="hidden")
            assert sol.info["units"] == min(m, (L - 1) * (alpha + 1) + 1)
            assert sol.schedule.forward_count() == revolve_advances(L, sol.info["units"]) + L


@settings(max_examples=40, deadline=None)
@given(chains(1, 8), st.sampled_from(VARIANTS), st.integers(0, 12))
def test_gruslys_schedule_matches_its_dp_and_fits(chain, variant, extra):
    X, alpha, R = units(chain)
    need = min_units(chain.length, alpha, variant)
    threshold = chain.x_size[0] + R + need * X
    assert solvers.solve(chain, threshold - 1, "gruslys", variant=variant).status == INFEASIBLE
    budget = threshold + extra * X
    sol = solvers.solve(chain, budget, "gruslys", variant=variant)
    assert sol.status == FEASIBLE and sol.min_budget == threshold
    assert sol.schedule.forward_count() == sol.info["forwards"]
    assert sol.peak_memory <= chain.x_size[0] + R + sol.info["units"] * X


def test_gruslys_1000_steps_at_5_percent_memory_cost_about_one_third_more_time():
    """Their abstract: for length 1000, 95% of the memory saved for about one third more
    time.  Forward 1, backward 2, hidden state 1 byte, internal state (tape) 4 bytes; the
    figure is 0.319 here and equals the persistent DP's optimum
    (benchmarks/reproduce_baselines.py, section gruslys)."""
    chain = Chain.homogeneous(1000, 1.0, 2.0, 1, 4)
    budget = chain.store_all_memory() // 20
    sol = solvers.solve(chain, budget, "gruslys")
    overhead = sol.makespan / chain.ideal_makespan() - 1
    assert 0.3 <= overhead <= 1 / 3 + 0.02, overhead
    assert sol.peak_memory <= budget


def test_gruslys_mixed_is_never_worse_than_either_pure_variant():
    chain = Chain.homogeneous(40, 1.0, 2.0, 1, 3)
    X, alpha, R = units(chain)
    for m in range(0, 60, 3):
        b = chain.x_size[0] + R + m * X
        got = {v: solvers.solve(chain, b, "gruslys", variant=v) for v in VARIANTS}
        mixed = got["mixed"].makespan
        for v in ("hidden", "internal"):
            if got[v].status == FEASIBLE:
                assert mixed <= got[v].makespan


# --------------------------------------------------------------------------- DTR
@settings(max_examples=40, deadline=None)
@given(chains(1, 8))
def test_dtr_is_store_all_when_store_all_fits(chain):
    sol = solvers.solve(chain, chain.store_all_memory(), "dtr")
    assert sol.status == FEASIBLE and sol.info["evictions"] == 0
    assert sol.schedule.count(DROP) == 0
    assert sol.makespan == pytest.approx(chain.ideal_makespan())


def test_dtr_evicts_and_recomputes_under_pressure():
    chain = Chain.homogeneous(12, 1.0, 2.0, 1, 2)
    sol = solvers.solve(chain, chain.store_all_memory() // 2, "dtr")
    assert sol.status == FEASIBLE and sol.info["allow_drop"]
    assert sol.schedule.count(DROP) == sol.info["evictions"] > 0
    assert sol.schedule.forward_count() == 12 + sol.info["recomputations"]
    tiny = solvers.solve(chain, chain.x_size[0], "dtr")
    assert tiny.status == INFEASIBLE and tiny.min_budget is None and "stuck" in tiny.message


# --------------------------------------------------------------------------- every baseline
@settings(max_examples=examples(60, 8), deadline=None)
@given(chains_and_budgets(1, 5, max_size=6, max_time=6))
def test_baselines_are_valid_and_never_beat_the_exact_optimum(cb):
    chain, budget = cb
    exact = {drop: solvers.solve(chain, budget, "exhaustive", allow_drop=drop) for drop in (False, True)}
    for name in BASELINES:
        sol = solvers.solve(chain, budget, name)  # replays the schedule: valid or SolverError
        if sol.schedule is None:
            assert sol.status == INFEASIBLE
            continue
        assert sol.peak_memory <= budget
        ref = exact[bool(sol.info.get("allow_drop", False))]
        assert ref.status == OPTIMAL, (name, "found a schedule where exhaustive search found none")
        assert sol.makespan >= ref.makespan - 1e-9 * max(1.0, ref.makespan), name


@settings(max_examples=examples(40, 13), deadline=None)
@given(chains(1, 9))
def test_fixed_schedules_are_feasible_exactly_from_their_peak(chain):
    top = chain.store_all_memory()
    assert solvers.solve(chain, top, "store-all").status == OPTIMAL
    assert solvers.solve(chain, top - 1, "store-all").status == INFEASIBLE
    for name in ("recompute-all", "chen-sqrt"):
        peak = solvers.solve(chain, chain.store_all_memory() * 4, name).peak_memory
        at = solvers.solve(chain, peak, name)
        assert at.status == FEASIBLE and at.min_budget == peak
        below = solvers.solve(chain, peak - 1, name)
        assert below.status == INFEASIBLE and below.min_budget == peak
    greedy = solvers.solve(chain, chain.store_all_memory() * 4, "chen-greedy")
    assert solvers.solve(chain, greedy.min_budget, "chen-greedy").status == FEASIBLE
    assert solvers.solve(chain, greedy.min_budget - 1, "chen-greedy").status == INFEASIBLE


@pytest.mark.parametrize("family", ["random", "resnet", "transformer", "rnn"])
def test_baselines_are_never_better_than_the_persistent_dp_on_family_chains(family):
    """On 10-stage family chains (too long for exhaustive search), every baseline but DTR
    builds persistent schedules in canonical form, so the persistent DP's optimum bounds
    them; DTR (explicit deletions) may beat it and is only checked for validity."""
    from solvers.dp_sweep import sweep

    chain = families.make(family, 10, 5)
    lo, hi = chain.memory_lower_bound(), chain.store_all_memory()
    budgets = sorted({lo, (lo + hi) // 2, (lo + 3 * hi) // 4, hi})
    optimum = sweep(chain, budgets, "dp")  # one table for the four budgets
    for budget in budgets:
        dp = optimum[budget][0]
        for name in BASELINES:
            sol = solvers.solve(chain, budget, name)
            if sol.schedule is None or name == "dtr":
                continue
            assert dp < math.inf, (name, budget)
            assert sol.makespan >= dp - 1e-9 * dp, (name, budget)


def test_gruslys_stops_at_its_time_limit_and_refuses_a_table_too_large(monkeypatch):
    """Issue #29 (limits at any size): the O(L^2 m) table ran past any limit (10,000
    stages: killed after 120 s)."""
    from remat_theory.model.errors import SolverLimitError
    from remat_theory.model.solution import TIME_LIMIT

    chain = Chain.homogeneous(3000, x_size=1, tape_size=1)
    sol = solvers.solve(chain, 100, "gruslys", time_limit=1e-9)
    assert sol.status == TIME_LIMIT and sol.schedule is None
    assert "not proven optimal" in sol.message
    import solvers.gruslys as gruslys

    monkeypatch.setattr(gruslys, "MAX_TABLE_BYTES", 13 * 3001 * 100)  # 100 units
    with pytest.raises(SolverLimitError, match="GiB"):
        solvers.solve(chain, chain.store_all_memory(), "gruslys", time_limit=5)


def test_dtr_stops_at_its_time_limit():
    """Issue #29: DTR's eviction scan is O(L) per eviction (10,000 stages: past 120 s)."""
    from remat_theory.model.solution import TIME_LIMIT

    chain = Chain.homogeneous(2000, x_size=1, tape_size=1)
    sol = solvers.solve(chain, 50, "dtr", time_limit=1e-9)
    assert sol.status == TIME_LIMIT and sol.schedule is None
    assert "not proven optimal" in sol.message


def test_recompute_all_refuses_a_quadratic_schedule_past_its_limits():
    """Issue #29: 10,000 stages make 50 million operations (killed after 120 s)."""
    from remat_theory.model.errors import SolverLimitError

    chain = Chain.homogeneous(7000, x_size=1, tape_size=1)
    with pytest.raises(SolverLimitError, match=f"{7000 * 7001 // 2 + 2 * 7000:,} operations"):
        solvers.solve(chain, chain.store_all_memory(), "recompute-all")
    small = Chain.homogeneous(300, x_size=1, tape_size=1)
    with pytest.raises(SolverLimitError, match="past the time limit of 0.01 s"):
        solvers.solve(small, small.store_all_memory(), "recompute-all", time_limit=0.01)


@settings(max_examples=examples(40, 22), deadline=None)
@given(chains(1, 12, max_size=9, overheads=None), st.integers(0, 400))
def test_revolve_takes_the_most_slots_whose_budget_fits(chain, budget):
    """The slot count in closed form (M(s) is linear in s) against the search it replaced."""
    from solvers.revolve import slot_budget

    sol = solvers.solve(chain, budget, "revolve")
    if slot_budget(chain, 1) > budget:
        assert sol.status == INFEASIBLE
        return
    s = 1
    while s < chain.length and slot_budget(chain, s + 1) <= budget:
        s += 1
    assert sol.info["slots"] == s
