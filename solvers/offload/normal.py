"""A normal form of two-stream schedules, and the length bound it gives (proofs/offload.md,
O.20-O.21): what lets ``ilp-offload`` with ``proven=True`` certify chains whose copies are cheap.

A compute op *touches* a value v (``x_i``, ``i >= 1``, or ``t_i``) when it reads v on the
device (the referee's :func:`~remat_theory.model.offload.reads`) or when it is the ``Fall_i``
whose unsaved output is v (``Fall_i`` adds a plain ``x_{i+1}`` unless one is held: either
way it decides v).  A schedule is in **normal form** when

* (P) every ``Pre v`` is followed by a compute op that touches v before the next transfer
  of v, before a compute op frees v, and before the end (no prefetch goes unused);
* (Q) no ``Pre v`` is issued while v's device copy is leaving (an ``Off v`` and the next
  ``Pre v`` have a compute op between them).

O.20 (:func:`normalize`): removing the ops that break (P) or (Q), one pair at a time, never
raises a step's peak nor delays an op; so from every valid schedule a normal-form one with
no more ops, no larger peak and no larger makespan is reached, and the optimum over
normal-form schedules of at most N ops is the optimum over all schedules of at most N ops.

O.21 (:func:`normal_length_bound`): between two consecutive compute ops touching,
making or freeing v, a normal-form schedule moves v at most once, or twice (``Off``,
``Pre``) when the second op touches v; so its transfers number at most the sum over its
compute ops of :func:`op_weight` (the values an op leaves on the device that it made or
read, plus the values it touches).  With each backward once, each stage's ``Fall`` at least
once and the other forwards paid for by the makespan (a knapsack on their times), that
bounds the length of every normal-form schedule of makespan at most V.
"""
from __future__ import annotations

import bisect
import functools
import heapq
import itertools
import math
import time

from remat_theory.model.chain import Chain
from remat_theory.model.offload import OffloadState, reads, step
from remat_theory.model.schedule import B, FALL, FCK, FN, LOSS, OFF, PRE, Op, Schedule

#: Relative slack on a makespan before counting ops in it (the referee adds in floats).
FLOAT_SLACK = 1e-9


def _vid(chain: Chain, target: str, i: int) -> int:
    return i if target == "x" else chain.length + 1 + i


def touched(chain: Chain, dev, op: Op) -> set:
    """The value ids (``x_i``: i, ``t_i``: L+1+i) a valid compute op touches from the
    device state ``dev`` (module docstring); x_0 is left out (it never moves)."""
    out = {v for v in reads(chain, dev, op) if v != 0}
    if op.kind == FALL and not chain.output_saved[op.index]:
        out.add(op.index + 1)
    return out


def _on_device(chain: Chain, st: OffloadState, v: int) -> bool:
    L = chain.length
    if v <= L:
        return bool(st.dev.plain >> v & 1)
    return bool(st.dev.tapes >> (v - L - 1) & 1)


def _pending(chain: Chain, st: OffloadState, v: int) -> bool:
    L = chain.length
    if v <= L:
        return bool(st.pend_plain >> v & 1)
    return bool(st.pend_tapes >> (v - L - 1) & 1)


def violations(chain: Chain, schedule) -> list:
    """The breaks of the normal form in a valid schedule, in the order they are found:
    ``("P", k, q)`` the prefetch at index k goes unused (``q``: the index of the next
    transfer of its value, else None: it is freed untouched or the schedule ends);
    ``("Q", k, q)`` the offload at index k is undone by the prefetch at index q with no
    compute op between.  Raises ValueError on an invalid schedule."""
    ops = list(Schedule.parse(schedule) if isinstance(schedule, str) else schedule)
    st = OffloadState.initial(chain)
    unused: dict = {}  # value id -> index of its prefetch not yet followed by a touch
    last_off: dict = {}  # value id -> index of its offload while its copy is leaving
    out = []
    for k, op in enumerate(ops):
        if op.kind in (OFF, PRE):
            v = _vid(chain, op.target, op.index)
            if op.kind == OFF and v in unused:
                out.append(("P", unused.pop(v), k))
            if op.kind == PRE and _pending(chain, st, v):
                out.append(("Q", last_off[v], k))
            r = step(chain, st, op)
            if isinstance(r, str):
                raise ValueError(f"step {k} ({op.token}): {r}")
            st = r[0]
            if op.kind == PRE:
                unused[v] = k
            else:
                last_off[v] = k
            continue
        t = touched(chain, st.dev, op)
        r = step(chain, st, op)
        if isinstance(r, str):
            raise ValueError(f"step {k} ({op.token}): {r}")
        st = r[0]
        last_off.clear()
        for v in list(unused):
            if v in t:
                del unused[v]
            elif not _on_device(chain, st, v):  # freed without being touched
                out.append(("P", unused.pop(v), None))
    out += [("P", k, None) for k in unused.values()]
    return out


