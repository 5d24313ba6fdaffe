"""``ilp-offload``: a MILP of the two-stream model (rematerialization and offloading), exact
over the schedules of at most N operations (docs/ilp.md, "The offload MILP";
proofs/offload.md, O.13).

Positions p = 1..N hold one op each (or none: idle positions come last).  For every op
``o`` of the referee's table, with the place it reads x_i from when that matters
(``Fn``/``Fck``/``Fall``/``Loss``/``B`` read a plain x_i when one is held, else the tape
t_i), a binary ``u[p, o]``.  The state after position p is binary: ``dev[p, v]`` and
``host[p, v]`` for every value v (x_1..x_L, t_1..t_L), ``leave[p, v]`` (offloaded since the
last compute op, still counted), and ``bn[p, j]`` one-hot, the backward next (j = L..-1).
Preconditions, effects and the frame are linear in them, one rule per row of the operation
table (docs/model.md); the one conditional effect, the unsaved output that ``Fall_i`` adds
only when none is held and ``B_{i+1}`` has not run, has its own binary.  Memory is a
linear function of the state: each compute op's peak (held, leaving copies released, plus
what it adds) and each transfer's (held, leaving copies, plus a prefetch's size) is at
most the budget.

Times are continuous: ``C``, ``H``, ``O`` (compute stream free, channel free, pending
offload completion), ``R[v]`` and ``Q[v]`` (ready time, last read), the op's start ``S``,
end ``E`` and, for an offload, completion ``D``.  Every rule of the referee sets a time to
a maximum of earlier times plus a duration; the MILP imposes ``>=`` each term that applies
(big-M on the op binaries), so for a fixed token sequence every feasible time is at least
the referee's and the referee's times are feasible: the least makespan ``Z >= C, H, O`` of
the MILP is the referee's optimum over sequences of at most N tokens, its dual bound a
lower bound on it.  N is the option ``max_ops`` (default: the incumbent's length plus
``extra_ops``); the claims are about the class ``all+offload<=N`` (schedules of the model
of at most N ops), which contains the incumbent.  An incumbent (the best of
``dp-offload``'s, ``save-on-cpu``'s and ``offload-all``'s schedules, else a fewest-ops
schedule found over placements) bounds the makespan (big-M) and starts the search.

The MILP keeps only the schedules in the normal form of proofs/offload.md O.20 (no
prefetch left untouched, no offload undone before a compute op: flags ``pf`` and two
rules), which keeps an optimum at every N (O.20 ii), with the cut "transfers at most the
compute ops' charges" (O.21) and "each backward once, each Fall at least once".

Beyond N (proofs/offload.md, O.14, O.21-O.22): when every forward takes a positive time, a
normal-form schedule of makespan at most V has at most :func:`length_bound` (V) ops, and
some optimal schedule is in normal form, so an optimum V* found with N >=
length_bound(V*) is the optimum over ALL schedules (class ``all+offload``): the answer
certifies itself.  ``proven=True`` picks N =
length_bound(incumbent's makespan) so that it does.  Two valid cuts of the same lemma
(each stream runs its ops one after another within the makespan: the compute ops' times
add up to at most Z, and so do the copies') tighten the relaxation.

Short of that (O.15): every schedule of more than N ops takes at least
:func:`longer_schedule_bound` (N), the least makespan whose length bound exceeds N, so
``Solution.bound`` is a lower bound over ALL schedules (``info["bound_over"]`` says which
class it covers): the minimum of that and the optimum (or, at a time limit, the dual
bound) over the schedules of at most N ops.

Where the parts live: the op rules and the HiGHS model in :mod:`solvers.offload.ilp_model`,
the length bounds (O.14, O.15, O.21) in :mod:`solvers.offload.ilp_bounds`; this module
finds the incumbent, sizes the model, and turns HiGHS's answer into a claim.
"""
from __future__ import annotations

import math
import time

from remat_theory.model import classes
from remat_theory.model.chain import Chain
from remat_theory.model.errors import (AT_LEAST, RematError, Remedy, SolverContractError,
                                       SolverError, SolverLimitError)
from remat_theory.model.offload import OffloadState, step
from remat_theory.model.schedule import Schedule
from remat_theory.model.simulator import simulate
from remat_theory.model.solution import Solution

from solvers import registry
from solvers.offload.copies import copy_time, size, values
from solvers.offload.exhaustive import min_feasible_budget, moves
from solvers.offload.ilp_bounds import length_bound, longer_schedule_bound
from solvers.offload.ilp_model import GAP_TOLERANCE, Model, op_table
from solvers.registry import Option, register

