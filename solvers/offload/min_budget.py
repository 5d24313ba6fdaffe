"""The smallest feasible budget with the copy channel (proofs/offload.md O.3, O.23): a
bottleneck (minimax) path over placements, searched over the *eager* schedules only.

An eager schedule issues, before each compute op B, a block of transfers that prefetches
what B reads and is on the host and offloads every other value on the device that can
move (everything but ``x_0`` and the gradient; at bandwidth 0, only empty values).  O.23:
from every valid schedule, the eager schedule with the same compute ops reading the same
sources is valid and no step of it peaks higher.  So the least peak over eager schedules
is the least over all schedules, and an eager schedule is a path of *macro steps* (block
then B) between placements with nothing leaving: far fewer states than the placements of
every interleaving (seconds at 5 stages where the search over every transfer, which
:func:`~solvers.offload.exhaustive.min_feasible_budget` did before, ran for minutes).

Every step of a macro is the referee's own (:func:`remat_theory.model.offload.step`): the
peaks are its peaks, and the search never decides validity itself.
"""
from __future__ import annotations

import heapq
import itertools
import math

from remat_theory.model.chain import Chain
from remat_theory.model.offload import OffloadState, step
from remat_theory.model.schedule import LOSS_OP, Bwd, Fall, Fck, Fn, OffT, OffX, PreT, PreX

_INF = math.inf


def _movable(chain: Chain, target: str, i: int) -> bool:
    """A value whose copy ends: any, on a channel of positive bandwidth; an empty one
    (a copy of 0 bytes takes no time) at bandwidth 0."""
    if chain.bandwidth:
        return True
    size = chain.x_size[i] if target == "x" else chain.tape_held[i - 1]
    return size == 0


def _sources(chain: Chain, j: int) -> tuple:
    """Where an op may read x_j from: nothing to move for x_0; a plain x_j, or the tape
    t_j when x_j is in it (a saved output)."""
    if j == 0:
        return (None,)
    return ("x", "t") if chain.saved(j) else ("x",)


def compute_ops(chain: Chain, bwd_next: int, falls: "int | None" = None):
    """``(op, [values it reads that can move])`` for every compute op the backward order
    allows, one per source of its input (docs/model.md's table).  ``falls`` (the schedules
    without recomputation): the forwards issued so far, each stage's ``Fall`` once in
    order, so the only forward is ``Fall_falls``."""
    L = chain.length
    if bwd_next == L:
        for src in _sources(chain, L):
            yield LOSS_OP, ([] if src is None else [(src, L)])
    elif bwd_next >= 0:
        i = bwd_next
        srcs = _sources(chain, i) if chain.saved(i) else (None,)
        for src in srcs:
            yield Bwd(i), [("t", i + 1)] + ([] if src is None else [(src, i)])
    if falls is not None:
        if falls < L:
            for src in _sources(chain, falls):
                yield Fall(falls), ([] if src is None else [(src, falls)])
        return
    for i in range(min(bwd_next, L - 1) + 1):
        for src in _sources(chain, i):
            need = [] if src is None else [(src, i)]
            for make in (Fn, Fck, Fall):
                yield make(i), need


def macro(chain: Chain, st: OffloadState, op, need: list):
    """The block of transfers before ``op`` in an eager schedule, then ``op``: ``(state,
    peak, ops)``, or None when the referee refuses a step (a value ``op`` reads is
    nowhere, a value it makes is held and cannot move...)."""
    plain, tapes = st.dev.plain, st.dev.tapes
    want = set(need)
    ops = []
    L = chain.length
    for i in range(1, L + 1):
        if plain >> i & 1 and ("x", i) not in want and _movable(chain, "x", i):
            ops.append(OffX(i))
        if tapes >> i & 1 and ("t", i) not in want and _movable(chain, "t", i):
            ops.append(OffT(i))
    for target, i in need:
        on = (plain if target == "x" else tapes) >> i & 1
        if not on:
            ops.append(PreX(i) if target == "x" else PreT(i))
    ops.append(op)
    peak = 0
    for o in ops:
        r = step(chain, st, o)
        if isinstance(r, str):
            return None
        st = r[0]
        peak = max(peak, r[1].peak)
    return st, peak, ops


def _progress(st: OffloadState) -> tuple:
    """Smaller is further along: the backward next, then the tapes that exist."""
    return (st.dev.bwd_next, -bin(st.dev.tapes | st.host_tapes).count("1"))


def _successors(chain: Chain, st: OffloadState, falls: "int | None"):
    """``(state, peak, falls)`` after each macro step from ``st`` the referee accepts."""
    for op, need in compute_ops(chain, st.dev.bwd_next, falls):
        r = macro(chain, st, op, need)
        if r is not None:
            yield r[0], r[1], (None if falls is None else falls + (op.kind == "Fall"))


def fits(chain: Chain, budget: int, recompute: bool = True) -> bool:
    """Whether some schedule of the two-stream model peaks at most ``budget``: a search
    over the eager schedules' placements within it (O.23), the furthest along first (any
    order is exact: every placement reachable within the budget is visited or a final one
    found)."""
    st0 = OffloadState.initial(chain)
    if st0.memory > budget:
        return False
    f0 = None if recompute else 0
    counter = itertools.count()
    heap = [(_progress(st0), next(counter), st0, f0)]
    seen = {(st0.logical(), f0)}
    while heap:
        _, _, st, falls = heapq.heappop(heap)
        for new, peak, nf in _successors(chain, st, falls):
            if peak > budget:
                continue
            if new.is_final():
                return True
            key = (new.logical(), nf)
            if key not in seen:
                seen.add(key)
                heapq.heappush(heap, (_progress(new), next(counter), new, nf))
    return False


def eager_min_budget(chain: Chain, upper: float = _INF, low: int = 0,
                     recompute: bool = True) -> "int | None":
    """The least peak of a valid schedule of the two-stream model (O.23), searched below
    ``upper`` (None when nothing is found below it).  ``low`` is a lower bound (the memory
    lower bound, O.12): a schedule within it is looked for first (:func:`fits`), and the
    search stops at the first final placement reached at or below it."""
    if low < upper and fits(chain, low, recompute):
        return low
    st0 = OffloadState.initial(chain)
    f0 = None if recompute else 0
    counter = itertools.count()
    heap = [(st0.memory, next(counter), st0, f0)]
    best = {(st0.logical(), f0): st0.memory}
    while heap:
        b, _, st, falls = heapq.heappop(heap)
        if best.get((st.logical(), falls), _INF) < b:
            continue
        if st.is_final():
            return b
        for new, peak, nf in _successors(chain, st, falls):
            nb = max(b, peak)
            if nb >= upper:
                continue
            if nb <= low and new.is_final():
                return nb
            key = (new.logical(), nf)
            if nb < best.get(key, _INF):
                best[key] = nb
                heapq.heappush(heap, (nb, next(counter), new, nf))
    return None
