"""Store-all: no checkpointing at all (plain backpropagation).

Every forward stage runs once as F_all (its tape is kept), then the loss, then every
backward.  The makespan is the ideal one (sum of all forward and backward times) and the
peak is :meth:`Chain.store_all_memory`.  It is the unique schedule with no recomputation
and therefore optimal whenever it fits; below its peak it is infeasible.
"""
from __future__ import annotations

from remat_theory.model.chain import Chain
from remat_theory.model.schedule import B, FALL, LOSS_OP, Schedule
from remat_theory.model.solution import CLASS_ALL, CLASS_NONE, Solution

from solvers._deadline import check as deadline_check
from solvers._schedules import BUILDING, TIME_LIMIT, shared_ops
from solvers.registry import Option, register


def store_all_schedule(chain: Chain) -> Schedule:
    """Fall0 .. Fall{L-1} Loss B{L-1} .. B0 (the current deadline checked as it goes)."""
    L = chain.length
    ops = shared_ops(FALL, L)[:L]
    ops.append(LOSS_OP)
    ops.extend(reversed(shared_ops(B, L)[:L]))
    deadline_check(BUILDING)
    return Schedule(ops)


@register("store-all", optimal_for=CLASS_NONE, classes=(CLASS_ALL,), supports=("fall_time", "fall_overhead", "output_saved"),
          options={"time_limit": TIME_LIMIT},
          description="No checkpointing: keep every tape (plain backpropagation).")
def solve_store_all(chain: Chain, budget: int, *, time_limit: float | None = None) -> Solution:
    peak = chain.store_all_memory()
    if peak > budget:
        return Solution.infeasible("store-all", budget, min_budget=peak,
                                   message=f"store-all needs a budget of at least {peak}; got "
                                           f"{budget}")
    makespan = chain.ideal_makespan()
    # No schedule can be faster than running each op once, so this is optimal in every class
    # whenever it fits; the bound says so.
    return Solution.optimal("store-all", budget, store_all_schedule(chain), makespan, peak,
                            optimal_for=CLASS_ALL, min_budget=peak,
                            message="no recomputation needed")
