"""The ``prove`` solver: a schedule in hand, proven optimal over all schedules where the
moment relaxation alone stops short (proofs/exhaustive.md section "Bounded search").

Upper bound: the weak DP's schedule (store-all, or the persistent DP's, when it has none),
valid by the simulator.  Lower bounds, in turn, each given part of the time:

1. the moment relaxation (:mod:`solvers.ilp.relaxation`, proofs/ilp.md section 9): if its
   bound reaches the schedule's makespan, the schedule is optimal (``certificate``
   ``"moment relaxation"``);
2. *bounded search*: A* over the simulator's own states with exhaustive search's
   admissible, consistent heuristic (:mod:`solvers.exhaustive`), where every state whose
   f-value (time so far plus heuristic) is not below the schedule's makespan is cut off.
   A schedule faster than the one in hand passes only through states of smaller f, so when
   the search runs out of states none exists and the schedule is optimal (``certificate``
   ``"bounded search"``); when it pops a final state first, that state's schedule is
   faster, and optimal (A* pops final states in order of makespan).

The cutoff is what makes the difference with plain exhaustive search: every state of f
equal to the optimum (with integer times, a large plateau that A* explores until it happens
on a final state) and above it is never stored.  Times and sizes are whatever the chain
says; the search uses the simulator's transition function, so chains with any of the
model's fields (overheads, recording costs, unsaved outputs) are searched as the simulator
replays them; on chains with unsaved outputs (``output_saved`` false somewhere) the extra
relaxation rows (``cuts``) are refused.  Under a time limit or
state limit the answer is ``time_limit`` with the schedule in hand and the larger of the two
bounds, never ``optimal``.
"""
from __future__ import annotations

import math

from remat_theory.model.chain import Chain
from remat_theory.model.errors import SolverOptionError
# the simulator's answer (makespan, peak), vectorised for long schedules
from remat_theory.model.fast_replay import replay_totals as simulate
from remat_theory.model.solution import CLASS_ALL, Solution
from remat_theory.model.validation import option_owner

from solvers import exhaustive, exhaustive_bounds
from solvers._deadline import Deadline, DeadlineExpired
from solvers.registry import Option, register

NAME = "prove"
_OWNER = option_owner(NAME)
DEFAULT_MAX_STATES = 10_000_000  # about 4 GB, as exhaustive search's own default
DEFAULT_RELAXATION_SHARE = 0.25  # of the time limit, for the moment relaxation
#: Beyond this many stages the relaxation gets :data:`LONG_RELAXATION_SHARE` of the time
#: limit by default: bounded search proved none of the random or family benchmark chains of
#: more than 20 stages in minutes (docs/results.md; only Revolve's tape-dominated homogeneous
#: ones), while the relaxation proves middle budgets of 60 stages in tens of seconds.
LONG_CHAIN = 20
LONG_RELAXATION_SHARE = 0.8
#: The A* bound's first evaluation (exhaustive_bounds.Heuristic, its knapsack per backward)
#: takes about this many seconds times L^2 on long chains (0.9 s at 800 stages, one core of
#: a loaded 2-core machine; minutes at 10,000; and each of the first pops about as long: 14 s
#: for 5 pops at 1,000 stages under a load of 16) and checks no clock: under a time limit
#: the bounded search is not started unless this estimate fits in half the time left.
FIRST_BOUND_SECONDS = 1e-5


def heuristic_for(chain: Chain, budget: int, kind: str = "memory"):
    """The A* lower bound on the time still to spend from a state: ``"memory"``, exhaustive
    search's (:class:`solvers.exhaustive_bounds.Heuristic`: the backwards, the missing tapes and
    what the memory at a later backward forces; proofs/exhaustive.md, for every chain,
    unsaved outputs included); ``"simple"``, without the memory term; ``"none"``, zero
    (Dijkstra, the oracle of the tests)."""
    if kind == "memory":
        return exhaustive_bounds.Heuristic(chain, budget)
    if kind in ("memory", "simple"):
        return lambda state: exhaustive_bounds.heuristic_simple(chain, state)
    if kind == "none":
        return lambda state: 0.0
    raise SolverOptionError(f"{_OWNER} heuristic = {kind!r} must be memory, simple or none")


