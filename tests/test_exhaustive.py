"""Exhaustive search against a second, independent enumeration and against closed forms."""
import math

import pytest
from _tiers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import solvers
from remat_theory import Chain, simulate
from remat_theory.analysis.families import make
from remat_theory.model.schedule import LOSS_OP, Bwd, Fall, Fck, Fn
from remat_theory.model.simulator import State, transition
from remat_theory.model.solution import INFEASIBLE, OPTIMAL, TIME_LIMIT
from remat_theory.strategies import chains, chains_and_budgets
from remat_theory.model.errors import SolverError
from solvers.exhaustive import min_feasible_budget


def brute_force(chain, budget, max_len):
    """Best makespan over every op sequence of at most ``max_len`` ops (depth-first, no
    state merging): an oracle that shares nothing with A* but the transition rules."""
    L = chain.length
    ops = [LOSS_OP] + [Bwd(i) for i in range(L)] + [f(i) for i in range(L) for f in (Fn, Fck, Fall)]
    best = math.inf

    def dfs(state, mem, t, depth):
        nonlocal best
        if state.is_final():
            best = min(best, t)
            return
        if depth == max_len or t >= best:
            return
        for op in ops:
            r = transition(chain, state, mem, op)
            if not isinstance(r, str) and r.peak <= budget:
                dfs(r.state, r.memory_after, t + r.time, depth + 1)

    dfs(State.initial(chain), chain.x_size[0], 0.0, 0)
    return best


@settings(max_examples=examples(40, 14))
@given(chains_and_budgets(1, 2, max_size=5, max_time=5))
def test_exhaustive_equals_brute_force_on_tiny_chains(cb):
    chain, budget = cb
    max_len = 4 * chain.length + 4
    best = brute_force(chain, budget, max_len)
    sol = solvers.solve(chain, budget, "exhaustive")
    if sol.status == INFEASIBLE:
        assert best == math.inf
        return
    assert sol.status == OPTIMAL
    # Every enumerated schedule is valid, so A* (claimed optimal) can be no worse ...
    assert sol.makespan <= best + 1e-9
    # ... and when its schedule is short enough to be enumerated, no better either.
    if len(sol.schedule) <= max_len:
        assert sol.makespan == pytest.approx(best)


@settings(max_examples=examples(60, 11))
@given(chains(1, 5))
def test_feasibility_threshold_is_exact(chain):
    m = min_feasible_budget(chain)
    assert solvers.solve(chain, m, "exhaustive").status == OPTIMAL
    low = solvers.solve(chain, m - 1, "exhaustive")
    assert low.status == INFEASIBLE and low.min_budget == m


@settings(max_examples=examples(60, 22))
@given(chains_and_budgets(1, 5))
def test_exhaustive_bounds(cb):
    chain, budget = cb
    sol = solvers.solve(chain, budget, "exhaustive")
    if sol.status == OPTIMAL:
        assert sol.makespan >= chain.ideal_makespan() - 1e-9
        assert sol.peak_memory <= budget
        if budget >= chain.store_all_memory():
            assert sol.makespan == pytest.approx(chain.ideal_makespan())
        more = solvers.solve(chain, budget + 3, "exhaustive")
        assert more.makespan <= sol.makespan + 1e-9  # monotone in the budget


def test_drop_can_only_help():
    c = Chain([3, 1, 1], [1, 1, 1, 1], [1, 4, 1, 1], [4, 4, 1], [0, 0, 0], [0, 0, 0, 0])
    for b in range(min_feasible_budget(c), c.store_all_memory() + 1):
        plain = solvers.solve(c, b, "exhaustive")
        dropped = solvers.solve(c, b, "exhaustive", allow_drop=True)
        assert dropped.makespan <= plain.makespan + 1e-9
        assert dropped.optimal_for == "all+drop"


def _tight_nine_stages():
    """A random 9-stage chain at a tight budget: tens of thousands of states, far more than
    the 2048 pops between two checks of a limit."""
    c = make("random", 9, 1)
    lo, hi = solvers.solve(c, 0, "dp-weak").min_budget, c.store_all_memory()
    return c, lo + (hi - lo) // 10


def test_time_limit_and_size_guard():
    c, b = _tight_nine_stages()
    sol = solvers.solve(c, b, "exhaustive", max_stages=9, time_limit=1e-9)
    assert sol.status == TIME_LIMIT and sol.schedule is None
    assert sol.message.startswith("time limit reached: not proven optimal; lower bound")
    assert sol.info["stopped_by"] == "time_limit" and sol.bound >= c.ideal_makespan()
    with pytest.raises(SolverError, match="max_stages = 8"):
        solvers.solve(Chain.homogeneous(9), 100, "exhaustive")


