"""The certified mode, the ``ilp`` default (proofs/ilp.md section 9): the weak DP's schedule,
then the fast mode's optimum, proven optimal over all schedules by the moment relaxation
when its bound reaches their makespan; when a gap is left, exhaustive search on chains
within its own stage guard (there it is the fastest proof), and the proven time-expanded
model only beyond it (and when it is small enough to build).  ``info["certificate"]``
names the step that proved the answer.

Under a time limit, every step gets what is left of it, and a step it stops leaves the best
schedule in hand with the best bound proven (status ``time_limit``).

Theorem 3 says the bound never exceeds a valid schedule's makespan: a bound above one, or a
proof of infeasibility next to one, is raised as an error (:func:`reaches`), never
reported as an answer.
"""
from __future__ import annotations

import math

from remat_theory.model.chain import Chain
from remat_theory.model.errors import AT_LEAST, Remedy, SolverLimitError
from remat_theory.model.simulator import simulate
from remat_theory.model.solution import (CLASS_ALL, FEASIBLE, INFEASIBLE, OPTIMAL, TIME_LIMIT,
                                         Solution)

from solvers import exhaustive
from solvers._deadline import Deadline, DeadlineExpired
from solvers.ilp import relaxation, seeds
from solvers.ilp.backends import IlpError
from solvers.ilp.min_budget import infeasible_answer
from solvers.ilp.model import binaries_bound, passes_sufficient
from solvers.ilp.options import IlpOptions
from solvers.ilp.passes import solve_passes

NAME = "ilp"
FAST = (1, True)  # passes, pairs: the fast mode of proofs/ilp.md section 5


def reaches(lb: relaxation.Bound, makespan: float, chain: Chain) -> bool:
    """Whether the relaxation's proven bound is the makespan (the registry's float tolerance).
    A bound above the makespan of a valid schedule, or a proof of infeasibility next to one,
    would contradict Theorem 3: that is an error, never an answer."""
    tol = 1e-9 * max(1.0, chain.ideal_makespan())
    if lb.infeasible or (lb.value is not None and lb.value > makespan + tol):
        raise IlpError(f"ilp: the moment relaxation ({lb.as_info()}) contradicts a valid "
                       f"schedule of makespan {makespan}")
    return lb.value is not None and lb.value >= makespan - tol


def certify_answer(chain: Chain, budget: int, sol: Solution, opts: IlpOptions,
                   deadline: Deadline) -> Solution:
    """``sol`` (optimal for its class) made optimal over all schedules when the moment
    relaxation reaches its makespan; otherwise unchanged, with what the bound proved."""
    try:
        lb = relaxation.lower_bound(chain, budget, schedule=sol.schedule,
                                    time_limit=deadline.remaining(0.01),
                                    mip_solver=opts.mip_solver, threads=opts.threads)
    except DeadlineExpired:
        return sol.replace(wall_time=deadline.elapsed())
    info = dict(sol.info, relaxation=lb.as_info())
    if reaches(lb, sol.makespan, chain):
        info["certificate"] = "moment relaxation"
        return sol.replace(optimal_for=CLASS_ALL, info=info, wall_time=deadline.elapsed(),
                           message="proven optimal over all schedules (the moment relaxation "
                                   "reaches the makespan)")
    return sol.replace(info=info, wall_time=deadline.elapsed())


def _proven(chain, schedule, budget, lb, how, info, deadline) -> Solution:
    """``schedule`` (the ``(schedule, makespan, source)`` in hand) proven optimal."""
    schedule, makespan, source = schedule
    sim = simulate(chain, schedule, budget)
    if not math.isclose(sim.makespan, makespan, rel_tol=1e-9, abs_tol=1e-9):
        raise IlpError(f"ilp: the {source} schedule's makespan {makespan} differs from the "
                       f"simulated {sim.makespan}")
    info = dict(info, certificate=how, incumbent_from=source)
    return Solution(NAME, OPTIMAL, schedule, sim.makespan, sim.peak_memory, budget,
                    bound=sim.makespan, optimal_for=CLASS_ALL, info=info,
                    wall_time=deadline.elapsed(),
                    message=f"proven optimal over all schedules: the {source} schedule reaches "
                            f"the {how}'s lower bound")


