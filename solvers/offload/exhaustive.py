"""Exhaustive search in the two-stream model: the exact optimum with rematerialization and
offloading (docs/model.md, "Offloading"; proofs/offload.md).

Best-first search over the states of the referee's own engine
(:class:`remat_theory.model.offload.OffloadState`, advanced by
:func:`remat_theory.model.offload.step`): a state is where every value is (device, host,
leaving the device) and the times that decide when later ops run (both streams' free times,
the pending offloads' completions, the values' ready times).  Every op the engine accepts
within the budget is an edge.  Three facts make it exact (proofs/offload.md, O.3-O.5):

- device memory is a function of where the values are, never of the times, so the budget
  prunes edges exactly as in the single-stream search;
- every start time is a maximum of state times plus durations, so of two states with the
  same values in the same places, one whose times are all no later
  (:func:`~remat_theory.model.offload.dominates`) ends every continuation no later: only
  the states no other dominates are kept (a Pareto set per placement of the values);
- the priority ``f`` of a state is a lower bound on the makespan of every completion: the
  compute stream cannot start before ``max(C, O)`` and still has to run every backward not
  yet run and a recording forward for every backward whose tape is nowhere (neither on the
  device nor on the host); the channel is busy until ``H``.  At a final state ``f`` is the
  makespan, so the first final state popped is optimal.

A budget below :func:`min_feasible_budget` (the smallest budget at which a schedule exists:
a bottleneck search over placements alone, finite and exact because memory does not depend
on times) is answered infeasible at once; at any other budget a schedule exists and the
search ends at the optimum (or at ``max_states`` / ``time_limit``, status ``time_limit``:
not proven).  An incumbent prunes it further: the faster of the best schedule with no
transfer (canonical exhaustive search's optimum; store-all without recomputation), valid
here with the same makespan, and ``dp-offload``'s (its class's optimum); no state whose
bound reaches its makespan is kept, and when none is left below it, it is the optimum.

``recompute=False`` searches the schedules with no recomputation (each stage's forward
once, a ``Fall``; offloading only: the class ``no-remat+offload``), the baseline "offload
only".  On a chain without ``bandwidth`` there is no transfer, and the search is over the
canonical schedules (its optimum is ``exhaustive``'s).
"""
from __future__ import annotations

import functools
import heapq
import itertools
import time
from operator import le

from remat_theory.model import classes
from remat_theory.model.chain import Chain
from remat_theory.model.errors import (AT_LEAST, Remedy, SolverError, SolverLimitError,
                                       SolverOptionError)
from remat_theory.model.offload import OffloadState, step
from remat_theory.model.schedule import (LOSS_OP, Bwd, Fall, Fck, Fn, OffT, OffX, PreT, PreX,
                                         Schedule)
from remat_theory.model.solution import Solution
from remat_theory.model.validation import check_bool, check_int, check_positive, option_owner

from remat_theory.model.simulator import simulate

from solvers import registry
from solvers._options import Option
from solvers.registry import register
from solvers.exhaustive import min_feasible_budget as canonical_min_budget
from solvers.offload.min_budget import eager_min_budget
from solvers.store_all import store_all_schedule

NAME = "exhaustive-offload"
DEFAULT_MAX_STAGES = 4
SWEEP_MAX_STAGES = 3
DEFAULT_MAX_STATES = 1_000_000
EXHAUSTIVE_MAX = 8  # the canonical search used as the incumbent (seconds up to there)
DP_INCUMBENT_LIMIT = 5.0  # seconds for dp-offload's incumbent (none past it)
_OPTION = option_owner(NAME)
_INF = float("inf")


@functools.lru_cache(maxsize=64)
def _ops(L: int) -> tuple:
    """The ops of a chain of ``L`` stages, made once (an ``Op`` is immutable):
    ``(fwd, bwd, transfers)``, ``fwd[i] = (Fn_i, Fck_i, Fall_i)``, ``bwd[i] = B_i``,
    ``transfers[i] = (OffX_i, OffT_i, PreX_i, PreT_i)``."""
    fwd = tuple((Fn(i), Fck(i), Fall(i)) for i in range(L))
    transfers = tuple((OffX(i), OffT(i), PreX(i), PreT(i)) if i else None
                      for i in range(L + 1))
    return fwd, tuple(Bwd(i) for i in range(L)), transfers