def is_normal_form(chain: Chain, schedule) -> bool:
    return not violations(chain, schedule)


def normalize(chain: Chain, schedule) -> Schedule:
    """O.20's exchange, applied until none is left: an unused prefetch is removed, with the
    offload of its value that ends its stay (P); an offload and the prefetch that undoes it
    before any compute op are removed (Q).  Each step removes one or two ops, so this
    ends; the result is in normal form, with no larger peak nor makespan (O.20)."""
    ops = list(Schedule.parse(schedule) if isinstance(schedule, str) else schedule)
    while True:
        found = violations(chain, ops)
        if not found:
            return Schedule(ops)
        _, k, q = found[0]
        drop = {k} if q is None else {k, q}
        ops = [op for j, op in enumerate(ops) if j not in drop]


# ---------------------------------------------------------------- the length bound (O.21)

def op_weight(chain: Chain, kind: str, i: int | None = None) -> int:
    """The most transfers a normal-form schedule charges to one compute op (O.21): the
    values it leaves on the device that it made or read (each starts a stay with at most
    one ``Off``), plus the values it touches (each can end a stay with an ``Off Pre``),
    over every source it may read its input from."""
    L = chain.length
    if kind == LOSS:
        return int(chain.saved(L)) + 1
    kept = int(i >= 1 and chain.saved(i))  # an input read and kept (plain or in its tape)
    reads_in = int(i >= 1)  # reads an input that can move
    if kind == B:
        return kept + 1 + kept  # keeps t_i when it reads x_i in it; touches t_{i+1}, x_i
    if kind == FN:
        return 1 + reads_in  # makes x_{i+1}; frees what it read
    if kind == FCK:
        return 1 + reads_in + reads_in
    if kind == FALL:
        unsaved_out = int(not chain.output_saved[i])
        return (1 + unsaved_out + kept) + (reads_in + unsaved_out)
    raise ValueError(f"not a compute op kind: {kind}")


def _extra_forward_items(chain: Chain) -> list:
    """(time, ops + transfers charged) of every forward beyond each stage's first Fall,
    the largest charge per time (the others are dominated)."""
    best: dict = {}
    for i in range(chain.length):
        for kind, t in ((FN, chain.fwd_time[i]), (FCK, chain.fwd_time[i]),
                        (FALL, chain.fall_time[i])):
            best[t] = max(best.get(t, 0), 1 + op_weight(chain, kind, i))
    return sorted(best.items())


class _Knapsack:
    """The most charge of extra forwards (repetition allowed) whose times add up to at most
    a spare time: ``cost[v]``, the least time reaching a charge >= v, is non-decreasing in
    v, so the answer is the largest v with ``cost[v] <= spare`` (``cost`` grown on demand
    and kept per chain)."""

    def __init__(self, items: list):
        self.items, self.cost = items, [0.0]

    #: The longest table kept; beyond it, :meth:`most` gives the bound of the best charge
    #: per second instead (an upper bound on the knapsack, so still a length bound: a
    #: makespan of 1e171 seconds once grew the table without end).
    MAX_TABLE = 100_000

    def most(self, spare: float) -> int:
        if spare < 0:
            return 0
        cost, items = self.cost, self.items
        t_min = min(t for t, _ in items)
        if t_min > 0 and spare / t_min > self.MAX_TABLE:
            # every item takes at least t_min and charges at most w_max
            return math.floor(spare / t_min) * max(w for _, w in items)
        while cost[-1] <= spare:
            v = len(cost)
            cost.append(min(t + cost[max(0, v - w)] for t, w in items))
        return bisect.bisect_right(cost, spare) - 1