NAME = "ilp-offload"
DEFAULT_EXTRA_OPS = 4
#: The longest chain solved without raising max_stages: at 3 stages HiGHS takes 10-100 s
#: (benchmarks: exhaustive-offload is faster there), at 2 a few seconds.
DEFAULT_MAX_STAGES = 2
#: Binaries above which the model is refused up front (building it is pure Python).
MAX_BINARIES = 60_000


#: The widest exact-memory table of dp-offload the incumbent asks for (memory units: sizes
#: over their gcd); wider, its slots (sizes of 10^7 bytes made rows of 10^7 floats, and
#: gigabytes of them, before the DP's own refusal at 8 GiB).
EXACT_DP_MAX_UNITS = 100_000


def class_key(n: int) -> str:
    """The class the answers with ``max_ops = n`` are about."""
    return f"{classes.OFFLOAD_KEY}<={n}"


def offload_incumbent(chain: Chain, budget: int):
    """A valid schedule to start from and bound the makespan: the best of dp-offload's
    (exact memory when small, else slots; its class contains store-all) and the
    baselines save-on-cpu and offload-all (outside its class, sometimes better: O.11),
    fewer ops first on a tie; else a fewest-ops schedule over placements; None when none
    fits."""
    found = []
    small = chain.store_all_memory() // chain.size_gcd() <= EXACT_DP_MAX_UNITS
    for name, opts in (("dp-offload", {}), ("dp-offload", {"slots": 64}),
                       ("save-on-cpu", {}), ("offload-all", {})):
        if name == "dp-offload" and (any(f[2] == name for f in found)
                                     or (not opts and not small)):
            continue  # the exact table answered, or would be too wide: slots
        try:
            sol = registry.solve(chain, budget, name, **opts)
        except (SolverError, SolverContractError):
            continue
        if sol.schedule is not None and sol.makespan is not None:
            found.append((sol.makespan, len(sol.schedule), name, sol.schedule))
    if not found:
        return fewest_ops_schedule(chain, budget)
    best = min(found, key=lambda f: (f[0], f[1]))
    return best[3], best[0]


def fewest_ops_schedule(chain: Chain, budget: int, max_states: int = 200_000):
    """(schedule, makespan) of a valid schedule within ``budget`` with the fewest ops: a
    breadth-first search over where the values are (memory and validity depend on that
    alone, O.3), for the budgets where neither dp-offload's class nor the baselines fit
    (an unsaved output's tape must move, O.11 c); None when none is found within
    ``max_states`` placements."""
    from collections import deque

    st0 = OffloadState.initial(chain)
    if st0.memory > budget:
        return None
    seen = {st0.logical()}
    queue = deque([(st0, ())])
    while queue and len(seen) <= max_states:
        st, path = queue.popleft()
        for op in moves(chain, st, True, 0):
            r = step(chain, st, op)
            if isinstance(r, str) or r[1].peak > budget:
                continue
            new = r[0]
            if new.logical() in seen:
                continue
            if new.is_final():
                schedule = Schedule(path + (op,))
                return schedule, simulate(chain, schedule).makespan
            seen.add(new.logical())
            queue.append((new, path + (op,)))
    return None



#: proven=True refuses a model with more positions than this (HiGHS, with the normal form
#: of O.20-O.22: 1 stage in under a second; 2 stages and 12-22 positions mostly in
#: seconds, sometimes past 20 s: benchmarks/results/offload_ilp_certified.json).
DEFAULT_MAX_PROVEN_OPS = 24


def _certify(chain: Chain, N: int, value: float | None) -> tuple:
    """(class, length bound, longer bound, why not all): the class an answer of the
    N-position model at the makespan ``value`` is optimal for.  ``all+offload`` when no
    schedule of more than N ops is shorter than ``value``: every such schedule takes at
    least ``longer`` = :func:`longer_schedule_bound` (N) (O.15), so ``value <= longer``
    suffices (it holds whenever ``length_bound(value) <= N``, O.14).  Else
    ``all+offload<=N`` and the reason."""
    lb = None if value is None else length_bound(chain, value)
    longer = longer_schedule_bound(chain, N)
    if value is not None and longer is not None and value <= longer:
        return classes.OFFLOAD_KEY, lb, longer, ""
    if longer is None:
        why = ("a forward of this chain takes no time: no length bound, so not proven "
               "over longer schedules and no lower bound over them")
    elif lb is None:
        why = "no makespan known"
    else:
        n = f"{lb}" if lb < 10 ** 9 else f"{float(lb):.3g}"
        why = (f"a better schedule in normal form would have at most {n} ops (O.14, "
               f"O.21; some optimal schedule is in that form, O.20), more than the "
               f"{N} positions: not proven over longer schedules (proven=true or "
               f"max_ops >= {n} proves it); every schedule of more than {N} ops takes "
               f"at least {longer:.10g} (O.15)")
    return class_key(N), lb, longer, why