def bounded_search(chain: Chain, budget: int, cutoff: float, *,
                   time_limit: float | None = None, max_states: int | None = None,
                   heuristic: str = "memory", precheck: bool = True):
    """A* over simulator states that stores no state of f-value ``>= cutoff``: exhaustive
    search's own loop (:func:`solvers.exhaustive.run_search`, its moves and its dominance
    rule) with the cutoff as its ceiling (``heuristic``: :func:`heuristic_for`; ``"none"``
    also turns dominance off, a plain Dijkstra, the oracle of the tests; ``precheck``
    is kept for callers: exhaustive search never proposes a forward over the budget).

    Returns ``(schedule, makespan, bound, stopped, expanded)``: ``schedule`` is an optimal
    schedule when one of makespan below ``cutoff`` exists (``bound`` = its makespan);
    otherwise None, and ``bound`` is a lower bound on every valid schedule's makespan:
    ``cutoff`` when the search ran out of states (``stopped`` None: no schedule is faster
    than ``cutoff``), or the f-value of the last state taken from the queue when the time
    limit or the state limit stopped it (``stopped`` ``"time_limit"`` / ``"max_states"``).
    ``expanded``: the number of states taken from the queue."""
    del precheck
    if chain.x_size[0] > budget:
        return None, None, cutoff, None, 0
    stats: dict = {}
    found, value, _, bound, _, stopped = exhaustive.run_search(
        chain, budget, False, time_limit, "all", max_states, stats=stats,
        dominance=heuristic != "none", cutoff=cutoff,
        heuristic=heuristic_for(chain, budget, heuristic))
    pops = stats.get("expanded", 0)
    if found is not None:
        return found, value, value, None, pops
    if stopped is not None:
        return None, None, bound, stopped, pops
    return None, None, cutoff, None, pops


def _incumbent(chain, budget, deadline):
    """The weak DP's (or store-all's) schedule at ``budget`` as ``(schedule, makespan,
    source)``; ``(None, inf, None)`` when none fits."""
    from solvers.ilp import seeds
    return seeds.incumbent(chain, budget, True, deadline)


def _relaxation_bound(chain, budget, schedule, seconds, info, cuts=(), cap=None,
                      cap_tolerance=None):
    """The moment relaxation's proven bound at ``budget`` within ``seconds`` (None if it
    proved nothing in time); an infeasibility proof next to a valid schedule is an error
    (:func:`solvers.ilp.certify.reaches`).  ``cap`` (the schedule's makespan): the
    relaxation with its objective capped below it instead, at HiGHS's feasibility
    tolerance ``cap_tolerance`` (:func:`solvers.ilp.relaxation.capped_bound`)."""
    from solvers.ilp import relaxation
    try:
        if cap is not None:
            lb = relaxation.capped_bound(chain, budget, cap, time_limit=seconds,
                                         feasibility_tolerance=cap_tolerance)
        else:
            lb = relaxation.lower_bound(chain, budget, schedule=schedule, time_limit=seconds,
                                        cuts=cuts)
    except DeadlineExpired:
        info["relaxation"] = {"bound": None, "status": "not built in time"}
        return None
    info["relaxation"] = dict(lb.as_info(), capped=cap is not None)
    return lb


def _cut_families(cuts) -> tuple:
    """The ``cuts`` option as a tuple of family names (SolverOptionError naming it)."""
    if not isinstance(cuts, str):
        raise SolverOptionError(f"{_OWNER} cuts = {cuts!r} must be a string of comma-separated "
                                f"families (reach, fwd_peak, fall_peak)")
    from solvers.ilp.cuts import check_families
    return check_families(f.strip() for f in cuts.split(",") if f.strip())


def _tolerance(chain: Chain) -> float:
    return 1e-9 * max(1.0, chain.ideal_makespan())


