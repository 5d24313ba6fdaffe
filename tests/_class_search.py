"""A plain Dijkstra search over the simulator's own transitions, restricted to a class of
schedules by the rules of :mod:`remat_theory.model.persistence`: no heuristic, no pruning,
no code shared with the solvers or with ``solvers/exhaustive.py``.  The oracle of
exhaustive search's class restriction (tests/test_exhaustive.py) and of the DPs on the
regression chains (tests/test_dp.py).  Not part of the package."""
from __future__ import annotations

import heapq
import itertools
import math

from remat_theory.model import persistence
from remat_theory.model.chain import Chain
from remat_theory.model.schedule import LOSS_OP, Bwd, Fall, Fck, Fn
from remat_theory.model.simulator import State, transition


def _moves(chain: Chain, node, memory: int, cls: str, forbid=frozenset()):
    """Every op the class allows in ``node`` = (state, class mark), with its transition
    (never an op of ``forbid``)."""
    state, mark = node
    L = chain.length
    for op in [k(i) for i in range(L) for k in (Fn, Fck, Fall, Bwd)] + [LOSS_OP]:
        if op in forbid:
            continue
        if persistence.violation(chain, state, mark, op, cls) is not None:
            continue
        r = transition(chain, state, memory, op)
        if not isinstance(r, str):
            yield op, r, (r.state, persistence.next_mark(op, cls, mark))


def class_search(chain: Chain, cls: str, budget: int | None, forbid=()):
    """With a budget, ``(least makespan, schedule text)`` of the class under it
    (``(inf, None)`` when none fits); with ``budget=None``, the least peak over the class
    (its smallest feasible budget, a bottleneck search) as ``(peak, schedule text)``.
    ``forbid``: operations no schedule may run (e.g. ``Fn(j + 1)``: a barrier after j)."""
    forbid = frozenset(forbid)
    start = (State.initial(chain), persistence.NO_FRESH)
    x0 = chain.x_size[0]
    if budget is not None and x0 > budget:
        return math.inf, None
    tie = itertools.count()
    heap = [((0.0 if budget is not None else x0), next(tie), start, x0, ())]
    done = set()
    while heap:
        key, _, node, memory, path = heapq.heappop(heap)
        if node in done:
            continue
        done.add(node)
        if node[0].is_final():
            return key, " ".join(op.token for op in path)
        for op, r, nxt in _moves(chain, node, memory, cls, forbid):
            if nxt in done or (budget is not None and r.peak > budget):
                continue
            k = key + r.time if budget is not None else max(key, r.peak)
            heapq.heappush(heap, (k, next(tie), nxt, r.memory_after, path + (op,)))
    return math.inf, None