def test_a_state_limit_stops_the_search_with_a_bound_not_an_answer():
    """A time limit alone does not bound memory: max_states does, and says so."""
    c, b = _tight_nine_stages()
    full = solvers.solve(c, b, "exhaustive", max_stages=9)
    capped = solvers.solve(c, b, "exhaustive", max_stages=9, max_states=100)
    assert full.status == OPTIMAL
    assert capped.status == TIME_LIMIT and capped.schedule is None
    assert "state limit reached (max_states = 100" in capped.message
    assert "not proven optimal" in capped.message and capped.info["stopped_by"] == "max_states"
    assert c.ideal_makespan() <= capped.bound <= full.makespan
    for bad in (0, -3, 2.5, True):
        with pytest.raises(SolverError, match="max_states"):
            solvers.solve(c, b, "exhaustive", max_stages=9, max_states=bad)


def test_homogeneous_three_stage_optimum_by_hand():
    # Unit sizes, tape = activation, free loss.  Store-all peaks at B2: x0 + t1 + t2 + t3 +
    # d3 + d2 = 6.  At 5, B2 must run holding only x0, d3, t3, x2 (+ d2), so x1 is lost and
    # F0, F1 run again before B1 (as Fall0 Fall1, keeping t1 for B0): 8 = 6 + 2.
    c = Chain.homogeneous(3, fwd_time=1, bwd_time=1, x_size=1, tape_size=1)
    assert c.store_all_memory() == 6 and min_feasible_budget(c) == 5
    assert solvers.solve(c, 6, "exhaustive").makespan == 6
    s5 = solvers.solve(c, 5, "exhaustive")
    assert s5.makespan == 8 and simulate(c, s5.schedule, 5).makespan == 8
    assert simulate(c, "Fn0 Fn1 Fall2 Loss B2 Fall0 Fall1 B1 B0", 5).makespan == 8


# ------------------------------------------- the A* bound (solvers/exhaustive_bounds.Heuristic)
def _ops(chain, allow_drop):
    from remat_theory.model.schedule import DropT, DropX

    L = chain.length
    ops = [LOSS_OP] + [Bwd(i) for i in range(L)] + [f(i) for i in range(L) for f in (Fn, Fck, Fall)]
    if allow_drop:
        ops += [DropX(i) for i in range(1, L + 1)] + [DropT(i) for i in range(1, L + 1)]
    return ops


def _plain_dijkstra(chain, budget, allow_drop=False, start=None):
    """Dijkstra over simulator states with no heuristic, no pruning and no dominance: the
    optimum (from ``start``, a state and its memory; default the initial one), or None."""
    import heapq

    ops = _ops(chain, allow_drop)
    start = start or (State.initial(chain), chain.x_size[0])
    best = {start: 0.0}
    heap = [(0.0, 0, start)]
    tie = 1
    while heap:
        t, _, (state, mem) = heapq.heappop(heap)
        if state.is_final():
            return t
        if best[(state, mem)] < t:
            continue
        for op in ops:
            r = transition(chain, state, mem, op, allow_drop)
            if isinstance(r, str) or r.peak > budget:
                continue
            key = (r.state, r.memory_after)
            if t + r.time < best.get(key, math.inf):
                best[key] = t + r.time
                heapq.heappush(heap, (t + r.time, tie, key))
                tie += 1
    return None


def _without_fall_costs(chain):
    return Chain(chain.fwd_time, chain.bwd_time, chain.x_size, chain.tape_size,
                 chain.fwd_overhead, chain.bwd_overhead)


def _bound(chain, budget, exact_up_to, pairs=True):
    """The A* bound with the 0/1 knapsack for the terms of at most ``exact_up_to`` stages
    only (the LP for the others) and with or without the two-window terms."""
    from solvers.exhaustive_bounds import Heuristic as _Heuristic

    old = _Heuristic.exact_up_to, _Heuristic.exact_steps, _Heuristic.pairs
    _Heuristic.exact_up_to, _Heuristic.exact_steps, _Heuristic.pairs = exact_up_to, -1, pairs
    try:
        return _Heuristic(chain, budget)
    finally:
        _Heuristic.exact_up_to, _Heuristic.exact_steps, _Heuristic.pairs = old


@settings(max_examples=examples(80, 3), deadline=None)
@given(st.data(), chains(1, 5, max_size=6, fall_costs=True, unsaved_outputs=None), st.booleans(),
       st.booleans(), st.sampled_from([0, 2, 12]), st.booleans())
