"""The length bounds of ``ilp-offload``'s certificate (proofs/offload.md O.14, O.15, O.21):
how many ops a schedule of makespan at most V can have, and the least makespan of every
schedule longer than N ops."""
from __future__ import annotations

import math
import struct

from remat_theory.model.chain import Chain

from solvers.offload.copies import copy_time, size, values
from solvers.offload.normal import FLOAT_SLACK, normal_length_bound

def length_bound(chain: Chain, makespan: float, normal_form: bool = True) -> int | None:
    """An upper bound on the number of ops of the schedules that ``ilp-offload``'s
    certificate must cover at makespan at most ``makespan``: with ``normal_form`` (the
    default) those in the normal form of O.20, at most the smaller of O.14's bound
    (:func:`general_length_bound`, every schedule) and O.21's
    (:func:`~solvers.offload.normal.normal_length_bound`); some optimal schedule is in
    normal form (O.20), which is all the certificate needs.  None with a zero-time
    forward; non-decreasing in ``makespan``."""
    bound = general_length_bound(chain, makespan)
    if normal_form and bound is not None:
        bound = min(bound, normal_length_bound(chain, makespan))
    return bound


def general_length_bound(chain: Chain, makespan: float) -> int | None:
    """O.14: an upper bound on the number of ops of every valid schedule (no Drop) of
    makespan at most ``makespan``; None when some forward takes no time (nothing then
    bounds how often it runs) or the makespan is infinite; 0 below the ideal makespan
    (``sum(bwd) + sum(fall)``, up to the float slack), where no valid schedule ends.

    Compute ops run one after another within the makespan: the L+1 backwards run once
    each; every stage runs ``Fall`` at least once (the first tape ``t_{i+1}`` comes from
    nowhere else), costing ``sum(fall_time)``; every other forward costs at least the
    cheapest forward ``f``: ``n_c <= (L+1) + L + floor((V - sum(bwd) - sum(fall)) / f)``.
    Transfers: nothing can move before the first compute op, and after a compute op and
    before the next one a value moves at most 3 times (Off, Pre alternate, and a second
    Off waits for a compute op: ``Pre Off Pre``), so ``n_t <= 3 m n_c`` with ``m`` the
    values whose copy can end; and the copies of positive time, at least ``c`` each, run
    one after another on the channel: ``n_t <= 3 m_0 n_c + floor(V / c)`` with ``m_0`` the
    values whose copy takes no time."""
    if not math.isfinite(makespan):
        return None
    L = chain.length
    fwd = min(min(a, b) for a, b in zip(chain.fwd_time, chain.fall_time))
    if fwd <= 0:
        return None
    v = makespan * (1 + FLOAT_SLACK)
    spare = v - sum(chain.bwd_time) - sum(chain.fall_time)
    if spare < 0:  # no valid schedule is that short (its compulsory ops alone take
        return 0  # longer): every one of them, none, has at most 0 ops
    n_c = (L + 1) + L + math.floor(spare / fwd)
    copies = []
    if chain.bandwidth is not None:
        copies = [d for d in (copy_time(chain, size(chain, x)) for x in values(chain))
                  if d != math.inf]
    n_t = 3 * len(copies) * n_c
    timed = [d for d in copies if d > 0]
    if timed:  # the copies of no time by the count, the others by the channel's time
        n_t = min(n_t, 3 * (len(copies) - len(timed)) * n_c + math.floor(v / min(timed)))
    return n_c + n_t


def _bits(x: float) -> int:
    """The IEEE-754 bit pattern of a float >= 0: it orders such floats as integers."""
    return struct.unpack("<q", struct.pack("<d", x))[0]


def _from_bits(b: int) -> float:
    return struct.unpack("<d", struct.pack("<q", b))[0]


def longer_schedule_bound(chain: Chain, n: int) -> float | None:
    """O.15: a lower bound on the makespan of every normal-form schedule (O.20; no Drop) of
    MORE than ``n`` ops: the least float ``V >= 0`` with ``length_bound(V) > n`` (0.0 when even the
    shortest makespan allows more than ``n`` ops); None when some forward takes no time
    (no length bound exists, so nothing bounds the longer schedules).

    A schedule of more than ``n`` ops and referee makespan ``m`` has ``length_bound(m) >=``
    its length ``> n`` (O.14), and ``length_bound`` is non-decreasing in the float ``m``
    (each step of it is monotone under rounding), so ``m`` is not below the least float
    where ``length_bound`` exceeds ``n``.  Found exactly: doubling for a float above it,
    then bisection over the bit patterns of the floats between (at most 64 halvings)."""
    if n < 0:
        raise ValueError(f"n = {n}: a number of ops is at least 0")
    first = length_bound(chain, 0.0)
    if first is None:
        return None
    if first > n:
        return 0.0
    hi = max(1.0, chain.ideal_makespan())
    while length_bound(chain, hi) <= n:  # ℓ grows at least like V / f: this ends
        hi *= 2.0
    lo_b, hi_b = _bits(0.0), _bits(hi)  # ℓ(lo) <= n < ℓ(hi)
    while hi_b - lo_b > 1:
        mid = (lo_b + hi_b) // 2
        if length_bound(chain, _from_bits(mid)) <= n:
            lo_b = mid
        else:
            hi_b = mid
    return _from_bits(hi_b)