def _bound_info(chain: Chain, extra: dict, N: int, within: float | None) -> tuple:
    """(bound, class it is over) from a lower bound ``within`` the schedules of at most N
    ops (None: none known) and O.15: every schedule of more than N ops takes at least
    ``longer`` = :func:`longer_schedule_bound` (N), every schedule at all at least
    ``longer_schedule_bound(0)`` (the ideal makespan up to the float slack), so
    ``max(that, min(within, longer))`` bounds every schedule.  Records the parts and the
    class in ``extra``; without a length bound (a zero-time forward) only ``within``,
    over ``all+offload<=N``."""
    longer = longer_schedule_bound(chain, N)
    extra["bound_at_most_n"] = within
    extra["longer_bound"] = longer
    if longer is not None:
        every = longer_schedule_bound(chain, 0)
        bound = max(every, longer if within is None else min(within, longer))
        over = classes.OFFLOAD_KEY
    else:
        bound, over = within, class_key(N)
    extra["bound_over"] = over
    return bound, over


@register(NAME, optimal_for=classes.OFFLOAD_OPS_FAMILY, exact=True,
          description="MILP of the two-stream model (positions x ops, exact times by "
                      "big-M): optimal over the schedules of at most max_ops operations, "
                      "and over all schedules when max_ops reaches the length bound of "
                      "the optimum (proofs/offload.md O.14, O.20-O.22; proven=true "
                      "picks it); a "
                      "certified lower bound at a time limit.",
          classes=(classes.OFFLOAD_OPS_FAMILY, classes.OFFLOAD_KEY),
          max_stages=2, reference_max_stages=3,
          supports=("fall_time", "fall_overhead", "output_saved", "bandwidth"),
          options={"max_ops": Option("int", "positions of the model: the longest schedule "
                                     "it covers (default: the incumbent's length + "
                                     "extra_ops, or with proven the length bound)",
                                     minimum=1, none=True),
                   "extra_ops": Option("int", "positions beyond the incumbent's length "
                                       "(when max_ops is not given)", minimum=0),
                   "proven": Option("bool", "take as many positions as a schedule better "
                                    "than the incumbent can have (O.14, O.21), so that the "
                                    "answer is the optimum over all schedules"),
                   "max_proven_ops": Option("int", "with proven: refuse beyond this many "
                                            "positions (a guard)", minimum=1),
                   "max_stages": Option("int", "the longest chain modelled (a guard)",
                                        minimum=1),
                   "time_limit": Option("seconds", "for the MIP solve (status time_limit "
                                        "past it, with the incumbent and the dual bound)",
                                        none=True)})