@functools.lru_cache(maxsize=256)
def _tables(chain: Chain):
    """(charge of the compulsory ops, the knapsack of the extra forwards) of ``chain``."""
    L = chain.length
    if chain.bandwidth is None:  # nothing moves: every op is charged 1
        items = [(min(a, b), 1) for a, b in zip(chain.fwd_time, chain.fall_time)]
        return 3 * L + 1, _Knapsack(items)
    fixed = (1 + op_weight(chain, LOSS)) + sum(1 + op_weight(chain, B, i) for i in range(L)) \
        + sum(1 + op_weight(chain, FALL, i) for i in range(L))
    return fixed, _Knapsack(_extra_forward_items(chain))


def normal_length_bound(chain: Chain, makespan: float) -> int | None:
    """O.21: the most ops of a normal-form schedule of makespan at most ``makespan``
    (compute ops plus transfers by :func:`op_weight`); None with a zero-time forward or an
    infinite makespan; 0 below the ideal makespan (no valid schedule ends that early)."""
    if not math.isfinite(makespan):
        return None
    if min(min(a, b) for a, b in zip(chain.fwd_time, chain.fall_time)) <= 0:
        return None
    v = makespan * (1 + FLOAT_SLACK)
    spare = v - sum(chain.bwd_time) - sum(chain.fall_time)
    if spare < 0:
        return 0
    fixed, knap = _tables(chain)
    return fixed + knap.most(spare)


# ---------------------------------------------------------------- the restricted search

def search_normal_form(chain: Chain, budget: int, *, max_states: int = 1_000_000,
                       time_limit: float | None = None):
    """The least makespan over the normal-form schedules within ``budget`` (best-first over
    the referee's states, as ``exhaustive-offload``, with the prefetches not yet touched
    in the state): ``(schedule, makespan)``, or ``(None, None)`` when none fits; raises
    RuntimeError past ``max_states`` or ``time_limit``.  The check of O.20: its optimum is
    ``exhaustive-offload``'s."""
    from solvers.offload.exhaustive import dominates, lower_bound, moves

    t0 = time.perf_counter()
    st0 = OffloadState.initial(chain)
    if st0.memory > budget:
        return None, None
    counter = itertools.count()
    nodes = [(None, None)]
    heap = [(lower_bound(chain, st0), 0.0, next(counter), 0, st0, 0)]
    front: dict = {(st0.logical(), 0): [st0.times()]}
    while heap:
        f, _, _, idx, st, unused = heapq.heappop(heap)
        times = st.times()
        if any(t != times and dominates(t, times) for t in front[(st.logical(), unused)]):
            continue
        if st.is_final() and not unused:
            ops, k = [], idx
            while nodes[k][0] is not None:
                ops.append(nodes[k][1])
                k = nodes[k][0]
            return Schedule(reversed(ops)), st.makespan
        if len(nodes) > max_states or (time_limit is not None
                                       and time.perf_counter() - t0 > time_limit):
            raise RuntimeError("search_normal_form: limit reached")
        for op in moves(chain, st, True, 0):
            nu = unused
            if op.kind in (OFF, PRE):
                v = _vid(chain, op.target, op.index)
                if op.kind == OFF and unused >> v & 1:
                    continue  # (P): the prefetch of v would go unused
                if op.kind == PRE and _pending(chain, st, v):
                    continue  # (Q)
            else:
                t = touched(chain, st.dev, op)
            r = step(chain, st, op)
            if isinstance(r, str) or r[1].peak > budget:
                continue
            new = r[0]
            if op.kind == PRE:
                nu = unused | 1 << v
            elif op.kind != OFF:
                for v in t:
                    nu &= ~(1 << v)
                if any(nu >> v & 1 and not _on_device(chain, new, v)
                       for v in range(2 * chain.length + 2)):
                    continue  # (P): freed untouched
            g = max(f, lower_bound(chain, new))
            key = (new.logical(), nu)
            tm = new.times()
            known = front.setdefault(key, [])
            if any(dominates(o, tm) for o in known):
                continue
            known[:] = [o for o in known if not dominates(tm, o)]
            known.append(tm)
            nodes.append((idx, op))
            heapq.heappush(heap, (g, -new.C, next(counter), len(nodes) - 1, new, nu))
    return None, None
