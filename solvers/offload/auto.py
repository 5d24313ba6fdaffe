"""``auto`` on a chain with a ``bandwidth`` (the two-stream model; docs/model.md,
"Offloading"): the route, in order, each with what is left of the time limit.

1. ``exhaustive-offload`` on tiny chains (L <= :data:`EXHAUSTIVE_MAX_STAGES`): optimal over
   every schedule of the model (``all+offload``), or a proven infeasible budget with the
   smallest feasible one;
2. (``ilp-offload`` is not tried: where it proves its answer, at 2-3 stages, exact search
   answers first and faster, and its proofs are over schedules of at most N operations);
3. ``dp-offload``: optimal over ``persistent+offload`` in exact memory when its table
   fits the time limit, else with ``slots`` chosen to fit (status ``feasible``);
4. remat alone (``auto`` on the chain without the channel, a schedule of this chain at the
   same time and memory, proofs/offload.md O.1) when time is left: the answer is the
   faster of 3 and 4, whose claims are kept in ``info["proofs"]``; the status is then
   ``feasible`` (neither proves the optimum of the model) unless one of them is proven
   optimal for ``all+offload``.

Never a false "infeasible": the DP's infeasible is about its class only.  It is passed on
as infeasible for every schedule only when the budget is below the chain's memory lower
bound (every op's own needs; valid with offloading, proofs/offload.md O.12) or an exact
solver decided it; otherwise the answer is ``time_limit``, "not decided", with the class's
smallest budget in ``info["class_min_budget"]``.
"""
from __future__ import annotations

from remat_theory.model import classes
from remat_theory.model.chain import Chain
from remat_theory.model.solution import FEASIBLE, INFEASIBLE, OPTIMAL, Solution

from solvers import registry
from solvers._deadline import Deadline

#: Longest chain auto gives to exact search in the two-stream model (seconds up to there).
EXHAUSTIVE_MAX_STAGES = 3
#: Memory units per stage-cube of the DP auto accepts in exact memory, and the slots it
#: uses otherwise (the DP's cost is about (L + 1)^3 / 2 * W row operations).
DP_EXACT_MAX_STEPS = 4e9
DP_ROW_S = 4e-6  # seconds per row operation (numpy call), measured on one core
DP_UNIT_S = 1.5e-9  # seconds per memory unit of a row operation


def dp_offload_seconds(L: int, W: int) -> float:
    """Estimated seconds of ``dp-offload`` on L stages and W memory units."""
    rows = 1.5 * (L + 1) ** 3 + 3 * (L + 1) ** 2
    return rows * (DP_ROW_S + W * DP_UNIT_S)


def _units(chain: Chain) -> int:
    """Memory units of the DP's exact table: store-all's peak in units of the sizes' gcd
    (its tables reach the largest segment's store-all peak, about that)."""
    return chain.store_all_memory() // chain.size_gcd() + 1


def dp_slots(chain: Chain, budget: int, seconds: float) -> int | None:
    """None for exact memory when it fits ``seconds``, else the most slots that do (at
    least 16)."""
    L = chain.length
    if dp_offload_seconds(L, _units(chain)) <= seconds:
        return None
    scale = max(1.0, chain.store_all_memory() / max(1, budget))  # table width per slot
    rows = 1.5 * (L + 1) ** 3 + 3 * (L + 1) ** 2
    per = seconds / rows - DP_ROW_S
    slots = int(per / DP_UNIT_S / scale) if per > 0 else 0
    return max(16, min(slots, 4096))


def plan(chain: Chain, budget: int, time_limit: float) -> list:
    """``(name, options, why)`` in the order tried."""
    L = chain.length
    steps = []
    if L <= EXHAUSTIVE_MAX_STAGES:
        steps.append(("exhaustive-offload", {}, f"{L} stages <= {EXHAUSTIVE_MAX_STAGES}: exact "
                      f"search over every schedule of the two-stream model"))
    slots = dp_slots(chain, budget, time_limit / 3)
    if slots is None:
        steps.append(("dp-offload", {}, "the offload DP's exact table fits the time limit: "
                      "optimal over persistent+offload"))
    else:
        steps.append(("dp-offload", {"slots": slots}, f"the offload DP with memory in {slots} "
                      f"slots (the exact table does not fit the time limit)"))
    return steps