def certified(chain: Chain, budget: int, opts: IlpOptions, deadline: Deadline,
              too_big: str | None) -> Solution:
    """The default exact mode: weak DP, moment relaxation, fast mode, and the proven model
    only when the cheaper steps leave a gap.  ``too_big``: why the proven model is not built
    (None: it is).  Under a time limit, a step that cannot finish leaves the best schedule
    in hand with the best bound proven (status ``time_limit``)."""
    info = {"solver": opts.mip_solver, "passes": None, "pairs": opts.pairs, "certify": True}
    if budget < chain.x_size[0]:
        return certified_infeasible(chain, budget, opts, deadline, info, too_big)
    best = seeds.incumbent(chain, budget, True, deadline)  # (schedule, makespan, source)
    lower = None
    try:
        deadline.check("finding a starting schedule")
        lb = relaxation.lower_bound(chain, budget, schedule=best[0],
                                    time_limit=deadline.remaining(0.01),
                                    mip_solver=opts.mip_solver, threads=opts.threads)
        info["relaxation"] = lb.as_info()
        if lb.infeasible and best[0] is None:
            return certified_infeasible(chain, budget, opts, deadline, info, too_big)
        if best[0] is not None and reaches(lb, best[1], chain):
            return _proven(chain, best, budget, lb, "moment relaxation", info, deadline)
        lower = lb.value
        found = _exhaustive(chain, budget, deadline, info)
        if found is NO_SCHEDULE:
            return _exhaustive_infeasible(chain, budget, info, deadline, "exhaustive search")
        if found is not None:
            if best[0] is not None and _same(found[1], best[1], chain):
                found = best  # the schedule in hand was optimal: keep it (the DP's form)
            return _proven(chain, found, budget, lb, "exhaustive search", info, deadline)
        best = _fast_mode(chain, budget, opts, deadline, best, info)
        if best[0] is not None and reaches(lb, best[1], chain):
            return _proven(chain, best, budget, lb, "moment relaxation", info, deadline)
    except DeadlineExpired as e:
        return _unproven(chain, budget, best, lower, info, deadline, e.what, True)
    if too_big is None:
        sol = solve_passes(chain, budget, None, opts.pairs, opts.mip_solver, opts.warm_start,
                           opts.threads, deadline, seed=best if best[0] is not None else None,
                           lower=lower)
        merged = dict(info, **sol.info)
        merged["certificate"] = "proven model" if sol.status in (OPTIMAL, INFEASIBLE) else None
        return sol.replace(info=merged, wall_time=deadline.elapsed())
    if best[0] is None:
        raise SolverLimitError(f"{too_big}; the moment relaxation does not prove the budget "
                               f"infeasible and neither the weak DP nor the fast mode found a "
                               f"schedule", solver="ilp",
                               remedies=(Remedy(options=(("max_binaries", AT_LEAST, binaries_bound(
                                   chain, opts.passes, opts.pairs)),),
                                                note="to search all schedules"),))
    if deadline.expired():
        return _unproven(chain, budget, best, lower, info, deadline,
                         "solving the moment relaxation", True)
    return _unproven(chain, budget, best, lower, info, deadline,
                     "the moment relaxation stops below it and the proven model is too large",
                     False)


def _exhaustive(chain, budget, deadline, info):
    """Exhaustive search (:mod:`solvers.exhaustive`, A* over the simulator's own states) on
    chains within its own stage guard (``exhaustive.DEFAULT_MAX_STAGES``): there it proves
    the optimum over all schedules in well under a second, where the proven time-expanded
    model can take minutes (``benchmarks/bench_ilp.py small-dispatch``).  Returns the
    ``(schedule, makespan, source)`` it proves optimal, or None when the chain is longer,
    the search stops (time limit or its state limit: the next steps then run as before),
    and :data:`NO_SCHEDULE` when it proves that no schedule fits (the relaxation is weaker
    than the search: it may leave an infeasible budget open)."""
    if chain.length > exhaustive.DEFAULT_MAX_STAGES:
        return None
    t0 = deadline.elapsed()
    schedule, makespan, _, _, proven = exhaustive.search(
        chain, budget, time_limit=deadline.remaining(0.01),
        max_states=exhaustive.DEFAULT_MAX_STATES)
    info["exhaustive"] = {"proven": proven, "makespan": makespan,
                          "wall_time": round(deadline.elapsed() - t0, 3)}
    deadline.check("exhaustive search")
    if schedule is None:
        return NO_SCHEDULE if proven else None
    return schedule, makespan, "exhaustive search"


NO_SCHEDULE = "no schedule"  # _exhaustive's proof that none fits


def _exhaustive_infeasible(chain, budget, info, deadline, how) -> Solution:
    """No schedule fits (proven by ``how``) on a chain within exhaustive search's stage
    guard: the smallest feasible budget by its bottleneck search (exact over all schedules,
    its work independent of the sizes: the min-budget MILP took the whole time limit on
    5-stage chains whose sizes have no common factor)."""
    mb = exhaustive.min_feasible_budget(chain)
    info = dict(info, certificate=how, min_budget_by="exhaustive search (bottleneck)")
    return Solution(NAME, INFEASIBLE, None, None, None, budget, optimal_for=CLASS_ALL,
                    min_budget=mb, info=info, wall_time=deadline.elapsed(),
                    message=f"no schedule fits in {budget}; the smallest feasible budget is "
                            f"{mb}")


def _same(a: float, b: float, chain: Chain) -> bool:
    """Two makespans equal within the registry's float tolerance."""
    return abs(a - b) <= 1e-9 * max(1.0, chain.ideal_makespan())