def moves(chain: Chain, st: OffloadState, recompute: bool, falls: int):
    """The ops to try from ``st``, in a fixed order.  Ops the referee would refuse for a
    reason read off the placement alone (a forward whose input is missing or whose output
    is held, an offload of a value whose device copy is still leaving) are not offered (a
    speed-up only: :func:`~remat_theory.model.offload.step` still decides every op
    offered, and the order of the others is unchanged)."""
    L = chain.length
    fwd, bwd, transfers = _ops(L)
    dev = st.dev
    nxt = dev.bwd_next
    if nxt == L:
        yield LOSS_OP
    elif nxt >= 0:
        yield bwd[nxt]
    plain, tapes = dev.plain, dev.tapes
    readable = plain | tapes & chain.saved_mask  # the simulator's _available
    for i in range(min(nxt, L - 1) + 1):
        if not readable >> i & 1:
            continue
        fn, fck, fall = fwd[i]
        if recompute:
            if not plain >> (i + 1) & 1:
                yield fn
                yield fck
            if not tapes >> (i + 1) & 1:
                yield fall
        elif i == falls and not tapes >> (i + 1) & 1:
            yield fall
    if chain.bandwidth is None:
        return
    pend_plain, pend_tapes = st.pend_plain, st.pend_tapes
    host_plain, host_tapes = st.host_plain, st.host_tapes
    for i in range(1, L + 1):
        off_x, off_t, pre_x, pre_t = transfers[i]
        if plain >> i & 1 and not pend_plain >> i & 1:
            yield off_x
        if tapes >> i & 1 and not pend_tapes >> i & 1:
            yield off_t
        if host_plain >> i & 1:
            yield pre_x
        if host_tapes >> i & 1:
            yield pre_t


def dominates(a: tuple, b: tuple) -> bool:
    """:func:`~remat_theory.model.offload.dominates`, without a generator per call."""
    return all(map(le, a, b))


def lower_bound(chain: Chain, st: OffloadState) -> float:
    """A lower bound on the makespan of every completion of ``st`` (module docstring)."""
    L = chain.length
    nxt = st.dev.bwd_next
    rem = chain.bwd_time[L] if nxt == L else 0.0
    somewhere = st.dev.tapes | st.host_tapes
    for j in range(min(nxt, L - 1), -1, -1):
        rem += chain.bwd_time[j]
        if not somewhere >> (j + 1) & 1:
            rem += chain.fall_time[j]
    return max(max(st.C, st.O) + rem, st.H)


def _incumbent(chain: Chain, budget: int, recompute: bool):
    """A valid schedule (an upper bound on the optimum), the faster of: the best with no
    transfer (canonical exhaustive search's; store-all without recomputation) and
    ``dp-offload``'s (its class's optimum, with transfers; ``dp-offload-only`` without
    recomputation), each replayed by the registry.  (schedule, makespan, peak) or None."""
    found = []
    if not recompute:
        if chain.store_all_memory() <= budget:
            s = store_all_schedule(chain)
            sim = simulate(chain, s)
            found.append((s, sim.makespan, sim.peak_memory))
    elif chain.length <= EXHAUSTIVE_MAX:
        sol = registry.solve(chain.replace(bandwidth=None), budget, "exhaustive",
                             max_stages=EXHAUSTIVE_MAX)
        if sol.status == "optimal":
            found.append((sol.schedule, sol.makespan, sol.peak_memory))
    if chain.bandwidth is not None:
        try:  # refused up front where its table would be too big or too slow for the limit
            dp = registry.solve(chain, budget, "dp-offload", recompute=recompute,
                                time_limit=DP_INCUMBENT_LIMIT)
        except SolverLimitError:
            dp = None
        if dp is not None and dp.schedule is not None:
            found.append((dp.schedule, dp.makespan, dp.peak_memory))
    return min(found, key=lambda f: f[1]) if found else None


