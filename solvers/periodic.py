"""Periodic checkpointing: what ``torch.utils.checkpoint.checkpoint_sequential`` does.

``checkpoint_sequential(functions, segments=k, input)`` (PyTorch, torch/utils/checkpoint.py)
cuts a sequence of L modules into segments of ``L // k`` modules; the first k-1 segments
are run under ``checkpoint`` (forward without keeping anything but the segment's input,
which the checkpoint saves; the segment runs again, keeping everything, during the
backward), and the remaining modules (the last segment, which takes the remainder of the
division) are run normally, their activations stored.  In the operations of this model
that is the segment-checkpoint schedule with checkpoints at ``j * (L // k)``,
j = 1 .. k-1 (see :func:`solvers._schedules.segments_schedule`): every stage before the
last checkpoint runs twice, the others once.

Option ``segments=k`` (1 <= k <= L; torch refuses more segments than modules) fixes k; by
default every k = 1 .. L is evaluated exactly (makespan and peak in closed form, checked
against the simulator by the tests) and the fastest that fits the budget is returned
(ties: the smaller peak).  Assumes nothing about the chain: segments are equal in the
number of stages, not in cost, exactly as torch cuts them.
"""
from __future__ import annotations

from remat_theory.model.chain import Chain
from remat_theory.model.solution import Solution

from solvers._schedules import chain_arrays, segments_cost, segments_schedule
from solvers.registry import Option, register


def periodic_checkpoints(length: int, segments: int) -> list[int]:
    """Checkpoint positions of ``checkpoint_sequential(segments=k)`` on ``length`` stages."""
    size = length // segments
    return [j * size for j in range(1, segments)]


@register("periodic", optimal_for="none", supports=("fall_time", "fall_overhead", "output_saved"),
          options={"segments": Option("int", "use exactly this many segments instead of the "
                                      "best that fits", minimum=1, maximum="L", none=True)},
          description="torch checkpoint_sequential: k-1 equal checkpointed segments, the rest stored; best k that fits.")
def solve_periodic(chain: Chain, budget: int, *, segments: int | None = None) -> Solution:
    L = chain.length
    arrays = chain_arrays(chain)
    if segments is not None:
        ks = [segments]
    else:
        ks = range(1, L + 1)
    best = None  # (makespan, peak, k)
    smallest = None
    for k in ks:
        makespan, peak = segments_cost(chain, periodic_checkpoints(L, k), arrays)
        if smallest is None or peak < smallest:
            smallest = peak
        if peak <= budget and (best is None or (makespan, peak) < best[:2]):
            best = (makespan, peak, k)
    which = f"segments={segments}" if segments is not None else f"every k in 1..{L}"
    if best is None:
        return Solution.infeasible("periodic", budget, min_budget=smallest,
                                   message=f"no periodic schedule ({which}) fits; the smallest "
                                           f"peak is {smallest}")
    makespan, peak, k = best
    cps = periodic_checkpoints(L, k)
    return Solution.feasible("periodic", budget, segments_schedule(chain, cps), makespan, peak,
                             min_budget=smallest,
                    message=f"segments={k} (segment size {L // k}, last segment "
                            f"{L - (k - 1) * (L // k)} stages stored)",
                    info={"segments": k, "checkpoints": cps})
