"""The ``barriers`` option of ``dp``: no checkpointed forward pass from stage j to j+1.

A pass ``Fck_s Fn_{s+1} .. Fn_{k-1}`` crosses the barrier j when s <= j < k - 1 (it runs
``Fn_{j+1}``).  The oracles, sharing no code with the DP:

* every persistent schedule of the chain, enumerated in Rotor's nested form (a segment is
  the loss, ``Fall_s B_s``, ``Fall_s <s+1, t> B_s`` or ``Fck_s Fn.. <k, t> <s, k-1>``), each
  replayed by the simulator, the crossing ones dropped;
* the Dijkstra search over the simulator's transitions restricted to the persistent class
  (tests/_class_search.py) with ``Fn_{j+1}`` forbidden: in a persistent schedule every
  ``Fn_i`` reads the x_i the operation just before made (rule P1), so it continues a pass
  that started at or before i - 1, and forbidding ``Fn_{j+1}`` forbids exactly the passes
  across j.

No torch (remat_theory/torch/run/nested.py imports it): passes are read from the tokens here.
"""
from __future__ import annotations

import math
import random
from functools import lru_cache

import pytest
from _tiers import examples
from hypothesis import event, given, settings
from hypothesis import strategies as st

import solvers
from _class_search import class_search
from remat_theory import Chain, Op, State, simulate, transition
from remat_theory.model.errors import SolverOptionError
from remat_theory.model.persistence import is_persistent
from remat_theory.model.schedule import Fn
from remat_theory.model.solution import CLASS_NONE, FEASIBLE, INFEASIBLE, OPTIMAL
from remat_theory.strategies import chains
from solvers.dp import AMONG_BARRIERS, min_feasible_budget


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


# ---------------------------------------------------------------------- passes, by hand
def passes(tokens) -> list[tuple[int, int]]:
    """The forward passes ``(s, k)`` of a schedule's tokens (``Fck_s Fn_{s+1} .. Fn_{k-1}``);
    asserts that every ``Fn_i`` directly follows ``Fck_{i-1}`` or ``Fn_{i-1}`` (the nested
    form: a pass is a run of consecutive tokens)."""
    out, prev = [], None
    for tok in tokens:
        if tok.startswith("Fck"):
            out.append([int(tok[3:]), int(tok[3:]) + 1])
        elif tok.startswith("Fn"):
            i = int(tok[2:])
            assert prev in (f"Fck{i - 1}", f"Fn{i - 1}"), (tok, prev, tokens)
            out[-1][1] = i + 1
        prev = tok
    return [tuple(p) for p in out]


def crossing(tokens, barriers) -> list[tuple[int, int]]:
    """The passes ``(s, k)`` of ``tokens`` with s <= j < k - 1 for a barrier j."""
    return [(s, k) for s, k in passes(tokens) if any(s <= j < k - 1 for j in barriers)]


def test_passes_by_hand():
    tokens = "Fck0 Fn1 Fn2 Fck3 Fn4 Fall5 Loss B5 Fall3 Fall4 B4 B3 Fck0 Fn1 Fall2 B2 Fall0 Fall1 B1 B0"
    assert passes(tokens.split()) == [(0, 3), (3, 5), (0, 2)]
    assert crossing(tokens.split(), (2,)) == []
    assert crossing(tokens.split(), (1,)) == [(0, 3)]
    assert crossing(tokens.split(), (3,)) == [(3, 5)]


# ---------------------------------------------------------------------- oracle 1: enumeration
def nested_schedules(L: int) -> list[tuple[str, ...]]:
    """Every persistent schedule of an L-stage chain in nested form, as token tuples."""

    @lru_cache(None)
    def seg(s: int, t: int) -> tuple:
        if s == t:
            return (("Loss",),) if s == L else ((f"Fall{s}", f"B{s}"),)
        out = [(f"Fall{s}",) + r + (f"B{s}",) for r in seg(s + 1, t)]
        for k in range(s + 1, t + 1):
            run = (f"Fck{s}",) + tuple(f"Fn{j}" for j in range(s + 1, k))
            out += [run + r1 + r2 for r1 in seg(k, t) for r2 in seg(s, k - 1)]
        return tuple(out)

    return list(seg(0, L))