def search(chain: Chain, budget: int, *, recompute: bool = True,
           max_states: int = DEFAULT_MAX_STATES, time_limit: float | None = None,
           incumbent=None, max_ops: int | None = None):
    """Returns ``(schedule, makespan, peak, bound, stopped_by)``: the optimal schedule, or
    None with the lower bound reached and why the search stopped (``"exhausted"``: no
    schedule fits; ``"max_states"`` / ``"time_limit"``: not proven).

    ``incumbent`` ``(schedule, makespan, peak)``, a valid schedule: states whose bound
    reaches its makespan are not kept, and when none is left below it, it is returned.

    ``max_ops``: only schedules of at most that many ops (the class ``all+offload<=N``);
    the number of ops issued is then one more coordinate of the dominance (fewer is
    better: every continuation of the other state fits in what is left)."""
    if incumbent is not None and max_ops is not None and len(incumbent[0]) > max_ops:
        incumbent = None

    def key_times(state, depth):
        t = state.times()
        return t if max_ops is None else (depth,) + t

    start_clock = time.perf_counter()
    st0 = OffloadState.initial(chain)
    if st0.memory > budget:
        return None, None, None, _INF, "exhausted"
    cap = incumbent[1] if incumbent is not None else _INF
    nodes = [(None, None, st0.memory)]  # (parent index, op, peak so far)
    counter = itertools.count()
    f0 = lower_bound(chain, st0)
    heap = [(f0, 0.0, next(counter), 0, st0, 0, 0)] if f0 < cap else []
    front: dict = {(st0.logical(), 0): [key_times(st0, 0)]}  # placement -> non-dominated
    bound = f0
    while heap:
        f, _, _, idx, st, falls, depth = heapq.heappop(heap)
        bound = f
        times = key_times(st, depth)
        if any(t != times and dominates(t, times) for t in front[(st.logical(), falls)]):
            continue
        if st.is_final():
            ops = []
            k = idx
            while nodes[k][0] is not None:
                ops.append(nodes[k][1])
                k = nodes[k][0]
            return Schedule(reversed(ops)), st.makespan, nodes[idx][2], f, None
        if len(nodes) > max_states:
            return None, None, None, bound, "max_states"
        if time_limit is not None and time.perf_counter() - start_clock > time_limit:
            return None, None, None, bound, "time_limit"
        if max_ops is not None and depth >= max_ops:
            continue
        for op in moves(chain, st, recompute, falls):
            r = step(chain, st, op)
            if isinstance(r, str) or r[1].peak > budget:
                continue
            new = r[0]
            nf = falls + (op.kind == "Fall") if not recompute else 0
            g = max(f, lower_bound(chain, new))
            if g >= cap:
                continue
            key = (new.logical(), nf)
            t = key_times(new, depth + 1)
            known = front.setdefault(key, [])
            if any(dominates(o, t) for o in known):
                continue
            known[:] = [o for o in known if not dominates(t, o)]
            known.append(t)
            nodes.append((idx, op, max(nodes[idx][2], r[1].peak)))
            # ties: the state whose compute stream is further along first
            heapq.heappush(heap, (g, -new.C, next(counter), len(nodes) - 1, new, nf,
                                  depth + 1))
    if incumbent is not None:
        return incumbent[0], incumbent[1], incumbent[2], incumbent[1], None
    return None, None, None, bound, "exhausted"


def _feasible_without_transfers(chain: Chain, recompute: bool) -> int:
    """The smallest budget of the schedules with no transfer (canonical exhaustive search's;
    store-all's peak without recomputation): an upper bound on :func:`min_feasible_budget`
    (O.1)."""
    if not recompute:
        return chain.store_all_memory()
    return canonical_min_budget(chain.replace(bandwidth=None))


@functools.lru_cache(maxsize=256)
def min_feasible_budget(chain: Chain, recompute: bool = True) -> int:
    """The smallest budget at which a schedule of the two-stream model exists (with
    ``recompute=False``, one without recomputation): a bottleneck (minimax) search over
    placements, exact because memory does not depend on times (O.3), over the eager
    schedules alone, which keep the least peak (O.23;
    :func:`solvers.offload.min_budget.eager_min_budget`).  It looks below the smallest
    budget without transfers only, which it returns when nothing is found below, and
    first at the memory lower bound (O.12), which it returns when a schedule peaks there.
    (Remembered per chain: a caller that asks for the smallest budget and then solves
    below the one without transfers searched once.)"""
    upper = _feasible_without_transfers(chain, recompute)
    if chain.bandwidth is None:
        return upper
    low = chain.memory_lower_bound()
    if upper <= low:
        return upper
    found = eager_min_budget(chain, upper, low, recompute)
    return upper if found is None else found


