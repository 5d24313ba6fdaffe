"""Exhaustive search: the optimum with no modelling argument at all.

A* (Dijkstra with an admissible, consistent heuristic) over the simulator's own states
(:class:`remat_theory.simulator.State`), using the simulator's own transition function, so
the only assumption is the operation table itself.  A state is the set of plain
activations held, the set of tapes held, and which backward runs next; memory is a
function of the state.  Edges are the valid operations whose peak fits the budget, weighted
by their time.  The first final state popped is optimal.

Heuristic (a lower bound on the time still to spend): every backward not yet run costs its
time, and every remaining B_j whose tape t_{j+1} is not held needs at least one more
``Fall_j``.  It never decreases by more than an edge's cost, so A* returns the optimum.

The state space has at most 2^L * 2^L * (L+2) states: practical up to about 7-8 stages.

:func:`min_feasible_budget` finds the smallest budget at which any schedule exists, by a
bottleneck (minimax) variant of the same search: exact for the whole schedule space.
"""
from __future__ import annotations

import heapq
import itertools
import time

from remat_theory.chain import Chain
from remat_theory.errors import SolverError
from remat_theory.schedule import LOSS_OP, Bwd, DropT, DropX, Fall, Fck, Fn, Schedule
from remat_theory.simulator import State, transition
from remat_theory.solution import (CLASS_ALL, CLASS_ALL_WITH_DROP, INFEASIBLE, OPTIMAL,
                                   TIME_LIMIT, Solution)

from .registry import register

DEFAULT_MAX_STAGES = 8


def _check_size(chain: Chain, max_stages: int) -> None:
    if chain.length > max_stages:
        raise SolverError(
            f"exhaustive search on {chain.length} stages would explore up to "
            f"{4 ** chain.length * (chain.length + 2):,} states; max_stages = {max_stages} "
            f"(raise max_stages to force it)")


class _Moves:
    """Candidate operations from a state (validity is decided by ``transition``)."""

    def __init__(self, chain: Chain, allow_drop: bool):
        L = chain.length
        self.chain = chain
        self.allow_drop = allow_drop
        self.fwd = [(Fn(i), Fck(i), Fall(i)) for i in range(L)]
        self.bwd = [Bwd(i) for i in range(L)]
        self.dropx = [DropX(i) if i else None for i in range(L + 1)]
        self.dropt = [DropT(i) if i else None for i in range(L + 1)]

    def __call__(self, state: State):
        L = self.chain.length
        plain, tapes, nxt = state
        if nxt == L:
            yield LOSS_OP
        elif nxt >= 0:
            yield self.bwd[nxt]
        top = min(nxt, L - 1)
        for i in range(top + 1):
            if plain >> i & 1 or (i and tapes >> i & 1):
                yield from self.fwd[i]
        if self.allow_drop:
            for i in range(1, L + 1):
                if plain >> i & 1:
                    yield self.dropx[i]
                if tapes >> i & 1:
                    yield self.dropt[i]


def _heuristic(chain: Chain, state: State) -> float:
    plain, tapes, nxt = state
    if nxt < 0:
        return 0.0
    h = chain.bwd_time[chain.length] if nxt == chain.length else 0.0
    for j in range(min(nxt, chain.length - 1), -1, -1):
        h += chain.bwd_time[j]
        if not tapes >> (j + 1) & 1:
            h += chain.fwd_time[j]
    return h


def _rebuild(parent: dict, state: State) -> Schedule:
    ops = []
    while parent[state] is not None:
        state, op = parent[state]
        ops.append(op)
    return Schedule(reversed(ops))