def replayed(chain: Chain) -> list[tuple[int, float, tuple]]:
    """(peak, makespan, tokens) of every nested-form schedule of ``chain``, replayed by the
    simulator's own transitions (:func:`remat_theory.transition`, what ``simulate`` runs
    op by op; a schedule it refuses fails the test), the common prefixes once."""
    trie: dict = {}
    for tokens in nested_schedules(chain.length):
        node = trie
        for tok in tokens:
            node = node.setdefault(tok, {})
        node[None] = tokens
    out = []
    start = State.initial(chain)
    stack = [(trie, start, chain.x_size[0], chain.x_size[0], 0.0)]
    while stack:
        node, state, memory, top, time = stack.pop()
        for tok, child in node.items():
            if tok is None:
                assert state.is_final(), child
                out.append((top, time, child))
                continue
            r = transition(chain, state, memory, Op.parse(tok))
            assert not isinstance(r, str), (tok, r)
            stack.append((child, r.state, r.memory_after, max(top, r.peak), time + r.time))
    return out


def allowed(all_schedules, barriers) -> list[tuple[int, float]]:
    """(peak, makespan) of the schedules with no pass across a barrier."""
    return [(p, m) for p, m, tokens in all_schedules if not crossing(tokens, barriers)]


def oracle(kept, budget) -> float:
    """Least makespan under ``budget`` among ``kept`` (:func:`allowed`)."""
    return min((m for p, m in kept if p <= budget), default=math.inf)


def test_enumeration_by_hand():
    """The nested-form counts (1806 schedules at 6 stages), all distinct, all persistent,
    each replayed exactly as ``simulate`` replays it."""
    assert [len(nested_schedules(L)) for L in range(1, 7)] == [2, 6, 22, 90, 394, 1806]
    chain = Chain(fwd_time=[1.0, 2.0, 0.0, 3.0], bwd_time=[2.0, 1.0, 4.0, 2.0, 1.0],
                  x_size=[3, 1, 4, 1, 5], tape_size=[2, 6, 2, 7], fwd_overhead=[1, 0, 2, 0],
                  bwd_overhead=[0, 3, 0, 1, 1], output_saved=[True, False, True, True])
    out = replayed(chain)
    assert len({t for _, _, t in out}) == 90
    for p, m, tokens in out:
        r = simulate(chain, " ".join(tokens))
        assert (r.peak_memory, r.makespan) == (p, m) and is_persistent(chain, " ".join(tokens))


# ---------------------------------------------------------------------- strategies
def _chains_with_barriers(**kwargs):
    return chains(2, 6, **kwargs).flatmap(lambda c: st.tuples(
        st.just(c), st.sets(st.integers(0, c.length - 2), min_size=1).map(sorted)))


VARIATIONS = {
    "plain": dict(overheads=None),
    "fall-costs+unsaved": dict(overheads=None, fall_costs=None, unsaved_outputs=None),
}


def _budgets(all_schedules, allowed_least: int, count: int = 12) -> list[int]:
    """The least allowed peak and one less, and up to ``count`` other peaks (the optimum
    of a budget changes only at a peak of some schedule) and one less each."""
    peaks = sorted({p for p, _, _ in all_schedules if p >= allowed_least})
    pick = peaks if len(peaks) <= count else [peaks[round(i * (len(peaks) - 1) / (count - 1))]
                                               for i in range(count)]
    return sorted({b for p in pick + [allowed_least] for b in (p - 1, p) if b >= 0})


def _check(chain: Chain, barriers: list[int], budget: int, want: float, least: int) -> None:
    sol = solvers.solve(chain, budget, "dp", barriers=barriers)  # replayed by the registry
    assert sol.optimal_for == CLASS_NONE and sol.info["barriers"] == list(barriers)
    if want == math.inf:
        assert sol.status == INFEASIBLE and sol.schedule is None, (budget, sol)
        assert sol.min_budget == least, (budget, sol.min_budget, least)
        return
    assert sol.status == FEASIBLE and sol.bound is None, sol
    assert sol.info["optimal_among"] == AMONG_BARRIERS
    assert "not proven optimal among all persistent" in sol.message
    assert _close(sol.makespan, want), (budget, barriers, sol.makespan, want, str(sol.schedule))
    tokens = sol.schedule.tokens()
    r = simulate(chain, sol.schedule, budget)
    assert r.peak_memory <= budget and _close(r.makespan, sol.makespan)
    assert not crossing(tokens, barriers), (barriers, tokens)
    assert not any(Fn(j + 1) in sol.schedule for j in barriers)
    assert sol.min_budget == least


