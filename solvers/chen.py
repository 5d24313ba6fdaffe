"""Chen, Xu, Zhang, Guestrin 2016, "Training deep nets with sublinear memory cost"
(arXiv:1604.06174): the sqrt(n) segment plan and the budgeted greedy memory planner.

Both produce a segment-checkpoint schedule (:func:`solvers._schedules.segments_schedule`):
the activations at the chosen checkpoints are kept during the forward sweep, and each
segment between two checkpoints is run again, keeping its tapes, just before its backward
(the paper's "mirror" of the dropped nodes); the last segment is kept from the
first forward, as their executor does.

``chen-sqrt`` (section 4, the O(sqrt(n)) memory algorithm with one extra forward pass): about
sqrt(L) segments of balanced length (``round(sqrt(L))`` segments, boundaries
``floor(j L / k)``).  On a homogeneous chain this holds about 2 sqrt(L) activations
(sqrt(L) checkpoints plus the tapes of one segment) and runs every stage but those of the
last segment twice: one extra forward pass.  Its schedule does not depend on the budget
(infeasible exactly when its peak does not fit; ``min_budget`` is that peak).

``chen-greedy`` (section 4, Algorithm 3 "memory planning with budget"): walk the chain
accumulating the memory of the stored outputs; when the running sum exceeds the
parameter b, make the current stage's output a checkpoint and start a new segment.  In this
model the memory a stage adds to its segment's recomputation is its tape ``tape_size[i]``
and the checkpoint it creates is ``x_{i+1}``.  The paper notes that b trades the
checkpoints' total size x against the largest segment y and searches over b; here b runs
over 0 and a geometric grid of ``grid`` values (default 128) up to the total tape size, each
plan is judged by its exact peak and makespan (as a user measuring each plan would), and
the fastest plan that fits the budget is returned.  Option ``b`` fixes the threshold.
Assumes only that every stage boundary is a candidate checkpoint (true on a chain).
"""
from __future__ import annotations

import math

import numpy as np

from remat_theory.model.chain import Chain
from remat_theory.model.solution import Solution

from solvers._deadline import Deadline
from solvers._deadline import check as deadline_check
from solvers._schedules import (TIME_LIMIT, chain_arrays, fixed_schedule_solution,
                                segments_cost, segments_schedule)
from solvers.registry import Option, register


def sqrt_checkpoints(length: int) -> list[int]:
    """Boundaries of round(sqrt(L)) balanced segments (checkpoints in 1..L-1)."""
    k = max(1, round(math.sqrt(length)))
    return [(j * length) // k for j in range(1, k)]


@register("chen-sqrt", optimal_for="none", supports=("fall_time", "fall_overhead", "output_saved"),
          options={"time_limit": TIME_LIMIT},
          description="Chen et al. 2016: about sqrt(L) equal segments, one extra forward pass.")
def solve_chen_sqrt(chain: Chain, budget: int, *, time_limit: float | None = None) -> Solution:
    cps = sqrt_checkpoints(chain.length)
    return fixed_schedule_solution(
        "chen-sqrt", chain, budget, segments_schedule(chain, cps),
        message=f"{len(cps) + 1} segments", info={"checkpoints": cps})


def greedy_plan(chain: Chain, b: float) -> tuple[list[int], int, int]:
    """Chen et al. Algorithm 3 with threshold ``b`` (bytes).

    Returns the checkpoints, x (total size of the checkpoints) and y (largest running
    segment size), the two quantities the paper's search over b balances.
    """
    temp = x = y = 0
    cps = []
    tape, xs = chain.tape_size, chain.x_size
    for i in range(chain.length - 1):  # a checkpoint after stage i keeps x_{i+1}
        if not i & 0xFFFF:
            deadline_check("planning segments (Chen et al.'s greedy walk)")
        temp += tape[i]
        if temp > b:
            cps.append(i + 1)
            x += xs[i + 1]
            y = max(y, temp)
            temp = 0
    y = max(y, temp + tape[-1])
    return cps, x, y


def _grid(chain: Chain, points: int) -> list[float]:
    total = sum(chain.tape_size)
    positive = [t for t in chain.tape_size if t > 0]
    if not positive:
        return [0.0]
    lo, hi = min(positive), max(total, 1)
    if points == 1 or hi <= lo:
        return [0.0, float(hi)]
    return [0.0] + list(np.geomspace(lo, hi, points))


@register("chen-greedy", optimal_for="none",
          supports=("fall_time", "fall_overhead", "output_saved"),
          options={"b": Option("real", "fix the segment threshold (bytes) instead of searching "
                               "over it", minimum=0, none=True),
                   "grid": Option("int", "thresholds tried besides 0 (a geometric grid up to "
                                  "the total tape size)", minimum=1),
                   "time_limit": TIME_LIMIT},
          description="Chen et al. 2016 Algorithm 3: greedy segments by a size threshold b, searched over b.")
def solve_chen_greedy(chain: Chain, budget: int, *, b: float | None = None,
                      grid: int = 128, time_limit: float | None = None) -> Solution:
    if b is not None:
        cps, _, _ = greedy_plan(chain, b)
        return fixed_schedule_solution("chen-greedy", chain, budget, segments_schedule(chain, cps),
                                       message=f"b = {b}: {len(cps) + 1} segments",
                                       info={"b": b, "checkpoints": cps})
    arrays = chain_arrays(chain)
    seen = {}
    # the search over b gets half the limit: building the chosen schedule and its replay
    # need the rest; it stops with the plans judged so far
    search = Deadline(None if time_limit is None else time_limit / 2)
    thresholds = _grid(chain, grid)
    judged = 0
    for bb in thresholds:
        if seen and search.expired():
            break
        judged += 1
        cps, _, _ = greedy_plan(chain, bb)
        key = tuple(cps)
        if key not in seen:
            seen[key] = (bb,) + segments_cost(chain, cps, arrays)
    smallest = min(peak for _, _, peak in seen.values())
    done = judged == len(thresholds)
    fits = [(mk, peak, bb, key) for key, (bb, mk, peak) in seen.items() if peak <= budget]
    if not fits and not done:
        return Solution.time_limit("chen-greedy", budget, message=(
            f"none of the {len(seen)} plans judged before the time limit fits (the search over "
            f"b stopped): no schedule, not proven optimal"))
    if not fits:
        return Solution.infeasible("chen-greedy", budget, min_budget=smallest,
                                   message=f"none of the {len(seen)} plans of the search over b "
                                           f"fits; the smallest peak is {smallest}")
    makespan, peak, bb, key = min(fits)
    cps = list(key)
    return Solution.feasible("chen-greedy", budget, segments_schedule(chain, cps), makespan, peak,
                             min_budget=smallest if done else None,
                    message=f"b = {bb:.6g}: {len(cps) + 1} segments ({len(seen)} distinct plans searched"
                            f"{'' if done else ', the time limit stopped the search over b'})",
                    info={"b": float(bb), "checkpoints": cps, "plans": len(seen)})
