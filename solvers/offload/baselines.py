"""Offload everything: the baselines of ``torch.autograd.graph.save_on_cpu``, in the
two-stream model (docs/model.md, "Offloading").

Both are store-all (each stage's recording forward once, no recomputation) with tapes sent
to the host as soon as the next forward has read ``x_i`` in ``t_i``:

- ``save-on-cpu``: every tape ``t_1..t_{L-1}`` is offloaded, and prefetched just before the
  backward that first needs it (``Pret_i`` issued right before ``B_i``, which reads ``x_i``
  in it): the least device memory without recomputation (proofs/offload.md, O.6), and the
  compute stream waits for every prefetch, as ``save_on_cpu`` does;
- ``offload-all``: the overlapped version: ``t_1..t_{L-2}`` are offloaded and prefetched one
  backward ahead (issued before ``B_{i+1}``, the copy of ``t_i`` runs while ``B_{i+1}``
  does); ``t_{L-1}`` and ``t_L`` stay, as the loss and ``B_{L-1}`` need them right after
  the forward.

In both, a forward waits for the copy issued before it (the copy of ``t_i`` runs beside
``Fall_i``), so a slow channel shows in the makespan.  Heuristics (no optimality claim): the
exact solvers of the model are ``exhaustive-offload`` and, without recomputation,
``exhaustive-offload-only``.  On a chain without ``bandwidth`` both are store-all.
"""
from __future__ import annotations

import math

from remat_theory.model.chain import Chain
from remat_theory.model.errors import AT_LEAST, Remedy, SolverLimitError
from remat_theory.model.schedule import LOSS_OP, Bwd, Fall, OffT, PreT, Schedule
from remat_theory.model.fast_replay import replay_totals
from remat_theory.model.solution import CLASS_NONE, Solution

from solvers._deadline import check as deadline_check
from solvers._schedules import BUILDING, TIME_LIMIT
from solvers.registry import Option, register  # noqa: F401 - Option: the registrations' type

#: The two-stream replay of the baselines' schedules (remat_theory.model.offload; about 4
#: ops per stage), seconds per op on a chain of L stages: a constant part (the op's Python
#: steps) and a part in L (the state's masks are big integers of L bits, which an op
#: copies).  From what benchmarks/bench_offload_sim.py measured on a loaded 2-core
#: machine: 11-28 us per op at 1,000 and 10,000 stages, 26-41 us at 100,000.  Done
#: once: the registry's replay of the same schedule is remembered.  A time limit that
#: cannot hold the estimate is refused up front; one that can is still checked as the
#: replay goes.
TWO_STREAM_S_PER_OP = 2e-5
TWO_STREAM_S_PER_OP_STAGE = 3e-10
OPS_PER_STAGE = 4


def replay_estimate(chain: Chain) -> float:
    """Seconds the two-stream replay of a baseline's schedule is expected to take."""
    L = chain.length
    return OPS_PER_STAGE * L * (TWO_STREAM_S_PER_OP + TWO_STREAM_S_PER_OP_STAGE * L)


def refuse_if_slow(name: str, chain: Chain, time_limit: float | None) -> None:
    """:class:`SolverLimitError` before any work when a chain with a copy channel is too
    long for the two-stream replay to finish within ``time_limit``."""
    if time_limit is None or chain.bandwidth is None:
        return
    est = replay_estimate(chain)
    if est <= time_limit:
        return
    raise SolverLimitError(
        f"solver {name!r}: replaying its schedule with transfers on {chain.length} stages takes "
        f"about {est:.3g} s (the two-stream simulator, {OPS_PER_STAGE} operations per stage), "
        f"beyond the time limit of {time_limit:g} s", solver=name, estimate_s=est,
        remedies=(Remedy(options=(("time_limit", AT_LEAST, math.ceil(est)),)),
                  Remedy(solver="store-all", note="on the chain without bandwidth: no "
                                                   "transfers, any length")))


def offload_all_schedule(chain: Chain, lookahead: int = 1) -> Schedule:
    """Store-all with tapes offloaded after use and prefetched ``lookahead`` backwards
    ahead (0: ``save-on-cpu``, every tape but t_L; 1: ``offload-all``, every tape but the
    last two); store-all on a chain without bandwidth or at bandwidth 0."""
    L = chain.length
    last = L - 1 if lookahead == 0 else L - 2
    moved = set(range(1, last + 1)) if chain.bandwidth else set()  # 0: no copy ever ends
    ops = [Fall(0)]
    for i in range(1, L):
        if not i & 0x3FFF:
            deadline_check(BUILDING)
        ops.append(Fall(i))
        if i in moved:
            ops.append(OffT(i))
    ops.append(LOSS_OP)
    for i in range(L - 1, -1, -1):
        if not i & 0x3FFF:
            deadline_check(BUILDING)
        if lookahead == 0 and i in moved:
            ops.append(PreT(i))
        elif lookahead == 1 and i - 1 in moved:
            ops.append(PreT(i - 1))
        ops.append(Bwd(i))
    return Schedule(ops)


def _solve(name: str, chain: Chain, budget: int, lookahead: int) -> Solution:
    schedule = offload_all_schedule(chain, lookahead)
    # the simulator's answer (store-all: the vectorised replay; with transfers, the
    # two-stream replay), checking the deadline as it goes; the registry's replay of the
    # same schedule is then remembered, not done again
    sim = replay_totals(chain, schedule, check=deadline_check)
    if sim.peak_memory > budget:
        return Solution.infeasible(name, budget, min_budget=sim.peak_memory,
                                   message=f"{name} needs a budget of at least "
                                           f"{sim.peak_memory}; got {budget}")
    return Solution.feasible(name, budget, schedule, sim.makespan, sim.peak_memory,
                             min_budget=sim.peak_memory,
                             info={"offloaded": sum(op.is_transfer for op in schedule) // 2})


_SUPPORTS = ("fall_time", "fall_overhead", "output_saved", "bandwidth")


@register("save-on-cpu", optimal_for=CLASS_NONE, supports=_SUPPORTS,
          options={"time_limit": TIME_LIMIT},
          description="Store-all with every tape but the last offloaded after use and "
                      "prefetched just before its backward (torch's save_on_cpu).")
def solve_save_on_cpu(chain: Chain, budget: int, *, time_limit: float | None = None) -> Solution:
    refuse_if_slow("save-on-cpu", chain, time_limit)
    return _solve("save-on-cpu", chain, budget, 0)


@register("offload-all", optimal_for=CLASS_NONE, supports=_SUPPORTS,
          options={"time_limit": TIME_LIMIT},
          description="Store-all with every tape but the last two offloaded after use and "
                      "prefetched one backward ahead (save_on_cpu, overlapped).")
def solve_offload_all(chain: Chain, budget: int, *, time_limit: float | None = None) -> Solution:
    refuse_if_slow("offload-all", chain, time_limit)
    return _solve("offload-all", chain, budget, 1)
