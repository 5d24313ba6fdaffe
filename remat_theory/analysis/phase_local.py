"""One phase on its own: which outcomes can a phase reach from a given start, and at what cost?

A schedule is a sequence of *phases* (proofs/ilp.md section 1): forward operations, then
the backward operation that closes the phase (the loss, or B_p).  This module answers, for
one phase started in a given simulator state (``start.bwd_next`` says which phase), what
the phase can leave behind: for every state reachable *after* its closing backward
operation, the Pareto set of (memory held, time spent), optionally restricted to a class of
:mod:`remat_theory.model.persistence` (e.g. ``"weak-runs<=2"``).  Dijkstra over the simulator's own
states and transition function, budget checked at every operation, the closing one included.

Two outcomes are compared on what later phases can see: the values still *live* after the
closing operation (plain x_j and tapes t_j with j <= the next backward's stage + 1; a plain
x_j above that is dead and only its bytes matter) and the memory held.  Live values and memory are all
that later phases depend on (a dead x_j can never be read or made again), so chaining the
outcomes phase by phase from the initial state gives the optimum of the whole chain, which
the tests compare with exhaustive search.  An outcome of the unrestricted phase is *missed* by a class when no outcome of the class has the same live
values with no more memory and no more time (:func:`missed_outcome`).

Used by proofs/ilp.md section 5: a single phase can need three weakly increasing runs, so
a proof that two suffice for whole schedules has to move operations between phases.
"""
from __future__ import annotations

import heapq
import itertools
from typing import NamedTuple

from remat_theory.model import persistence
from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError
from remat_theory.model.schedule import FALL, FCK, FN, LOSS_OP, Bwd, Op, Schedule
from remat_theory.model.simulator import State, state_memory, transition


class Outcome(NamedTuple):
    live: tuple  # (plain mask, tape mask, next backward stage) of the live values after the phase
    memory: int  # bytes held after the closing backward operation (dead bytes included)
    time: float  # time of the phase, its closing operation included
    ops: Schedule  # the phase: forward operations, then the closing backward operation
    state: State  # the simulator state after it (dead values included)


def _live(state: State) -> tuple:
    u = state.bwd_next  # the next backward is B_u: values of stage <= u + 1 can be read
    mask = (1 << (u + 2)) - 1 if u >= 0 else 1
    return (state.plain & mask, state.tapes & mask & ~1, u)


def phase_outcomes(chain: Chain, start: State, budget: int,
                   schedule_class: str = persistence.ALL) -> dict:
    """Every outcome of the phase that ``start`` opens, under ``budget``.

    Returns ``{live: [Outcome, ...]}``, each list the Pareto set (memory, time) of the
    outcomes with those live values, with one witness phase each.  ``schedule_class``
    restricts the forward operations as :func:`persistence.violation` does (the runs classes
    count runs inside this phase only).
    """
    if not persistence.is_class(schedule_class):
        raise RematError(f"schedule_class = {schedule_class!r} is unknown")
    if start.bwd_next < 0:
        raise RematError("start: the schedule is already complete (d_0 exists)")
    L = chain.length
    p = start.bwd_next
    forwards = [Op(kind, i) for i in range(min(p, L - 1) + 1) for kind in (FN, FCK, FALL)]
    closing = LOSS_OP if p == L else Bwd(p)
    mark0 = persistence.NO_FRESH
    node0 = (start, mark0)
    dist = {node0: 0.0}
    parent = {node0: None}
    tie = itertools.count()
    heap = [(0.0, next(tie), node0)]
    found: dict = {}
    while heap:
        d, _, node = heapq.heappop(heap)
        if d > dist[node]:
            continue
        state, mark = node
        mem = state_memory(chain, state)
        r = transition(chain, state, mem, closing)
        if not isinstance(r, str) and r.peak <= budget:
            ops = []
            n = node
            while parent[n] is not None:
                n, op = parent[n]
                ops.append(op)
            ops.reverse()
            ops.append(closing)
            _add(found, Outcome(_live(r.state), r.memory_after, d + r.time, Schedule(ops),
                                r.state))
        for op in forwards:
            if persistence.violation(chain, state, mark, op, schedule_class) is not None:
                continue
            t = transition(chain, state, mem, op)
            if isinstance(t, str) or t.peak > budget:
                continue
            nxt = (t.state, persistence.next_mark(op, schedule_class, mark)
                   if schedule_class != persistence.ALL else mark0)
            nd = d + t.time
            if nd < dist.get(nxt, float("inf")):
                dist[nxt] = nd
                parent[nxt] = (node, op)
                heapq.heappush(heap, (nd, next(tie), nxt))
    return found


def _add(found: dict, o: Outcome) -> None:
    front = found.setdefault(o.live, [])
    if any(q.memory <= o.memory and q.time <= o.time for q in front):
        return
    front[:] = [q for q in front if not (o.memory <= q.memory and o.time <= q.time)]
    front.append(o)


def missed_outcome(chain: Chain, start: State, budget: int,
                   schedule_class: str, tol: float = 1e-9) -> Outcome | None:
    """An outcome of the unrestricted phase that ``schedule_class`` cannot match (same live
    values, no more memory, no more time), or None when the class matches them all."""
    full = phase_outcomes(chain, start, budget)
    restricted = phase_outcomes(chain, start, budget, schedule_class)
    for live, front in sorted(full.items()):
        mine = restricted.get(live, [])
        for o in sorted(front, key=lambda q: (q.memory, q.time)):
            if not any(q.memory <= o.memory and q.time <= o.time + tol for q in mine):
                return o
    return None