def test_the_bound_is_consistent_on_every_edge_within_the_budget(data, chain, fall, allow_drop,
                                                                  exact_up_to, pairs):
    """h(s) <= time(op) + h(s') on every edge reachable within the budget, h >= the simple
    bound, h(final) = 0: consistent, hence admissible (proofs/exhaustive.md); with the 0/1
    knapsack, its fractional relaxation, and both (by term); with and without the
    two-window terms and unsaved outputs."""
    from solvers.exhaustive_bounds import heuristic_simple as _heuristic_simple

    chain = chain if fall else _without_fall_costs(chain)
    budget = data.draw(st.integers(chain.memory_lower_bound(), chain.store_all_memory() + 1))
    h = _bound(chain, budget, exact_up_to, pairs)
    tol = 1e-9 * max(1.0, chain.ideal_makespan())
    ops = _ops(chain, allow_drop)
    seen, todo = set(), [(State.initial(chain), chain.x_size[0])]
    while todo:
        s, mem = todo.pop()
        if s in seen:
            continue
        seen.add(s)
        assert h(s) >= _heuristic_simple(chain, s) - tol
        for op in ops:
            r = transition(chain, s, mem, op, allow_drop)
            if isinstance(r, str) or r.peak > budget:
                continue
            assert h(s) <= r.time + h(r.state) + tol, (s, op)
            if r.state.is_final():
                assert h(r.state) == 0.0
            todo.append((r.state, r.memory_after))


def _check_against_plain_dijkstra(data, chain, allow_drop, exact_up_to):
    """The search (with its bound, dominance, and an incumbent drawn among none, the weak
    DP's schedule and store-all's) against plain Dijkstra at a drawn budget."""
    from solvers import exhaustive, exhaustive_bounds

    budget = data.draw(st.integers(chain.memory_lower_bound(), chain.store_all_memory() + 1))
    want = _plain_dijkstra(chain, budget, allow_drop)
    source = data.draw(st.sampled_from([None, "dp-weak", "store-all"]))
    incumbent = solvers.solve(chain, budget, source).schedule if source else None
    dominance = data.draw(st.booleans())
    H = exhaustive_bounds.Heuristic
    old = H.exact_up_to, H.exact_steps, H.pairs
    H.exact_up_to, H.exact_steps = exact_up_to, -1  # terms above exact_up_to: the LP
    H.pairs = data.draw(st.booleans())
    try:
        schedule, makespan, _, _, proven, _ = exhaustive.run_search(
            chain, budget, allow_drop, None, "all", None, incumbent, dominance=dominance)
    finally:
        H.exact_up_to, H.exact_steps, H.pairs = old
    assert proven
    if want is None:
        assert schedule is None
    else:
        assert math.isclose(makespan, want, rel_tol=1e-9, abs_tol=1e-12)
        assert math.isclose(simulate(chain, schedule, budget, allow_drop=allow_drop).makespan,
                            want, rel_tol=1e-9, abs_tol=1e-12)


@settings(max_examples=examples(80, 3), deadline=None)
@given(st.data(), chains(1, 5, max_size=8, fall_costs=True), st.booleans(), st.booleans(),
       st.sampled_from([0, 12]))
def test_search_with_the_bound_equals_plain_dijkstra(data, chain, fall, allow_drop,
                                                     exact_up_to):
    """With and without fall costs (and with Drop), the 0/1 knapsack or its fractional
    relaxation, with and without dominance and an incumbent: the optimum is plain
    Dijkstra's."""
    chain = chain if fall else _without_fall_costs(chain)
    _check_against_plain_dijkstra(data, chain, allow_drop, exact_up_to)


@settings(max_examples=examples(80, 5), deadline=None)
@given(st.data(), chains(1, 5, max_size=8, fall_costs=None, unsaved_outputs=True), st.booleans(),
       st.sampled_from([0, 12]))
def test_search_on_unsaved_outputs_equals_plain_dijkstra(data, chain, allow_drop, exact_up_to):
    """Chains whose outputs some backward does not read (``output_saved``): the bound, the
    dominance and the state memory follow the table; the optimum is plain Dijkstra's."""
    _check_against_plain_dijkstra(data, chain, allow_drop, exact_up_to)


