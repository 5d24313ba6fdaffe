"""The persistent DP (solvers/dp.py) against its oracles: the simulator (every schedule is
replayed by ``solvers.solve``), exhaustive search restricted to the persistent class, the
unrestricted exhaustive optimum, and Revolve's closed form on homogeneous chains."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import solvers
from remat_theory import Chain, simulate
from remat_theory.analysis import families
from remat_theory.model.errors import SolverError, SolverLimitError, SolverOptionError
from remat_theory.model.persistence import is_persistent
from remat_theory.strategies import chains, chains_and_budgets
from solvers import exhaustive
from solvers.dp import (PersistentTable, UnitChain, min_feasible_budget, min_memory_table,
                        slot_info)


def _budget_range(chain):
    """Every budget from just below the smallest feasible one to store-all."""
    lo = exhaustive.min_feasible_budget(chain)
    return range(max(0, lo - 1), chain.store_all_memory() + 1)


# ---------------------------------------------------------------------- the class optimum
@settings(max_examples=60, deadline=None)
@given(chains(1, 5))
def test_dp_equals_exhaustive_persistent_at_every_budget(chain):
    """dp == exhaustive(schedule_class="persistent") at every budget of the chain, and
    exhaustive(all) <= dp; every dp schedule is valid (solve replays it), persistent, and
    its claimed makespan is the simulated one."""
    for budget in _budget_range(chain):
        d = solvers.solve(chain, budget, "dp")
        e = solvers.solve(chain, budget, "exhaustive", schedule_class="persistent")
        assert (d.schedule is None) == (e.schedule is None), budget
        if d.schedule is None:
            assert d.status == "infeasible" and d.min_budget == e.min_budget
            continue
        assert d.status == "optimal" and d.optimal_for == "persistent" and d.bound == d.makespan
        assert is_persistent(chain, d.schedule)
        assert math.isclose(d.makespan, e.makespan, rel_tol=1e-9, abs_tol=1e-9), budget
        assert math.isclose(simulate(chain, d.schedule, budget).makespan, d.makespan,
                            rel_tol=1e-9, abs_tol=1e-9)
        a = solvers.solve(chain, budget, "exhaustive")
        assert a.makespan <= d.makespan + 1e-9


@settings(max_examples=40, deadline=None)
@given(chains(1, 6, overheads=True))
def test_dp_with_overheads_matches_class_search(chain):
    budget = (min_feasible_budget(chain) + chain.store_all_memory()) // 2
    d = solvers.solve(chain, budget, "dp")
    e = solvers.solve(chain, budget, "exhaustive", schedule_class="persistent")
    assert math.isclose(d.makespan, e.makespan, rel_tol=1e-9, abs_tol=1e-9)


# ---------------------------------------------------------------------- feasibility
@settings(max_examples=60, deadline=None)
@given(chains(1, 6))
def test_min_feasible_budget_is_exact(chain):
    """The DP's smallest budget is the exhaustive persistent one, dp is feasible there and
    infeasible one byte below (reporting that budget), and it is never below the global
    smallest budget over all schedules."""
    mb = min_feasible_budget(chain)
    assert mb == exhaustive.min_feasible_budget(chain, schedule_class="persistent")
    assert mb >= exhaustive.min_feasible_budget(chain)
    assert solvers.solve(chain, mb, "dp").status == "optimal"
    below = solvers.solve(chain, mb - 1, "dp")
    assert below.status == "infeasible" and below.min_budget == mb and below.schedule is None


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(chains(1, 6))
def test_persistent_min_budget_equals_global_min_budget(chain):
    """Conjecture (proofs/persistent_dp.md): the smallest budget of persistent schedules is
    the smallest budget of all schedules."""
    assert min_feasible_budget(chain) == exhaustive.min_feasible_budget(chain)


def test_min_budget_scales_with_the_size_unit():
    c = families.make("random", 5, 3)
    big = Chain(c.fwd_time, c.bwd_time, [v * 1000 for v in c.x_size],
                [v * 1000 for v in c.tape_size], [v * 1000 for v in c.fwd_overhead],
                [v * 1000 for v in c.bwd_overhead])
    assert min_feasible_budget(big) == 1000 * min_feasible_budget(c)
    assert solvers.solve(big, 1000 * min_feasible_budget(c) - 1, "dp").status == "infeasible"


# ---------------------------------------------------------------------- monotonicity
@settings(max_examples=30, deadline=None)
@given(chains(1, 8))
def test_monotone_in_budget(chain):
    prev = math.inf
    for budget in range(min_feasible_budget(chain), chain.store_all_memory() + 2):
        m = solvers.solve(chain, budget, "dp").makespan
        assert m <= prev + 1e-9
        prev = m
    assert math.isclose(prev, chain.ideal_makespan(), rel_tol=1e-9, abs_tol=1e-9)


# ---------------------------------------------------------------------- slots
@settings(max_examples=60, deadline=None)
@given(chains_and_budgets(1, 7), st.integers(1, 40))
def test_slots_valid_and_never_better_than_exact(cb, slots):
    chain, budget = cb
    exact = solvers.solve(chain, budget, "dp")
    s = solvers.solve(chain, budget, "dp", slots=slots)  # replayed at the real budget
    info = s.info
    assert info["slots"] == slots and info["slot_size"] == budget / slots
    assert 0 <= info["guaranteed_budget"] <= budget
    if s.schedule is None:
        assert s.status == "infeasible" and s.min_budget == min_feasible_budget(chain)
        return
    assert s.status in ("feasible", "optimal")
    assert exact.schedule is not None and s.makespan >= exact.makespan - 1e-9
    assert s.peak_memory <= budget
    # the guarantee: at least as good as the exact optimum at the guaranteed budget
    g = info["guaranteed_budget"]
    if g >= min_feasible_budget(chain):
        assert s.makespan <= solvers.solve(chain, g, "dp").makespan + 1e-9


@settings(max_examples=40, deadline=None)
@given(chains_and_budgets(1, 7, feasible_only=True), st.integers(1, 40))
def test_slot_bound_is_a_lower_bound(cb, slots):
    chain, budget = cb
    s = solvers.solve(chain, budget, "dp", slots=slots, slot_bound=True)
    exact = solvers.solve(chain, budget, "dp")
    if s.schedule is None:  # infeasible once rounded up: no bound computed
        assert s.status == "infeasible"
        return
    assert s.bound is not None and s.bound <= exact.makespan + 1e-9
    if s.status == "optimal":
        assert math.isclose(s.makespan, exact.makespan, rel_tol=1e-9, abs_tol=1e-9)


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
    assert min_feasible_budget(chain) == first
    for budget in range(first, 2 * T + 3):
        s = budget - T - 3
        d = solvers.solve(chain, budget, "dp")
        expected = (_revolve_advances(L, max(s, 1)) + L) * fwd + L * bwd
        assert d.makespan == expected, (budget, s)
        assert d.schedule.forward_count() == _revolve_advances(L, max(s, 1)) + L


def test_revolve_closed_form_small_values():
    """The closed form itself, on values known from the recursion."""
    assert [_revolve_advances(l, 1) for l in range(1, 6)] == [0, 1, 3, 6, 10]
    assert _revolve_advances(4, 2) == 4 and _revolve_advances(3, 2) == 2
    assert _revolve_advances(10, 20) == 9


# ---------------------------------------------------------------------- bigger chains
@pytest.mark.parametrize("family", ["random", "resnet", "transformer", "rnn"])
def test_family_chains_are_valid(family):
    chain = families.make(family, 30, 2)
    lo, hi = min_feasible_budget(chain), chain.store_all_memory()
    for budget in (lo, (lo + hi) // 2, hi):
        d = solvers.solve(chain, budget, "dp")  # replayed by the registry
        assert d.status == "optimal" and is_persistent(chain, d.schedule)


def test_float32_table_is_exact_when_claimed():
    """With integer times the table may be float32; it must equal the float64 table."""
    chain = families.make("random", 25, 4)
    uc, _ = UnitChain.exact(chain)
    M = chain.store_all_memory() // 2
    t32 = PersistentTable(uc, M, np.float32)
    t64 = PersistentTable(uc, M, np.float64)
    for s in range(uc.L + 1):
        assert np.array_equal(t32.V[s].astype(np.float64), t64.V[s])


def test_non_integer_times():
    chain = families.make("random", 12, 1, integer_times=False)
    budget = (min_feasible_budget(chain) + chain.store_all_memory()) // 2
    d = solvers.solve(chain, budget, "dp")
    assert d.status == "optimal"


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
@pytest.mark.parametrize("opts, word", [({"slots": 0}, "slots"), ({"slots": "9"}, "slots"),
                                        ({"slots": True}, "slots"),
                                        ({"slot_bound": True}, "slot_bound"),
                                        ({"slots": 4, "slot_bound": 1}, "slot_bound")])
def test_bad_options(opts, word):
    c = families.make("random", 3, 0)
    with pytest.raises(SolverError, match=word):
        solvers.solve(c, c.store_all_memory(), "dp", **opts)


def test_budget_below_x0():
    c = Chain([1.0], [1.0, 1.0], [5, 1], [1])
    s = solvers.solve(c, 4, "dp")
    assert s.status == "infeasible" and s.min_budget == min_feasible_budget(c)


def test_slots_that_round_nothing_are_exact():
    """When every size is a whole number of slots the slot DP is the exact DP: optimal."""
    c = Chain([1.0, 2.0, 3.0], [1.0, 1.0, 1.0, 1.0], [2, 2, 2, 2], [4, 4, 4])
    for budget in range(min_feasible_budget(c), c.store_all_memory() + 1, 2):
        s = solvers.solve(c, budget, "dp", slots=budget // 2)
        e = solvers.solve(c, budget, "dp")
        assert s.status == "optimal" and s.info["rounding_exact"] and s.makespan == e.makespan
    odd = solvers.solve(c, 17, "dp", slots=6)  # slots of 17/6 bytes: rounding happens
    assert odd.status == "feasible" and "rounding_exact" not in odd.info


def test_exact_mode_too_large_asks_for_slots():
    """Byte sizes with gcd 1 would need an enormous exact table: a clear error, and slots work."""
    c = families.make("resnet", 60, 0, unit=1000003)
    x = list(c.x_size)
    x[0] += 1
    c = Chain(c.fwd_time, c.bwd_time, x, c.tape_size, c.fwd_overhead, c.bwd_overhead)
    budget = (c.memory_lower_bound() + c.store_all_memory()) // 2
    for name in ("dp", "dp-weak"):
        with pytest.raises(SolverError, match="slots"):
            solvers.solve(c, budget, name)
    assert solvers.solve(c, budget, "dp", slots=300).peak_memory <= budget


# ---------------------------------------------------------------------- common factor
@settings(max_examples=30, deadline=None)
@given(chains(1, 6), st.integers(2, 4))
def test_common_factor_divided_out_gives_the_same_table(chain, k):
    """Sizes all multiples of k: the table of the divided chain at m // k equals the table
    of the original at m, at every m up to store-all (the lemma behind UnitChain.divided,
    which slots mode relies on)."""
    uc, _ = UnitChain.exact(chain)
    big = UnitChain(uc.x * k, uc.tape * k, uc.fo * k, uc.bo * k, uc.fwd, uc.bwd)
    assert big.size_gcd() == k * uc.size_gcd()
    M = big.store_all_units()
    tb = PersistentTable(big, M)
    ts = PersistentTable(big.divided(k), M // k)
    for s in range(uc.L + 1):
        for t in range(s, uc.L + 1):
            for m in range(M + 1):
                assert tb.value(s, t, m) == ts.value(s, t, m // k)


# ---------------------------------------------------------------------- time limit
@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "10", True])
def test_bad_time_limit(bad):
    c = families.make("random", 3, 0)
    with pytest.raises(SolverError, match="time_limit"):
        solvers.solve(c, c.store_all_memory(), "dp", time_limit=bad)


@pytest.mark.parametrize("slots", [None, 60])
def test_time_limit_stops_with_a_bound_and_no_claim(slots):
    """A limit too short to build anything: status time_limit, no schedule, the ideal
    makespan as bound (below the true optimum), a message that says so."""
    c = families.make("random", 60, 1)
    budget = (min_feasible_budget(c) + c.store_all_memory()) // 2
    s = solvers.solve(c, budget, "dp", slots=slots, time_limit=1e-9)
    full = solvers.solve(c, budget, "dp", slots=slots)
    assert s.status == "time_limit" and s.schedule is None and s.makespan is None
    assert s.bound == c.ideal_makespan() <= full.makespan
    assert "not proven optimal" in s.message and s.info["stopped_by"] == "time_limit"


def test_generous_time_limit_changes_nothing():
    c = families.make("resnet", 20, 3)
    budget = (min_feasible_budget(c) + c.store_all_memory()) // 2
    a = solvers.solve(c, budget, "dp", time_limit=600)
    b = solvers.solve(c, budget, "dp")
    assert a.status == b.status == "optimal" and a.makespan == b.makespan


def test_far_past_the_time_limit_is_refused_up_front():
    """2000 stages at 1000 slots in 10 s: refused before any work (a limit, not misuse),
    with the estimate and, as a fact, a slot count that fits."""
    c = families.make("homogeneous", 2000, 0)
    budget = c.store_all_memory() // 2
    with pytest.raises(SolverLimitError, match=r"pass slots=\d+ or less") as e:
        solvers.solve(c, budget, "dp", slots=1000, time_limit=10)
    assert not isinstance(e.value, SolverOptionError)
    assert e.value.solver == "dp" and e.value.estimate_s > 10 * 10
    (name, relation, fit), = e.value.remedies[0].options
    assert (name, relation) == ("slots", "<=") and 10 <= fit < 1000
    assert "--" not in str(e.value)  # no command-line syntax in the library's message


def test_too_big_a_table_is_refused_up_front():
    c = families.make("homogeneous", 3000, 0)
    budget = c.store_all_memory() // 2
    with pytest.raises(SolverLimitError, match="GiB of table") as e:
        solvers.solve(c, budget, "dp", slots=5000)
    assert e.value.estimate_bytes > 8 * 2 ** 30


# ---------------------------------------------------------------------- fall costs
@settings(max_examples=40, deadline=None)
@given(chains(1, 5, fall_costs=True, overheads=True))
def test_dp_with_fall_costs_equals_class_search_at_every_budget(chain):
    """Chains whose recording forward has its own time and overhead (Fall_i costs
    fall_time[i] and peaks at held + tape[i] + fall_overhead[i]; Fn/Fck keep the forward
    costs): dp == exhaustive(schedule_class="persistent") at every budget, the schedule
    replayed by the simulator (the registry) with the claimed makespan."""
    lo = exhaustive.min_feasible_budget(chain, schedule_class="persistent")
    assert min_feasible_budget(chain) == lo
    for budget in range(max(0, lo - 1), chain.store_all_memory() + 1):
        d = solvers.solve(chain, budget, "dp")
        e = solvers.solve(chain, budget, "exhaustive", schedule_class="persistent")
        assert (d.schedule is None) == (e.schedule is None), budget
        if d.schedule is None:
            assert d.min_budget == lo
            continue
        assert math.isclose(d.makespan, e.makespan, rel_tol=1e-9, abs_tol=1e-9), budget
        assert math.isclose(simulate(chain, d.schedule, budget).makespan, d.makespan,
                            rel_tol=1e-9, abs_tol=1e-9)


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
    """The same check on chains built from random numbers (6 stages, middle budgets), and
    slots mode stays valid at the real budget."""
    import random

    rng = random.Random(seed)
    chain = _random_fall_chain(rng, 6)
    assert chain.has_fall_costs
    lo, hi = min_feasible_budget(chain), chain.store_all_memory()
    for budget in sorted({lo, (lo + hi) // 2, (lo + 3 * hi) // 4}):
        d = solvers.solve(chain, budget, "dp")
        e = solvers.solve(chain, budget, "exhaustive", schedule_class="persistent")
        assert math.isclose(d.makespan, e.makespan, rel_tol=1e-9, abs_tol=1e-9)
        s = solvers.solve(chain, budget, "dp", slots=17)
        assert s.schedule is None or s.makespan >= d.makespan - 1e-9
    assert solvers.solve(chain, hi, "dp").makespan == chain.ideal_makespan()


# ---------------------------------------------------------------------- through the CLI
def test_cli_passes_time_limit_to_dp(tmp_path, capsys):
    """``remat solve CHAIN --solver dp --time-limit T`` reaches the solver: a generous limit
    answers as without one, a limit too short to build anything answers time_limit."""
    import json

    from remat_theory.cli import main

    c = families.make("random", 40, 3)
    path = tmp_path / "chain.json"
    path.write_text(json.dumps(c.to_dict()))
    budget = (min_feasible_budget(c) + c.store_all_memory()) // 2
    assert main(["solve", str(path), "--budget", str(budget), "--solver", "dp",
                 "--time-limit", "600", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "optimal"
    assert out["makespan"] == solvers.solve(c, budget, "dp").makespan
    assert main(["solve", str(path), "--budget", str(budget), "--solver", "dp",
                 "--time-limit", "1e-9", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "time_limit" and out["schedule"] is None