def _fast_mode(chain, budget, opts, deadline, best, info):
    """The fast mode's optimum from ``best``; returns the better of the two (a schedule in
    hand is never lost).  Skipped when its model is above ``max_binaries``."""
    size = binaries_bound(chain, *FAST)
    if size > opts.helper_cap:
        info["fast_mode"] = {"status": "not built", "binaries": size}
        return best
    fast = solve_passes(chain, budget, *FAST, opts.mip_solver, opts.warm_start, opts.threads,
                        deadline, seed=best if best[0] is not None else None)
    info["fast_mode"] = {"status": fast.status, "makespan": fast.makespan,
                         "wall_time": round(fast.wall_time, 3)}
    if fast.schedule is not None and (best[0] is None or fast.makespan < best[1]):
        best = (fast.schedule, fast.makespan, "ilp passes=1 pairs=True")
    deadline.check("solving the fast mode")
    return best


def _unproven(chain, budget, best, lower, info, deadline, why, timed_out) -> Solution:
    """The best schedule in hand, not proven optimal, with the best bound proven: status
    ``time_limit`` when the limit stopped the run (``why``: the step it stopped),
    ``feasible`` when the proven model is too large to close the gap the bound leaves."""
    info["certificate"] = None
    bound = chain.ideal_makespan() if lower is None else max(lower, chain.ideal_makespan())
    if best[0] is None:
        return Solution(NAME, TIME_LIMIT, None, None, None, budget, bound=bound,
                        optimal_for=CLASS_ALL, info=info, wall_time=deadline.elapsed(),
                        message=f"time limit reached with no schedule found (stopped while "
                                f"{why}); bound {bound}")
    info["incumbent_from"] = best[2]
    sim = simulate(chain, best[0], budget)
    bound = min(bound, sim.makespan)
    reason = f"time limit, stopped while {why}" if timed_out else why
    return Solution(NAME, TIME_LIMIT if timed_out else FEASIBLE, best[0], sim.makespan,
                    sim.peak_memory, budget, bound=bound, optimal_for=CLASS_ALL, info=info,
                    wall_time=deadline.elapsed(),
                    message=f"not proven optimal ({reason}): bound {bound}, makespan "
                            f"{sim.makespan}")


def certified_infeasible(chain: Chain, budget: int, opts: IlpOptions, deadline: Deadline,
                         info: dict, too_big: str | None) -> Solution:
    """No schedule fits (proven by the relaxation, or below x_0): the smallest budget, by the
    proven min-budget model where it is affordable, else between the min-budget relaxation's
    bound and the weak DP's / fast mode's smallest budget."""
    how = "moment relaxation" if "relaxation" in info else "budget below x_0"
    if chain.length <= exhaustive.DEFAULT_MAX_STAGES:
        return _exhaustive_infeasible(chain, budget, info, deadline, how)
    if too_big is None:
        try:
            sol = infeasible_answer(chain, budget, passes_sufficient(chain), False,
                                    opts.mip_solver, opts.threads, deadline, dict(info),
                                    CLASS_ALL)
        except DeadlineExpired as e:
            return _infeasible_stopped(chain, budget, info, deadline, e.what, how)
        return sol.replace(info=dict(sol.info, certificate=how))
    low = relaxation.min_budget_bound(chain, time_limit=deadline.remaining(0.01),
                                      mip_solver=opts.mip_solver, threads=opts.threads)
    ups = []
    weak = seeds.smallest_weak_schedule(chain, deadline)  # replayed: its peak is a fact
    if weak is not None:
        ups.append(simulate(chain, weak).peak_memory)
    fast = solve_passes(chain, 0, *FAST, opts.mip_solver, True, opts.threads, deadline)
    if fast.min_budget is not None:
        ups.append(fast.min_budget)
    found = min(ups, default=None)
    info = dict(info, certificate=how)
    msg = f"no schedule fits in {budget}"
    mb = None
    if found is not None and low is not None and low >= found:
        mb = found
        msg += f"; the smallest feasible budget is {mb}"
    elif found is not None:
        lowb = max(budget + 1, low or 0)
        info["min_budget_found"], info["min_budget_bound"] = found, lowb
        msg += (f"; a schedule fits in {found}, not proven the smallest: the smallest "
                f"feasible budget is between {lowb} and {found}")
    return Solution(NAME, INFEASIBLE, None, None, None, budget, optimal_for=CLASS_ALL,
                    min_budget=mb, info=info, wall_time=deadline.elapsed(), message=msg)


def _infeasible_stopped(chain, budget, info, deadline, what, how) -> Solution:
    """The budget is proven infeasible, but the time limit stopped the search for the
    smallest feasible one."""
    info = dict(info, certificate=how)
    return Solution(NAME, INFEASIBLE, None, None, None, budget, optimal_for=CLASS_ALL,
                    info=info, wall_time=deadline.elapsed(),
                    message=f"no schedule fits in {budget}; the smallest feasible budget was "
                            f"not found before the time limit ({what})")