@register(NAME, optimal_for=CLASS_ALL, exact=True,
          description="Exact over all schedules: the weak DP's schedule, proven optimal by the "
                      "moment relaxation or by A* over simulator states cut off at its makespan "
                      "(or the faster schedule that search finds).",
          max_stages=6, reference_max_stages=10,
          supports=("fall_time", "fall_overhead", "output_saved"),
          options={"time_limit": Option("seconds", "for the whole run; past it, the weak DP's "
                                        "schedule with the best bound (time_limit)", none=True),
                   "max_states": Option("int", "the most states the bounded search stores "
                                        "(about 400 bytes each)", minimum=1),
                   "relaxation": Option("bool", "try the moment relaxation first (PuLP and "
                                        "HiGHS)"),
                   "relaxation_share": Option("fraction", "the share of time_limit the "
                                              "relaxation may use (default: 0.25, or 0.8 "
                                              "beyond 20 stages)", none=True),
                   "cuts": Option("str", "comma-separated extra relaxation rows: reach, "
                                  "fwd_peak (refused on unsaved outputs)"),
                   "lagrange": Option("seconds", "first run the phase-block Lagrangian bound "
                                      "(solvers/bounds/phase_lagrange.py) this long; off "
                                      "by default (chains whose outputs are all saved)",
                                      none=True),
                   "lagrange_window": Option("int", "with lagrange: then windows of this many "
                                             "phases, each an exact MILP, joined by prices "
                                             "(solvers/bounds/window_lagrange.py); 2/3 of "
                                             "lagrange's time", minimum=1, none=True),
                   "cap": Option("bool", "the relaxation with its objective a row capped "
                                 "below the schedule's makespan (integer times), rather "
                                 "than minimized from it"),
                   "cap_tolerance": Option("fraction", "with cap: HiGHS's "
                                           "mip_feasibility_tolerance for the capped run "
                                           "(its default 1e-6)"),
                   "checkable": Option("bool", "an optimal answer also carries a certificate "
                                       "proofs/check_certificate.py verifies "
                                       "(info['proof']; None if not found in the time left)")})