def solve_ilp_offload(chain: Chain, budget: int, *, max_ops: int | None = None,
                      extra_ops: int = DEFAULT_EXTRA_OPS, proven: bool = False,
                      max_proven_ops: int = DEFAULT_MAX_PROVEN_OPS,
                      max_stages: int = DEFAULT_MAX_STAGES,
                      time_limit: float | None = None) -> Solution:
    """The optimum over the schedules of at most ``max_ops`` operations (module
    docstring), proven by HiGHS, and over all schedules when ``max_ops`` reaches the
    length bound of that optimum (O.14: the class says which); at ``time_limit`` the best
    schedule found and the dual bound (status ``time_limit``, "not proven optimal")."""
    import highspy

    if chain.length > max_stages:
        raise SolverLimitError(
            f"{NAME} on {chain.length} stages may take hours (a few seconds at 2 stages, "
            f"10-100 s at 3); max_stages = {max_stages}", solver=NAME,
            remedies=(Remedy(options=(("max_stages", AT_LEAST, chain.length),),
                             note="to force it, best with a time_limit"),))
    t0 = time.perf_counter()
    inc = offload_incumbent(chain, budget)
    if proven and max_ops is None:
        if inc is None:
            return _infeasible_or_unbounded(chain, budget, None)
        bound_n = length_bound(chain, inc[1])
        if bound_n is None:
            raise SolverLimitError(
                f"{NAME}: proven needs a positive time for every forward (O.14); this "
                f"chain has one that takes none, so no length bound exists; "
                f"max_ops = N gives the optimum over schedules of at most N ops",
                solver=NAME)
        if bound_n > max_proven_ops:
            raise SolverLimitError(
                f"{NAME}: proven needs {bound_n} positions here (the length bound of the "
                f"incumbent's makespan {inc[1]:g}, O.14 and O.21); max_proven_ops = "
                f"{max_proven_ops}", solver=NAME,
                remedies=(Remedy(options=(("max_proven_ops", AT_LEAST, bound_n),),
                                 note="the MILP may then take very long"),))
        max_ops = max(bound_n, len(inc[0]))
    if inc is None and budget < min_feasible_budget(chain):  # exact (O.3, O.23): no model
        return _infeasible_or_unbounded(chain, budget, None)
    if inc is None and max_ops is None:
        max_ops = 2 * (2 * chain.length + 1) + extra_ops
    N = max_ops if max_ops is not None else len(inc[0]) + extra_ops
    if inc is not None and len(inc[0]) > N:
        inc = None
    ub = inc[1] if inc is not None else _loose_upper_bound(chain, N)
    nops = len(op_table(chain))
    binaries = N * (nops + 8 * chain.length + chain.length + 2)
    if binaries > MAX_BINARIES:
        raise SolverLimitError(f"{NAME}: {chain.length} stages and {N} positions make about "
                               f"{binaries:,} binaries (limit {MAX_BINARIES:,})", solver=NAME)
    # times in units of the incumbent's makespan; an op longer than it is left out (a
    # schedule running it ends later), a duration below NEGLIGIBLE units taken as 0 (ilp_model)
    unit = ub if ub > 0 and math.isfinite(ub) else 1.0
    model = Model(chain, budget, N, ub, unit=unit,
                  longest=inc[1] if inc is not None else math.inf)
    if inc is not None:  # a start for HiGHS (its answer is the MILP's either way)
        model.start_from(inc[0])
    left = None if time_limit is None else max(0.1, time_limit - (time.perf_counter() - t0))
    status, info = model.solve(left)
    st = highspy.HighsModelStatus
    extra = {"max_ops": N, "binaries": model.binaries, "time_unit": unit}
    if model.zeroed:
        extra["zeroed_durations"] = model.zeroed
    if model.dropped:
        extra["ops_longer_than_the_incumbent"] = model.dropped
    if status == st.kInfeasible and inc is None:
        return _infeasible_or_unbounded(chain, budget, N, extra)
    found = []  # (makespan, schedule, peak) of the valid schedules known
    if status != st.kInfeasible and (status == st.kOptimal or info.primal_solution_status == 2):
        schedule = model.schedule()
        try:  # the referee's word, with the real times (the model may have zeroed some)
            sim = simulate(chain, schedule, budget)
            found.append((sim.makespan, schedule, sim.peak_memory))
        except RematError as e:  # a rounding of HiGHS's: never passed on as an answer
            extra["milp_schedule_refused"] = str(e)
    if inc is not None:
        found.append((inc[1], inc[0], simulate(chain, inc[0]).peak_memory))
    # a lower bound over the schedules of at most N ops: the MILP's (a relaxation where
    # durations were zeroed: still a lower bound), in seconds
    within = None
    if status == st.kOptimal:
        within = info.objective_function_value * unit
    elif status != st.kInfeasible and math.isfinite(info.mip_dual_bound):
        within = info.mip_dual_bound * unit
    if status == st.kInfeasible:  # the incumbent fits the model: HiGHS's numerics
        extra["milp_infeasible_with_incumbent"] = True
    if within is None:
        # stopped before HiGHS had a dual bound: nothing is known of the schedules of at
        # most N ops but what binds every schedule (O.15 a: W_0, the ideal makespan less
        # the float slack; None with a zero-time forward).  Not W_N: that bounds only the
        # longer schedules, and taking it alone here once reported a bound above the
        # optimum (and, with the closing rule below, a false optimum)
        within = longer_schedule_bound(chain, 0)
    tol = GAP_TOLERANCE * unit
    best = min(found, key=lambda f: (f[0], len(f[1]))) if found else None
    if best is not None and status == st.kOptimal and best[0] <= within + tol:
        makespan, schedule, peak = best  # optimal among the schedules of at most N ops
        cls, lb, longer, why = _certify(chain, N, makespan)
        extra["length_bound"] = lb
        bound, _ = _bound_info(chain, extra, N, makespan)
        msg = (f"optimal over all schedules: every schedule of more than {N} ops takes at "
               f"least {longer:.10g} (O.15), no less than this one" if not why else
               f"optimal among schedules of at most {N} operations; {why}")
        return Solution.optimal(NAME, budget, schedule, makespan, peak,
                                optimal_for=cls, bound=bound, info=extra, message=msg)
    # the bound covers the schedules of at most N ops (the MILP's feasible set: the
    # incumbent caps Z, and an optimum is at most it); O.15 bounds the longer ones
    bound, cls = _bound_info(chain, extra, N, within)
    if best is None:
        return Solution.time_limit(NAME, budget, bound=bound, optimal_for=cls, info=extra,
                                   message=f"time limit reached: no schedule found, not "
                                           f"proven infeasible; lower bound {bound} over {cls}")
    makespan, schedule, peak = best
    if bound is not None and cls == classes.OFFLOAD_KEY and bound >= makespan - tol:
        # the bound over all schedules (O.15 c) met a valid schedule's makespan, within the
        # MIP's own optimality tolerance (mip_abs_gap): it is optimal, whether HiGHS had
        # found that schedule itself or not (it starts without the incumbent)
        extra["closed_at_time_limit"] = True
        return Solution.optimal(NAME, budget, schedule, makespan, peak,
                                optimal_for=cls, bound=min(bound, makespan), info=extra,
                                message="optimal over all schedules: the lower bound over "
                                        "all schedules (O.15) reached this schedule's "
                                        "makespan when the time limit stopped the MIP")
    if status in (st.kOptimal, st.kInfeasible):  # the MIP ended, short of a proof
        why = ("durations below a millionth of the makespan were taken as 0 in the MILP "
               "(numerically invisible to it)" if model.zeroed else
               "HiGHS's answer did not replay within its tolerance")
        return Solution.feasible(NAME, budget, schedule, makespan, peak, bound=bound,
                                 optimal_for=cls, info=extra,
                                 message=f"not proven optimal: {why}; the optimum lies "
                                         f"between {bound:.10g} and {makespan:.10g}")
    return Solution.time_limit(NAME, budget, schedule=schedule, makespan=makespan,
                               peak_memory=peak, bound=bound, optimal_for=cls, info=extra,
                               message=f"time limit reached: not proven optimal; lower "
                                       f"bound {bound} over {cls}")