# ---------------------------------------------------------------------- (a), (b): the optimum
@pytest.mark.parametrize("variation", list(VARIATIONS))
def test_dp_with_barriers_equals_the_enumerated_optimum(variation):
    """At the least budget of the schedules without a crossing pass, one unit below, and
    at peaks over the whole range: dp's makespan is the enumerated optimum, its schedule
    fits and crosses no barrier, an infeasible answer names that least budget."""

    @settings(max_examples=examples(60, 12), deadline=None)
    @given(_chains_with_barriers(**VARIATIONS[variation]))
    def check(cb):
        chain, barriers = cb
        event(f"{chain.length} stages")
        everything = replayed(chain)
        kept = allowed(everything, barriers)
        least = min(p for p, _ in kept)
        assert min_feasible_budget(chain, barriers) == least
        for b in _budgets(everything, least):
            _check(chain, barriers, b, oracle(kept, b), least)

    check()


@settings(max_examples=examples(30, 3), deadline=None)
@given(chains(2, 6, overheads=None, fall_costs=None, unsaved_outputs=None).flatmap(
    lambda c: st.tuples(st.just(c), st.sets(st.integers(0, c.length - 2), min_size=1).map(sorted),
                        st.floats(0, 1))))
def test_dp_with_barriers_equals_the_class_search(cbf):
    """The second oracle: the persistent class's Dijkstra with Fn_{j+1} forbidden, at the
    least budget and at one drawn between it and store-all."""
    chain, barriers, f = cbf
    forbid = [Fn(j + 1) for j in barriers]
    least, _ = class_search(chain, "persistent", None, forbid)
    assert min_feasible_budget(chain, barriers) == least
    top = max(least, chain.store_all_memory())
    for b in sorted({least - 1, least, least + round(f * (top - least))}):
        want, _ = class_search(chain, "persistent", b, forbid)
        _check(chain, barriers, b, want, least)


def test_every_barrier_leaves_single_stage_passes():
    """Barriers after every stage: only ``Fck_s`` alone, then ``Fall``; at the least budget
    the schedule still fits, and a barrier the optimum does not cross changes nothing."""
    chain = Chain.homogeneous(6)
    every = list(range(5))
    kept = allowed(replayed(chain), every)
    least = min_feasible_budget(chain, every)
    assert least == min(p for p, _ in kept)
    assert least > min_feasible_budget(chain)
    _check(chain, every, least, oracle(kept, least), least)
    for b in range(least, chain.store_all_memory() + 1):
        plain = solvers.solve(chain, b, "dp")
        free = [j for j in range(5) if not crossing(plain.schedule.tokens(), [j])]
        if free:
            sol = solvers.solve(chain, b, "dp", barriers=free)
            assert _close(sol.makespan, plain.makespan), b