def search(chain: Chain, budget: int, allow_drop: bool = False, time_limit: float | None = None):
    """A* over simulator states.  Returns ``(schedule, makespan, peak, bound, proven)``;
    schedule is None when no schedule fits (proven) or the time limit left none."""
    start = State.initial(chain)
    mem0 = chain.x_size[0]
    if mem0 > budget:
        return None, None, None, None, True
    moves = _Moves(chain, allow_drop)
    g = {start: 0.0}
    parent = {start: None}
    peak_to = {start: mem0}  # peak along the best path found so far (reporting only)
    counter = itertools.count()
    heap = [(_heuristic(chain, start), 0.0, next(counter), start, mem0)]
    closed = set()
    deadline = None if time_limit is None else time.perf_counter() + time_limit
    pops = 0
    while heap:
        f, gs, _, s, mem = heapq.heappop(heap)
        if s in closed:
            continue
        if s.is_final():
            return _rebuild(parent, s), gs, peak_to[s], gs, True
        closed.add(s)
        pops += 1
        if deadline is not None and pops % 2048 == 0 and time.perf_counter() > deadline:
            return None, None, None, f, False
        for op in moves(s):
            r = transition(chain, s, mem, op, allow_drop)
            if isinstance(r, str) or r.peak > budget:
                continue
            ns = r.state
            if ns in closed:
                continue
            ng = gs + r.time
            old = g.get(ns)
            if old is None or ng < old:
                g[ns] = ng
                parent[ns] = (s, op)
                peak_to[ns] = max(peak_to[s], r.peak)
                heapq.heappush(heap, (ng + _heuristic(chain, ns), ng, next(counter), ns,
                                      r.memory_after))
    return None, None, None, None, True


def min_feasible_budget(chain: Chain, allow_drop: bool = False,
                        max_stages: int = DEFAULT_MAX_STAGES) -> int:
    """The smallest budget (bytes) at which some valid schedule exists, over ALL schedules.

    Bottleneck shortest path: minimize, over paths from the initial state to a final one,
    the largest op peak on the path (Dijkstra with max instead of +).
    """
    _check_size(chain, max_stages)
    start = State.initial(chain)
    moves = _Moves(chain, allow_drop)
    best = {start: chain.x_size[0]}
    counter = itertools.count()
    heap = [(chain.x_size[0], next(counter), start, chain.x_size[0])]
    closed = set()
    while heap:
        b, _, s, mem = heapq.heappop(heap)
        if s in closed:
            continue
        if s.is_final():
            return b
        closed.add(s)
        for op in moves(s):
            r = transition(chain, s, mem, op, allow_drop)
            if isinstance(r, str):
                continue
            nb = max(b, r.peak)
            ns = r.state
            if ns not in closed and nb < best.get(ns, float("inf")):
                best[ns] = nb
                heapq.heappush(heap, (nb, next(counter), ns, r.memory_after))
    raise SolverError("no schedule exists at any budget")  # unreachable: store-all always exists


@register("exhaustive", optimal_for=CLASS_ALL, exact=True,
          description="A* over simulator states: the exact optimum over all schedules (L <= 8).")
def solve_exhaustive(chain: Chain, budget: int, *, allow_drop: bool = False,
                     time_limit: float | None = None,
                     max_stages: int = DEFAULT_MAX_STAGES) -> Solution:
    """Exact optimum over every valid schedule of the model (with ``allow_drop``, also over
    schedules using explicit deletions).  ``time_limit`` (seconds) stops the search and
    reports the best proven lower bound with status ``time_limit``."""
    _check_size(chain, max_stages)
    cls = CLASS_ALL_WITH_DROP if allow_drop else CLASS_ALL
    schedule, makespan, peak, bound, proven = search(chain, budget, allow_drop, time_limit)
    info = {"allow_drop": allow_drop}
    if schedule is not None:
        return Solution("exhaustive", OPTIMAL, schedule, makespan, peak, budget, bound=makespan,
                        optimal_for=cls, info=info)
    if not proven:
        return Solution("exhaustive", TIME_LIMIT, None, None, None, budget, bound=bound,
                        optimal_for=cls, info=info,
                        message=f"time limit reached: not proven optimal; lower bound {bound}")
    mfb = min_feasible_budget(chain, allow_drop, max_stages)
    return Solution("exhaustive", INFEASIBLE, None, None, None, budget, optimal_for=cls,
                    min_budget=mfb, info=info,
                    message=f"no schedule fits in {budget}; the smallest feasible budget is {mfb}")