def solve_prove(chain: Chain, budget: int, *, time_limit: float | None = None,
                max_states: int = DEFAULT_MAX_STATES, relaxation: bool = True,
                relaxation_share: float | None = None, cuts: str = "",
                checkable: bool = False, lagrange: float | None = None,
                lagrange_window: int | None = None, cap: bool = False,
                cap_tolerance: float = 1e-6) -> Solution:
    """Optimal schedule over all schedules, by proof of a schedule in hand (module
    docstring).

    Parameters
    ----------
    time_limit : seconds for the whole run; a run it stops answers ``time_limit`` with the
        weak DP's schedule and the best bound proven, never ``optimal``.
    max_states : the most states the bounded search may store (about 400 bytes each).
    relaxation : try the moment relaxation first (needs PuLP and HiGHS).
    relaxation_share : the share of ``time_limit`` the relaxation may use; None (the
        default): :data:`DEFAULT_RELAXATION_SHARE`, or :data:`LONG_RELAXATION_SHARE` on more
        than :data:`LONG_CHAIN` stages (without a time
        limit, :data:`RELAXATION_CAP` seconds).
    cuts : comma-separated families of extra relaxation rows (:mod:`solvers.ilp.cuts`:
        ``reach``, ``fwd_peak``, ``fall_peak``); none by default (measured: no gain at 20-30 stages,
        docs/results.md).
    checkable : an ``optimal`` answer also carries ``info["proof"]``, a ``remat-proof/1``
        certificate (``/2`` when it uses cuts; :mod:`solvers.bounds.certified`) that
        proofs/check_certificate.py verifies without any solver, or None when none was
        found in the time left (``info["proof_search"]`` says how far it got).
    lagrange : seconds for the phase-block Lagrangian bound
        (:mod:`solvers.bounds.phase_lagrange`, proofs/phase_lagrange.md), run before the
        relaxation, its bound kept when larger (``certificate`` ``"phase Lagrangian"`` when
        it reaches the makespan); None (the default): not run.  Strong where the
        relaxation's branch and bound stalls, the smallest budgets of deep chains
        (docs/ilp.md); ignored on chains with unsaved outputs.
    lagrange_window : with ``lagrange``, a third of its time goes to the phase blocks and
        the rest to windows of this many phases, each the moment relaxation restricted to
        them and solved exactly, joined by prices from the phase blocks'
        (:mod:`solvers.bounds.window_lagrange`; 5 measured best at 30 stages).
    cap : ask the relaxation whether any of its points is faster than the schedule in
        hand, its objective a row capped below the makespan
        (:func:`solvers.ilp.relaxation.capped_bound`, whose docstring says why its
        "infeasible" is a proof), rather than minimize it from that schedule; needs
        integer times and no ``cuts`` (SolverOptionError otherwise).  Off by default
        (docs/ilp.md, "Round five").
    cap_tolerance : HiGHS's ``mip_feasibility_tolerance`` for the capped run (default
        1e-6, HiGHS's own; the minimization keeps the driver's 1e-9).
    """
    # the options' types and ranges are checked by the registry (the schema above)
    families = _cut_families(cuts)
    if cap:
        _check_cap(chain, families)
    if families:
        from solvers.ilp.cuts import check_chain
        check_chain(chain, families)  # reach, fwd_peak: SolverOptionError on unsaved outputs
    if relaxation_share is None:
        relaxation_share = (LONG_RELAXATION_SHARE if chain.length > LONG_CHAIN
                            else DEFAULT_RELAXATION_SHARE)
    deadline = Deadline(time_limit)
    info = {"certificate": None, "checkable": checkable}
    schedule, makespan, source = _incumbent(chain, budget, deadline)
    lower = chain.ideal_makespan()
    if schedule is not None:
        makespan = simulate(chain, schedule, budget).makespan  # the cutoff: a replayed fact
        info["incumbent_from"] = source
        if makespan <= chain.ideal_makespan() + _tolerance(chain):
            info["certificate"] = "ideal makespan"
            return _optimal(chain, budget, schedule, info, deadline,
                            "its makespan is the ideal one (every Fall and backward once)")
        if lagrange is not None and not chain.has_unsaved_outputs:
            lag = _lagrange_step(chain, budget, makespan, lagrange, info, deadline,
                                 schedule, lagrange_window)
            if lag >= makespan - _tolerance(chain):
                info["certificate"] = "phase Lagrangian"
                return _optimal(chain, budget, schedule, info, deadline,
                                "the phase-block Lagrangian bound reaches its makespan")
            lower = max(lower, lag)
        if relaxation:
            lb = _relaxation_step(chain, budget, schedule, makespan, info, deadline,
                                  relaxation_share, families, cap, cap_tolerance)
            if lb is not None and lb.value is not None:
                if lb.value >= makespan - _tolerance(chain):
                    info["certificate"] = "moment relaxation"
                    return _optimal(chain, budget, schedule, info, deadline,
                                    "the moment relaxation reaches its makespan")
                lower = max(lower, lb.value)
    cutoff = makespan - _tolerance(chain) if schedule is not None else math.inf
    first = FIRST_BOUND_SECONDS * chain.length ** 2
    if not deadline.fits(first, 0.5):  # the first bound alone is not interruptible
        info["bounded_search"] = {"skipped": f"its first bound is estimated at {first:.3g} s, "
                                             f"past the time left"}
        return _stopped(chain, budget, schedule, lower, "time_limit", max_states, info,
                        deadline)
    t0 = deadline.elapsed()
    found, value, bound, stopped, pops = bounded_search(
        chain, budget, cutoff, time_limit=deadline.remaining(0.01), max_states=max_states)
    info["bounded_search"] = {"expanded": pops, "stopped_by": stopped, "bound": bound,
                              "wall_time": round(deadline.elapsed() - t0, 3)}
    if found is not None:
        info["certificate"] = "bounded search"
        info["incumbent_from"] = "bounded search"
        return _optimal(chain, budget, found, info, deadline,
                        "A* over all states found it below the weak DP's makespan")
    if stopped is None and schedule is not None:
        info["certificate"] = "bounded search"
        return _optimal(chain, budget, schedule, info, deadline,
                        "A* cut off at its makespan found no faster schedule")
    if stopped is None:  # no schedule in hand, and the uncut search ran dry: none fits
        mfb = None
        if chain.length <= exhaustive.DEFAULT_MAX_STAGES:
            mfb = exhaustive.min_feasible_budget(chain)
        return Solution.infeasible(NAME, budget, optimal_for=CLASS_ALL, min_budget=mfb,
                                   info=info, message=f"no schedule fits in {budget}",
                                   wall_time=deadline.elapsed())
    return _stopped(chain, budget, schedule, max(lower, bound), stopped, max_states, info,
                    deadline)


def _lagrange_step(chain, budget, makespan, seconds, info, deadline, schedule,
                   window) -> float:
    """The phase-block Lagrangian bound in at most ``seconds`` (and the time left), less a
    margin for the floating-point sums (proofs/phase_lagrange.md, "Rounding"); with
    ``window``, a third of that time, then the windows' bound from its prices."""
    from solvers.bounds.phase_lagrange import lagrangian_bound
    left = seconds if deadline.limit is None else min(seconds, deadline.remaining(0.01))
    res = lagrangian_bound(chain, budget, upper=makespan,
                           time_limit=left / 3 if window else left, both=True,
                           iterations=10 ** 9)
    if res.get("infeasible"):  # a valid schedule is in hand: the blocks cannot all be empty
        raise AssertionError("phase_lagrange: a block is empty next to a valid schedule")
    value = res["bound"] - res["margin"]
    info["lagrange"] = {"bound": value, "iterations": res["iterations"],
                        "wall_time": round(res["seconds"], 3)}
    if window and value < makespan - _tolerance(chain):
        from solvers.bounds.window_lagrange import window_bound
        rest = left - res["seconds"]
        wres = window_bound(chain, budget, width=window, upper=makespan, schedule=schedule,
                            mu=res["mu"], time_limit=rest, seconds_each=max(1.0, rest / 4))
        if wres.get("infeasible"):
            raise AssertionError("window_lagrange: a window is infeasible next to a valid "
                                 "schedule")
        wval = wres["bound"] - res["margin"]
        info["lagrange"].update(window_bound=wval, window_iterations=wres["iterations"],
                                window_wall_time=round(wres["seconds"], 3))
        value = max(value, wval)
    return value