def test_slots_with_barriers():
    """``slots`` mode with barriers: a valid schedule without crossing passes, never better
    than the exact answer with the same barriers, no claim; infeasible at a slot count that
    rounds too much, with the exact smallest budget of the restricted schedules."""
    rng = random.Random(5)
    for _ in range(20):
        L = rng.randint(3, 6)
        x = [rng.randint(1, 9) * 7 for _ in range(L + 1)]
        chain = Chain(fwd_time=[float(rng.randint(1, 9)) for _ in range(L)],
                      bwd_time=[float(rng.randint(1, 9)) for _ in range(L + 1)], x_size=x,
                      tape_size=[x[i + 1] + rng.randint(0, 20) for i in range(L)])
        barriers = sorted(rng.sample(range(L - 1), rng.randint(1, L - 1)))
        least = min_feasible_budget(chain, barriers)
        for b in (least, (least + chain.store_all_memory()) // 2, chain.store_all_memory()):
            exact = solvers.solve(chain, b, "dp", barriers=barriers)
            for slots in (3, 10, 40):
                sol = solvers.solve(chain, b, "dp", barriers=barriers, slots=slots,
                                    slot_bound=True)
                assert sol.optimal_for == CLASS_NONE and sol.info["barriers"] == barriers
                if sol.schedule is None:
                    assert sol.status == INFEASIBLE and sol.min_budget == least
                    continue
                assert sol.status == FEASIBLE and sol.bound is None
                assert not crossing(sol.schedule.tokens(), barriers)
                assert simulate(chain, sol.schedule, b).peak_memory <= b
                assert sol.makespan >= exact.makespan - 1e-9
                lb = sol.info.get("lower_bound_among")
                if lb is not None:
                    assert lb[0] <= exact.makespan + 1e-9


# ---------------------------------------------------------------------- (c): no barriers
def _golden_chains() -> list[Chain]:
    out = [Chain.homogeneous(7)]
    rng = random.Random(20240611)
    for L, extras in ((6, False), (7, True), (8, True)):
        x = [rng.randint(1, 10) for _ in range(L + 1)]
        kw = dict(fwd_time=[float(rng.randint(0, 10)) for _ in range(L)],
                  bwd_time=[float(rng.randint(0, 10)) for _ in range(L + 1)], x_size=x,
                  tape_size=[x[i + 1] + rng.randint(0, 6) for i in range(L)],
                  fwd_overhead=[rng.randint(0, 5) for _ in range(L)],
                  bwd_overhead=[rng.randint(0, 5) for _ in range(L + 1)])
        if extras:
            kw.update(fall_time=[float(rng.randint(0, 12)) for _ in range(L)],
                      fall_overhead=[rng.randint(0, 6) for _ in range(L)],
                      output_saved=[rng.random() < 0.7 for _ in range(L)])
        out.append(Chain(**kw))
    return out


#: dp's answers on :func:`_golden_chains` before the option existed (commit 6fc3055): per
#: chain, (budget, status, makespan, min_budget, schedule) exact and
#: (budget, "slots16", status, makespan, schedule) with slots=16.
GOLDEN = [
    [(5, 'optimal', 34.0, 5, 'Fck0 Fn1 Fn2 Fn3 Fn4 Fn5 Fall6 Loss B6 Fck0 Fn1 Fn2 Fn3 Fn4 Fall5 B5 Fck0 Fn1 Fn2 Fn3 Fall4 B4 Fck0 Fn1 Fn2 Fall3 B3 Fck0 Fn1 Fall2 B2 Fall0 Fall1 B1 B0'), (5, 'slots16', 'infeasible', None, None), (6, 'optimal', 22.0, 5, 'Fck0 Fn1 Fn2 Fck3 Fn4 Fn5 Fall6 Loss B6 Fck3 Fn4 Fall5 B5 Fall3 Fall4 B4 B3 Fall0 Fall1 Fall2 B2 B1 B0'), (6, 'slots16', 'feasible', 34.0, 'Fck0 Fn1 Fn2 Fn3 Fn4 Fn5 Fall6 Loss B6 Fck0 Fn1 Fn2 Fn3 Fn4 Fall5 B5 Fck0 Fn1 Fn2 Fn3 Fall4 B4 Fck0 Fn1 Fn2 Fall3 B3 Fck0 Fn1 Fall2 B2 Fall0 Fall1 B1 B0'), (8, 'optimal', 17.0, 5, 'Fall0 Fall1 Fck2 Fn3 Fn4 Fall5 Fall6 Loss B6 B5 Fall2 Fall3 Fall4 B4 B3 B2 B1 B0'), (8, 'slots16', 'optimal', 17.0, 'Fall0 Fall1 Fck2 Fn3 Fn4 Fall5 Fall6 Loss B6 B5 Fall2 Fall3 Fall4 B4 B3 B2 B1 B0'), (10, 'optimal', 14.0, 5, 'Fall0 Fall1 Fall2 Fall3 Fall4 Fall5 Fall6 Loss B6 B5 B4 B3 B2 B1 B0'), (10, 'slots16', 'feasible', 17.0, 'Fall0 Fall1 Fck2 Fn3 Fn4 Fall5 Fall6 Loss B6 B5 Fall2 Fall3 Fall4 B4 B3 B2 B1 B0')],
    [(41, 'optimal', 108.0, 41, 'Fck0 Fn1 Fn2 Fn3 Fn4 Fall5 Loss B5 Fck0 Fn1 Fn2 Fn3 Fall4 B4 Fck0 Fn1 Fall2 Fall3 B3 B2 Fall0 Fall1 B1 B0'), (41, 'slots16', 'infeasible', None, None), (47, 'optimal', 79.0, 41, 'Fck0 Fn1 Fn2 Fck3 Fall4 Fall5 Loss B5 B4 Fall3 B3 Fall0 Fall1 Fall2 B2 B1 B0'), (47, 'slots16', 'infeasible', None, None), (53, 'optimal', 65.0, 41, 'Fck0 Fn1 Fall2 Fall3 Fall4 Fall5 Loss B5 B4 B3 B2 Fall0 Fall1 B1 B0'), (53, 'slots16', 'feasible', 82.0, 'Fck0 Fn1 Fn2 Fn3 Fall4 Fall5 Loss B5 B4 Fck0 Fn1 Fall2 Fall3 B3 B2 Fall0 Fall1 B1 B0'), (60, 'optimal', 62.0, 41, 'Fall0 Fall1 Fall2 Fall3 Fall4 Fall5 Loss B5 B4 B3 B2 B1 B0'), (60, 'slots16', 'feasible', 75.0, 'Fck0 Fn1 Fn2 Fall3 Fall4 Fall5 Loss B5 B4 B3 Fall0 Fall1 Fall2 B2 B1 B0')],
    [(37, 'optimal', 116.0, 37, 'Fck0 Fn1 Fn2 Fn3 Fall4 Fall5 Fall6 Loss B6 B5 B4 Fck0 Fn1 Fn2 Fall3 B3 Fck0 Fn1 Fall2 B2 Fck0 Fall1 B1 Fall0 B0'), (37, 'slots16', 'infeasible', None, None), (45, 'optimal', 83.0, 37, 'Fck0 Fck1 Fn2 Fall3 Fall4 Fall5 Fall6 Loss B6 B5 B4 B3 Fall1 Fall2 B2 B1 Fall0 B0'), (45, 'slots16', 'feasible', 97.0, 'Fck0 Fn1 Fn2 Fall3 Fall4 Fall5 Fall6 Loss B6 B5 B4 B3 Fck0 Fn1 Fall2 B2 Fck0 Fall1 B1 Fall0 B0'), (53, 'optimal', 80.0, 37, 'Fall0 Fck1 Fck2 Fall3 Fall4 Fall5 Fall6 Loss B6 B5 B4 B3 Fall2 B2 Fall1 B1 B0'), (53, 'slots16', 'feasible', 94.0, 'Fck0 Fn1 Fn2 Fall3 Fall4 Fall5 Fall6 Loss B6 B5 B4 B3 Fck0 Fck1 Fall2 B2 Fall1 B1 Fall0 B0'), (61, 'optimal', 70.0, 37, 'Fall0 Fall1 Fall2 Fall3 Fall4 Fall5 Fall6 Loss B6 B5 B4 B3 B2 B1 B0'), (61, 'slots16', 'feasible', 80.0, 'Fall0 Fck1 Fn2 Fall3 Fall4 Fall5 Fall6 Loss B6 B5 B4 B3 Fall1 Fall2 B2 B1 B0')],
    [(46, 'optimal', 133.0, 46, 'Fck0 Fn1 Fn2 Fn3 Fall4 Fck5 Fall6 Fall7 Loss B7 B6 Fall5 B5 B4 Fck0 Fn1 Fall2 Fall3 B3 B2 Fall0 Fall1 B1 B0'), (46, 'slots16', 'infeasible', None, None), (57, 'optimal', 116.0, 46, 'Fck0 Fn1 Fn2 Fall3 Fall4 Fall5 Fall6 Fall7 Loss B7 B6 B5 B4 B3 Fall0 Fall1 Fall2 B2 B1 B0'), (57, 'slots16', 'feasible', 117.0, 'Fck0 Fn1 Fn2 Fall3 Fall4 Fck5 Fn6 Fall7 Loss B7 Fall5 Fall6 B6 B5 B4 B3 Fall0 Fall1 Fall2 B2 B1 B0'), (68, 'optimal', 109.0, 46, 'Fck0 Fn1 Fall2 Fall3 Fall4 Fall5 Fall6 Fall7 Loss B7 B6 B5 B4 B3 B2 Fall0 Fall1 B1 B0'), (68, 'slots16', 'feasible', 116.0, 'Fck0 Fn1 Fn2 Fall3 Fall4 Fck5 Fall6 Fall7 Loss B7 B6 Fall5 B5 B4 B3 Fall0 Fall1 Fall2 B2 B1 B0'), (80, 'optimal', 99.0, 46, 'Fall0 Fall1 Fall2 Fall3 Fall4 Fall5 Fall6 Fall7 Loss B7 B6 B5 B4 B3 B2 B1 B0'), (80, 'slots16', 'feasible', 109.0, 'Fck0 Fn1 Fall2 Fall3 Fall4 Fck5 Fall6 Fall7 Loss B7 B6 Fall5 B5 B4 B3 B2 Fall0 Fall1 B1 B0')],
]


def _answers(chain: Chain, budget: int, **options) -> list[tuple]:
    s = solvers.solve(chain, budget, "dp", **options)
    s2 = solvers.solve(chain, budget, "dp", slots=16, **options)
    return [(budget, s.status, s.makespan, s.min_budget,
             None if s.schedule is None else " ".join(s.schedule.tokens())),
            (budget, "slots16", s2.status, s2.makespan,
             None if s2.schedule is None else " ".join(s2.schedule.tokens()))]


@pytest.mark.parametrize("empty", [None, (), []])
def test_no_barriers_gives_the_answers_of_before(empty):
    """Without barriers (the option left out, () or []) dp answers exactly what it did
    before the option existed, schedules included; and the whole Solution is the same."""
    options = {} if empty is None else {"barriers": empty}
    for chain, rows in zip(_golden_chains(), GOLDEN, strict=True):
        for b in sorted({r[0] for r in rows}):
            assert _answers(chain, b, **options) == [r for r in rows if r[0] == b], b
            plain, given_ = (solvers.solve(chain, b, "dp", **o) for o in ({}, options))
            assert plain.replace(wall_time=0) == given_.replace(wall_time=0)
            assert "barriers" not in given_.info
            assert plain.status in (OPTIMAL, INFEASIBLE) and plain.optimal_for == "persistent"


@settings(max_examples=examples(25, 13), deadline=None)
@given(chains(1, 5, overheads=None, fall_costs=None, unsaved_outputs=None), st.floats(0, 1))
def test_no_barriers_is_the_persistent_optimum(chain, f):
    least, _ = class_search(chain, "persistent", None)
    assert min_feasible_budget(chain) == min_feasible_budget(chain, ()) == least
    b = least + round(f * (chain.store_all_memory() - least))
    want, _ = class_search(chain, "persistent", b)
    sol = solvers.solve(chain, b, "dp", barriers=())
    assert sol.status == OPTIMAL and sol.optimal_for == "persistent" and _close(sol.makespan, want)


# ---------------------------------------------------------------------- (d): bad values
@pytest.mark.parametrize("value, message", [
    (3, r"barriers = 3 must be a list of integers"),
    ("1", r"barriers = '1' must be a list of integers"),
    ({1}, r"barriers = \{1\} must be a list of integers"),
    (None, r"barriers = None is not allowed"),
    ([1.5], r"barriers = \[1.5\]: 1.5 is not an integer"),
    ([True], r"barriers = \[True\]: True is not an integer"),
    (["2"], r"barriers = \['2'\]: '2' is not an integer"),
    ([-1], r"barriers = \[-1\]: -1 is out of range \(each must be 0 <= j <= the number "
           r"of stages - 2 = 3 on this chain\)"),
    ([1, 4], r"barriers = \[1, 4\]: 4 is out of range"),
])
def test_bad_barriers_are_refused(value, message):
    chain = Chain.homogeneous(5)
    with pytest.raises(SolverOptionError, match=r"solver 'dp': option " + message):
        solvers.solve(chain, chain.store_all_memory(), "dp", barriers=value)
    with pytest.raises(SolverOptionError, match=r"option " + message):  # called directly
        solvers.dp.solve_dp(chain, chain.store_all_memory(), barriers=value)


def test_one_stage_chain_has_no_barrier_position():
    chain = Chain.homogeneous(1)
    with pytest.raises(SolverOptionError, match=r"barriers = \[0\]: 0 is out of range"):
        solvers.solve(chain, 10, "dp", barriers=[0])
    assert solvers.solve(chain, 10, "dp", barriers=[]).status == OPTIMAL


def test_barriers_are_normalised_and_documented():
    chain = Chain.homogeneous(6)
    b = chain.store_all_memory() - 2
    a = solvers.solve(chain, b, "dp", barriers=(3, 1, 3))
    c = solvers.solve(chain, b, "dp", barriers=[1, 3])
    assert a.info["barriers"] == c.info["barriers"] == [1, 3]
    assert a.schedule == c.schedule and "after stages 1, 3" in a.message
    info = solvers.registry.get("dp")
    assert "barriers" in info.options and info.defaults["barriers"] == ()
    assert info.schema["barriers"].help("barriers", ()).startswith(
        "barriers: a list of integers >= 0 and <= the number of stages - 2 (default ())")
