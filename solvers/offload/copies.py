"""Copies over the device-host channel: what moves, its size and its time (the referee's
rules, docs/model.md "Offloading"), shared by the offload solvers."""
from __future__ import annotations

import math

from remat_theory.model.chain import Chain

INF = math.inf


def copy_time(chain: Chain, size: int) -> float:
    """Seconds to copy ``size`` bytes one way (the referee's rule: 0 for 0 bytes; never
    without a channel or at bandwidth 0)."""
    if size == 0 and chain.bandwidth is not None:
        return 0.0
    if not chain.bandwidth:
        return INF
    return size / chain.bandwidth


def values(chain: Chain) -> list:
    """The values that can move: ``("x", i)`` for x_1..x_L, ``("t", i)`` for t_1..t_L."""
    L = chain.length
    return [("x", i) for i in range(1, L + 1)] + [("t", i) for i in range(1, L + 1)]


def size(chain: Chain, v) -> int:
    """Bytes of value ``v`` on the device (a tape: the bytes it holds)."""
    return chain.x_size[v[1]] if v[0] == "x" else chain.tape_held[v[1] - 1]