@register(NAME, optimal_for=classes.OFFLOAD.key, exact=True,
          description="Best-first search over the two-stream referee's states: the exact "
                      "optimum with recomputation and offloading (a chain with bandwidth; "
                      f"L <= {DEFAULT_MAX_STAGES} unless max_stages is raised).",
          max_stages=SWEEP_MAX_STAGES, reference_max_stages=SWEEP_MAX_STAGES,
          classes=(classes.OFFLOAD.key, classes.NO_REMAT.key, classes.OFFLOAD_OPS_FAMILY),
          variants={"exhaustive-offload-only": {"recompute": False}},
          supports=("fall_time", "fall_overhead", "output_saved", "bandwidth"),
          options={"recompute": Option("bool", "allow recomputation (false: offloading "
                                       "only, class no-remat+offload)"),
                   "time_limit": Option("seconds", "stop the search and answer time_limit "
                                        "with the best proven lower bound", none=True),
                   "max_stages": Option("int", "the longest chain searched (a guard)",
                                        minimum=1),
                   "max_states": Option("int", "the most states kept; past it, answer "
                                        "time_limit", minimum=1),
                   "max_ops": Option("int", "only schedules of at most this many ops (class "
                                     "all+offload<=N)", minimum=1, none=True)})
def solve_exhaustive_offload(chain: Chain, budget: int, *, recompute: bool = True,
                             time_limit: float | None = None,
                             max_stages: int = DEFAULT_MAX_STAGES,
                             max_states: int = DEFAULT_MAX_STATES,
                             max_ops: int | None = None) -> Solution:
    """Exact optimum over every schedule of the two-stream model (with ``recompute=False``,
    over those without recomputation: offloading only).  ``time_limit`` (seconds) and
    ``max_states`` stop the search with status ``time_limit`` and a lower bound."""
    max_stages = check_int(max_stages, "max_stages", minimum=1, error=SolverOptionError,
                           owner=_OPTION)
    if chain.length > max_stages:
        raise SolverLimitError(
            f"exhaustive-offload on {chain.length} stages may explore billions of states; "
            f"max_stages = {max_stages}", solver="exhaustive-offload",
            remedies=(Remedy(options=(("max_stages", AT_LEAST, chain.length),),
                             note="to force it"),))
    recompute = check_bool(recompute, "recompute", error=SolverOptionError, owner=_OPTION)
    max_states = check_int(max_states, "max_states", minimum=1, error=SolverOptionError,
                           owner=_OPTION)
    if time_limit is not None:
        time_limit = check_positive(time_limit, "time_limit", error=SolverOptionError,
                                    owner=_OPTION, unit="seconds")
    cls = classes.OFFLOAD if recompute else classes.NO_REMAT
    if max_ops is not None:
        if not recompute:
            raise SolverOptionError("solver 'exhaustive-offload': max_ops needs recompute "
                                    "= true (the class all+offload<=N)")
        cls = classes.schedule_class(f"{classes.OFFLOAD_OPS_PREFIX}{max_ops}")
    info = {"recompute": recompute, "bandwidth": chain.bandwidth}
    mfb = None
    if budget < _feasible_without_transfers(chain, recompute):
        mfb = min_feasible_budget(chain, recompute)
    if mfb is not None and budget < mfb:  # exact and finite (memory does not depend on times)
        return Solution.infeasible(NAME, budget, optimal_for=cls, info=info,
                                   min_budget=mfb if max_ops is None else None,
                                   message=f"no schedule of {cls.key} fits in {budget}; the "
                                           f"smallest feasible budget is {mfb}")
    incumbent = _incumbent(chain, budget, recompute)
    schedule, makespan, peak, bound, stopped = search(
        chain, budget, recompute=recompute, max_states=max_states, time_limit=time_limit,
        incumbent=incumbent, max_ops=max_ops)
    if schedule is not None:
        return Solution.optimal(NAME, budget, schedule, makespan, peak, optimal_for=cls,
                                info=info)
    if stopped != "exhausted":
        info["stopped_by"] = stopped
        why = ("time limit reached" if stopped == "time_limit" else
               f"state limit reached (max_states = {max_states:,})")
        if incumbent is not None:
            schedule, makespan, peak = incumbent
        return Solution.time_limit(NAME, budget, bound=bound, optimal_for=cls, info=info,
                                   schedule=schedule, makespan=makespan, peak_memory=peak,
                                   message=f"{why}: not proven optimal nor infeasible; "
                                           f"lower bound {bound}")
    if max_ops is not None:  # fewer ops than any schedule that fits needs
        return Solution.infeasible(NAME, budget, optimal_for=cls, info=info,
                                   message=f"no schedule of at most {max_ops} operations "
                                           f"fits in {budget}")
    raise SolverError(  # pragma: no cover - a schedule exists at budget >= mfb
        f"exhaustive-offload: no schedule found at budget {budget} >= the smallest feasible "
        f"budget {mfb or budget}")