def solve(chain: Chain, budget: int, time_limit: float, run, answer, tried: list,
          proofs: list) -> Solution:
    """auto's answer on a chain with a bandwidth (module docstring).  ``run(chain, budget,
    name, opts, deadline, tried, proofs)`` and ``answer(sol, name, why, tried, time_limit,
    proofs, keep_message=False)`` are auto's own helpers."""
    deadline = Deadline(time_limit)
    found = None  # (solution, name, why) with a schedule
    class_only = None
    for name, opts, why in plan(chain, budget, time_limit):
        if deadline.remaining() <= 0.05 and (found or class_only):
            break
        # the exact solvers get a third of what is left, the DP what is left
        step = deadline if name == "dp-offload" else Deadline(deadline.remaining(0.05) / 3)
        sol = run(chain, budget, name, opts, step, tried, proofs)
        if sol is None:
            continue
        if sol.optimal_for == classes.OFFLOAD_KEY and sol.status in (OPTIMAL, INFEASIBLE):
            return answer(sol, name, why, tried, time_limit, proofs)
        if sol.schedule is not None:
            if found is None or sol.makespan < found[0].makespan:
                found = (sol, name, why)
            if name == "dp-offload":
                break
        elif sol.status == INFEASIBLE:
            class_only = (sol, name, why)
            if name == "dp-offload":
                break
    remat = None
    if deadline.remaining() > 0.5:  # remat alone: valid here at the same time and memory
        remat = run(chain.replace(bandwidth=None), budget, "auto", {}, deadline, tried, proofs)
        if remat is not None and remat.schedule is not None and (
                found is None or remat.makespan < found[0].makespan):
            found = (remat, "auto (remat only)", "remat alone, the chain without its channel "
                     "(a schedule of this chain at the same time and memory, O.1)")
    if found is not None:
        sol, name, why = found
        if sol.status == OPTIMAL and sol.optimal_for == classes.OFFLOAD_KEY:
            return answer(sol, name, why, tried, time_limit, proofs)
        # the faster schedule; what each solver proved stays in info["proofs"]
        keep = sol.optimal_for if name == "dp-offload" else "none"
        sol = sol.replace(status=FEASIBLE if sol.status == OPTIMAL and keep == "none"
                          else sol.status, optimal_for=keep,
                          bound=sol.bound if keep != "none" else None, min_budget=None)
        return answer(sol, name, f"{why}; the faster of the offload DP and remat alone (not "
                      f"proven optimal over all+offload)", tried, time_limit, proofs)
    lb = chain.memory_lower_bound()
    if budget < lb:
        sol = Solution.infeasible("auto", budget, optimal_for=classes.OFFLOAD_KEY,
                                  message=f"no schedule fits in {budget}: every schedule, "
                                          f"offloading or not, needs at least {lb} bytes (an "
                                          f"operation's own needs)")
        return answer(sol, "memory lower bound", "below every operation's own needs", tried,
                      time_limit, proofs, keep_message=True)
    class_min = class_only[0].min_budget if class_only else None
    more = f"; a persistent+offload schedule exists from {class_min}" if class_min else ""
    # what happened, no more: the DP may have found its class empty, or not run at all
    # (refused, out of time), and remat alone may have been refused too
    dp = (f"the offload DP's class has none in {budget}" if class_only else
          "the offload DP gave no answer")
    refusals = [t for t in tried if not t.endswith(tuple(f": {s}" for s in (
        OPTIMAL, FEASIBLE, INFEASIBLE, "time_limit")))]
    why = f" (refused: {'; '.join(refusals)})" if refusals and not class_only else ""
    sol = Solution.time_limit(
        "auto", budget, info={"class_min_budget": class_min},
        message=f"no schedule found, and none proven impossible (not proven optimal): {dp}; "
                f"exact search in the two-stream model (up to {EXHAUSTIVE_MAX_STAGES} stages) "
                f"did not decide it{more}{why}")
    return answer(sol, "auto", "not decided", tried, time_limit, proofs, keep_message=True)