def _infeasible_or_unbounded(chain: Chain, budget: int, N: int | None,
                             extra: dict | None = None) -> Solution:
    """No schedule of at most N ops (N None: none tried) fits: infeasible over all
    schedules when the budget is below the exact smallest feasible one (O.3), else only in
    the class of at most N ops, saying that a longer schedule fits."""
    extra = dict(extra or {})
    mfb = min_feasible_budget(chain)
    if budget < mfb:
        return Solution.infeasible(NAME, budget, optimal_for=classes.OFFLOAD_KEY,
                                   min_budget=mfb, info=extra,
                                   message=f"no schedule fits in {budget}; the smallest "
                                           f"feasible budget is {mfb}")
    if N is None:
        raise SolverLimitError(
            f"{NAME}: proven found no incumbent to bound the length (dp-offload and "
            f"store-all do not fit in {budget}, though a schedule fits from {mfb}); "
            f"give max_ops", solver=NAME)
    # every schedule that fits has more than N ops: O.15 bounds its makespan
    longer = bound = longer_schedule_bound(chain, N)
    extra.update(bound_at_most_n=None, longer_bound=longer,  # none of at most N ops fits
                 bound_over=classes.OFFLOAD_KEY if longer is not None else class_key(N))
    return Solution.infeasible(NAME, budget, optimal_for=class_key(N), info=extra,
                               bound=bound,
                               message=f"no schedule of at most {N} operations fits in "
                                       f"{budget} (a longer one does: the smallest feasible "
                                       f"budget is {mfb})" + (
                                           "" if longer is None else
                                           f"; every schedule that fits takes at least "
                                           f"{longer:.10g} (O.15)"))


def _loose_upper_bound(chain: Chain, N: int) -> float:
    """A makespan no schedule of N ops exceeds: every op's longest duration, N times."""
    longest = max(list(chain.fwd_time) + list(chain.fall_time) + list(chain.bwd_time)
                  + [copy_time(chain, size(chain, v)) for v in values(chain)
                     if chain.bandwidth] + [0.0])
    return N * (longest if math.isfinite(longest) else 0.0) + 1.0