#: Without a time limit the relaxation may run this many seconds (its branch and bound
#: does not end in hours on the chains where bounded search is what proves).
RELAXATION_CAP = 60.0


def _check_cap(chain: Chain, families) -> None:
    """``cap = true`` is refused where it cannot run (rather than silently ignored): with
    extra relaxation rows, or on a chain whose times are not all integers (no granularity to
    cap the objective below the makespan)."""
    from solvers.ilp.relaxation import granularity
    if families:
        raise SolverOptionError(f"{_OWNER} cap = true cannot be combined with cuts = "
                                f"{','.join(families)!r}")
    if granularity(chain) <= 0:
        raise SolverOptionError(f"{_OWNER} cap = true needs integer times (fwd_time, "
                                f"fall_time, bwd_time); this chain has fractional ones")


def _relaxation_step(chain, budget, schedule, makespan, info, deadline, share, families,
                     cap=False, cap_tolerance=1e-6):
    """The moment relaxation's bound (None when it proved nothing), with ``share`` of the
    time left (:data:`RELAXATION_CAP` seconds without a time limit); ``cap``: its objective
    capped below ``makespan`` (:func:`_check_cap` has refused it where it cannot run).
    A bound above the schedule's makespan, or an infeasibility proof next to it, raises
    (:func:`solvers.ilp.certify.reaches`)."""
    seconds = RELAXATION_CAP if deadline.limit is None else share * deadline.remaining(0.01)
    capped = makespan if cap else None
    lb = _relaxation_bound(chain, budget, schedule, seconds, info, families, capped,
                           cap_tolerance)
    if lb is not None:
        from solvers.ilp.certify import reaches
        reaches(lb, makespan, chain)  # raises on a contradiction with a valid schedule
    return lb


def _stopped(chain, budget, schedule, lower, stopped, max_states, info, deadline) -> Solution:
    """A run the time or state limit stopped: the schedule in hand (if any) and the best
    bound proven, never ``optimal``."""
    info.pop("checkable", None)
    why = "time limit reached" if stopped == "time_limit" else \
        f"state limit reached (max_states = {max_states:,})"
    if schedule is None:
        return Solution.time_limit(NAME, budget, bound=lower, optimal_for=CLASS_ALL, info=info,
                                   wall_time=deadline.elapsed(),
                                   message=f"{why} with no schedule found: lower bound {lower}")
    sim = simulate(chain, schedule, budget)
    lower = min(lower, sim.makespan)
    return Solution.time_limit(NAME, budget, schedule=schedule, makespan=sim.makespan,
                               peak_memory=sim.peak_memory, bound=lower,
                               optimal_for=CLASS_ALL, info=info, wall_time=deadline.elapsed(),
                               message=f"not proven optimal ({why}): bound {lower}, makespan "
                                       f"{sim.makespan}")


def _optimal(chain, budget, schedule, info, deadline, why) -> Solution:
    """``schedule`` proven optimal over all schedules (``why``: by what); with
    ``info["checkable"]``, the certificate for the checker in the time left."""
    info["proved_seconds"] = round(deadline.elapsed(), 3)  # before any certificate search
    if info.pop("checkable", False):
        from solvers.bounds.certified import certificate
        left = deadline.remaining(0.01) if deadline.limit is not None else None
        info["proof"], info["proof_search"] = certificate(chain, budget, schedule,
                                                          time_limit=left)
    sim = simulate(chain, schedule, budget)
    return Solution.optimal(NAME, budget, schedule, sim.makespan, sim.peak_memory,
                            optimal_for=CLASS_ALL, info=info, wall_time=deadline.elapsed(),
                            message=f"proven optimal over all schedules: {why}")
