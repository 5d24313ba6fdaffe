"""Recompute-all: keep only the input x_0 and recompute everything else on demand.

The memory-lean extreme of checkpointing, the first strategy of Griewank and Walther's
analysis ("Algorithm 799: revolve", ACM TOMS 26(1), 2000: with a single checkpoint,
reversing l steps costs t(l, 1) = l(l-1)/2 advances).  For each backward B_i,
i = L-1 .. 0, it runs the chain again from x_0 up to x_i without keeping anything
(``Fck_0 Fn_1 .. Fn_{i-1}``), then ``Fall_i`` (and the loss for i = L-1) and ``B_i``:
L(L+1)/2 forward operations in all, and at most x_0, x_i, t_{i+1} and two gradients held.

Assumes nothing about the chain.  Its schedule does not depend on the budget, so it is
feasible exactly when its simulated peak fits (``min_budget`` is that peak).
"""
from __future__ import annotations

import math

from remat_theory.model.chain import Chain
from remat_theory.model.errors import AT_LEAST, Remedy, SolverLimitError
from remat_theory.model.schedule import LOSS_OP, Bwd, Fall, Schedule
from remat_theory.model.solution import Solution

from solvers._schedules import advance, fixed_schedule_solution
from solvers.registry import Option, register


def recompute_all_schedule(chain: Chain) -> Schedule:
    """For i = L-1 .. 0: advance x_0 -> x_i, Fall_i, (Loss,) B_i."""
    L = chain.length
    ops = []
    for i in range(L - 1, -1, -1):
        if i > 0:
            ops.extend(advance(0, i))
        ops.append(Fall(i))
        if i == L - 1:
            ops.append(LOSS_OP)
        ops.append(Bwd(i))
    return Schedule(ops)


#: Its schedule has L(L+1)/2 + 2L operations: past this many (about 6,300 stages) it is
#: refused up front (its list alone takes hundreds of MB, its replay hours).
MAX_OPS = 20_000_000
#: Seconds per operation of building and replaying a schedule (3e-5 to 1e-4 measured on a
#: 2-core machine): under a time limit a schedule estimated past it is refused up front.
SECONDS_PER_OP = 3e-5


@register("recompute-all", optimal_for="none", supports=("fall_time", "fall_overhead", "output_saved"),
          options={"time_limit": Option("seconds", "refuses up front a schedule whose build "
                                        "and replay are estimated past it", none=True)},
          description="Keep only x_0; recompute from it before every backward (L(L+1)/2 forwards).")
def solve_recompute_all(chain: Chain, budget: int, *, time_limit: float | None = None) -> Solution:
    """Its one schedule (module docstring); refused up front when it has more than
    :data:`MAX_OPS` operations or, under ``time_limit`` (seconds), when building and
    replaying it is estimated past the limit."""
    L = chain.length
    ops = L * (L + 1) // 2 + 2 * L
    seconds = ops * SECONDS_PER_OP
    if ops > MAX_OPS or (time_limit is not None and seconds > time_limit):
        raise SolverLimitError(
            f"solver 'recompute-all': {L:,} stages make a schedule of {ops:,} operations "
            f"(quadratic), about {seconds:,.0f} s to build and replay"
            + (f", past the time limit of {time_limit:g} s" if ops <= MAX_OPS else
               f", above {MAX_OPS:,}"),
            solver="recompute-all", estimate_s=seconds, remedies=(
                Remedy(solver="chen-sqrt", note="about sqrt(L) segments, any length"),
                Remedy(solver="periodic"))
            + ((Remedy(options=(("time_limit", AT_LEAST, math.ceil(seconds)),)),)
               if ops <= MAX_OPS else ()))
    return fixed_schedule_solution(
        "recompute-all", chain, budget, recompute_all_schedule(chain),
        message=f"{L * (L + 1) // 2} forward operations (store-all: {L})",
        info={"forward_ops": L * (L + 1) // 2})