@settings(max_examples=examples(40, 9), deadline=None)
@given(st.data(), chains(1, 4, max_size=6, fall_costs=None, unsaved_outputs=None))
def test_a_lean_state_dominates_its_state(data, chain):
    """Lemma 3 of proofs/exhaustive.md, directly: from reachable states holding a redundant
    plain value (a plain x_i beside the t_i that contains it, or a plain x_j above the next
    backward), the same state without them finishes no later (plain Dijkstra from both)."""
    from remat_theory.model.simulator import state_memory
    from solvers.exhaustive import Lean

    budget = data.draw(st.integers(chain.memory_lower_bound(), chain.store_all_memory()))
    lean = Lean(chain)
    ops = _ops(chain, False)
    seen, todo, pairs = set(), [(State.initial(chain), chain.x_size[0])], []
    while todo:
        s, mem = todo.pop()
        if s in seen:
            continue
        seen.add(s)
        sub = lean(s)
        if sub is not None:
            assert sub != s and state_memory(chain, sub) < mem
            pairs.append((s, mem, sub))
        for op in ops:
            r = transition(chain, s, mem, op)
            if not isinstance(r, str) and r.peak <= budget:
                todo.append((r.state, r.memory_after))
    for s, mem, sub in pairs[:6]:
        whole = _plain_dijkstra(chain, budget, start=(s, mem))
        part = _plain_dijkstra(chain, budget, start=(sub, state_memory(chain, sub)))
        if whole is not None:
            assert part is not None and part <= whole + 1e-9, (s, sub)


def test_the_bound_sees_recomputation_the_simple_bound_does_not():
    """At a tight budget the memory at the next backward forces recomputation: among the
    states reachable within the budget, the bound is strictly above the simple one on some
    (and never above the true cost to go, by the tests above)."""
    from solvers.exhaustive_bounds import Heuristic as _Heuristic, heuristic_simple as _heuristic_simple

    chain = make("random", 6, 0)
    b = solvers.solve(chain, 0, "dp-weak").min_budget
    h = _Heuristic(chain, b)
    ops = _ops(chain, False)
    above, seen, todo = 0, set(), [(State.initial(chain), chain.x_size[0])]
    while todo:
        s, mem = todo.pop()
        if s in seen:
            continue
        seen.add(s)
        above += h(s) > _heuristic_simple(chain, s) + 1e-9
        for op in ops:
            r = transition(chain, s, mem, op)
            if not isinstance(r, str) and r.peak <= b:
                todo.append((r.state, r.memory_after))
    assert above > 0


def test_an_optimal_incumbent_is_proven_and_returned():
    """With the optimum as its incumbent, the search keeps no state whose bound reaches it,
    runs out of states and returns the incumbent itself, proven, as text or as a schedule;
    an invalid incumbent is ignored."""
    from solvers.exhaustive import search

    c, b = _tight_nine_stages()
    schedule, makespan, peak, bound, proven = search(c, b)
    assert proven and schedule is not None
    for given in (schedule, str(schedule)):
        got = search(c, b, incumbent=given)
        assert got[4] and got[1] == makespan == got[3] and got[2] == peak
        assert str(got[0]) == str(schedule)
    assert search(c, b, incumbent="Loss")[1] == makespan  # invalid: a plain search


def test_a_long_chain_is_refused_with_a_message_not_a_crash():
    """Issue #29 (limits at any size): the size guard's message wrote 4^L (L+2) out in full;
    past 4,300 digits Python refuses to print an integer (ValueError, "internal error")."""
    from remat_theory.model.errors import SolverLimitError

    chain = Chain.homogeneous(3000, x_size=1, tape_size=1)
    with pytest.raises(SolverLimitError, match=r"4\^3000 \* 3002 states; max_stages = 8"):
        solvers.solve(chain, chain.store_all_memory() // 2, "exhaustive", time_limit=5)

# ---------------------------------------------------------------------- class restriction
@pytest.mark.parametrize("cls", ["persistent", "weak"])
@settings(max_examples=examples(40, 11), deadline=None)
@given(st.data(), chains(1, 4, max_size=8, fall_costs=None, unsaved_outputs=None))
def test_class_restricted_search_equals_plain_dijkstra_of_the_class(cls, data, chain):
    """``schedule_class`` restricts the search to exactly the class: its optimum at a drawn
    budget, and its smallest feasible budget, are those of a plain Dijkstra search that
    applies the class rules of :mod:`remat_theory.model.persistence` edge by edge
    (tests/_class_search.py), on chains with and without each optional field.  (The DPs are
    checked against this search: tests/test_dp.py.)"""
    from _class_search import class_search

    least, _ = class_search(chain, cls, None)
    assert min_feasible_budget(chain, schedule_class=cls) == least
    budget = data.draw(st.integers(max(0, least - 1), chain.store_all_memory()))
    want, witness = class_search(chain, cls, budget)
    sol = solvers.solve(chain, budget, "exhaustive", schedule_class=cls)
    if want == math.inf:
        assert sol.status == INFEASIBLE and sol.min_budget == least
    else:
        assert sol.status == OPTIMAL and sol.makespan == pytest.approx(want, rel=1e-12), witness
