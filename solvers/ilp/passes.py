"""Solving the K-pass time-expanded model: warm starts, the MIP solve, decoding, and the
honest status (proofs/ilp.md sections 3-8).

``passes=None`` is the proven number of passes (exact over all schedules, Theorem 1);
``passes=K`` with ``pairs`` is exactly the class of at most K weakly increasing runs per
phase (Theorem 2'), without pairs at most K strictly increasing runs (Theorem 2).
"""
from __future__ import annotations

import math
import time

from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError
from remat_theory.model.simulator import simulate
from remat_theory.model.solution import CLASS_ALL, OPTIMAL, TIME_LIMIT, Solution

from solvers._deadline import Deadline, DeadlineExpired
from solvers.ilp import backends, seeds
from solvers.ilp.backends import IlpError
from solvers.ilp.min_budget import infeasible_answer
from solvers.ilp.model import build_model, decode, encode, passes_sufficient

NAME = "ilp"


def class_of(K: int, pairs: bool, exact_all: bool) -> str:
    """The schedule class the K-pass model is exact for."""
    return CLASS_ALL if exact_all else (f"weak-runs<={K}" if pairs else f"runs<={K}")


def staged_incumbent(chain: Chain, budget: int, solver: str, threads: int, deadline: Deadline,
                     info: dict):
    """A warm start for a model with more passes: the optimum (or the incumbent at its time
    limit) of two weakly increasing runs per phase, a class the larger model contains, as
    ``(schedule, makespan)`` or ``(None, None)``.  It is found in about a second where the
    larger model is used (a few stages); it can be strictly better than the weak DP's
    schedule, and it can exist where no DP schedule fits (proofs/ilp.md section 8)."""
    cap = deadline.share(seeds.STAGED_SHARE, seeds.STAGED_CAP)
    try:
        sub = solve_passes(chain, budget, seeds.STAGED_PASSES, True, solver, True, threads,
                           Deadline(cap))
    except (RematError, DeadlineExpired):  # e.g. its own share of the time ran out
        return None, None
    info["staged"] = {"passes": seeds.STAGED_PASSES, "pairs": True, "status": sub.status,
                      "makespan": sub.makespan, "wall_time": round(sub.wall_time, 3)}
    return sub.schedule, sub.makespan


def stopped(chain: Chain, budget: int, schedule, lower: float | None, info: dict, cls: str,
            t0: float, what: str) -> Solution:
    """The answer when the time limit stops a run before its MILP could decide: the schedule
    in hand (None if none) and the best proven bound (at least the ideal makespan, which
    every schedule pays), status ``time_limit``, never optimal."""
    info["solver_status"] = f"not run: the time limit was reached while {what}"
    bound = chain.ideal_makespan() if lower is None else max(lower, chain.ideal_makespan())
    if schedule is None:
        return Solution(NAME, TIME_LIMIT, None, None, None, budget, bound=bound,
                        optimal_for=cls, info=info, wall_time=time.perf_counter() - t0,
                        message=f"time limit reached with no schedule found ({what}); "
                                f"bound {bound}")
    sim = simulate(chain, schedule, budget)
    bound = min(bound, sim.makespan)
    return Solution(NAME, TIME_LIMIT, schedule, sim.makespan, sim.peak_memory, budget,
                    bound=bound, optimal_for=cls, info=info, wall_time=time.perf_counter() - t0,
                    message=f"time limit: not proven optimal ({what}): bound {bound}, "
                            f"makespan {sim.makespan}")


def solve_passes(chain: Chain, budget: int, passes: int | None, pairs: bool, solver: str,
                 warm_start: bool, threads: int, deadline: Deadline, seed=None,
                 lower: float | None = None) -> Solution:
    """The K-pass model (``passes=None``: the proven number) under ``deadline``.  ``seed``:
    the ``(schedule, makespan, source)`` to start from instead of solving the DPs again
    (the caller's best schedule so far); ``lower``: a proven lower bound on the optimum
    (the moment relaxation's), added as a cut on the objective."""
    t0 = time.perf_counter()
    g = chain.size_gcd()
    sc = chain.scaled_sizes(g)
    K = passes_sufficient(chain) if passes is None else passes
    exact_all = K >= passes_sufficient(chain)
    cls = class_of(K, pairs, exact_all)
    info = {"solver": solver, "passes": K, "pairs": pairs, "gcd": g, "allow_drop": False}
    warm = None
    try:
        if budget < chain.x_size[0]:
            return infeasible_answer(chain, budget, K, pairs, solver, threads, deadline, info,
                                     cls)
        if warm_start:
            # the caller's seed already is the best of the DPs' schedules (no second DP solve)
            sched, ms, src = seed if seed is not None else \
                seeds.incumbent(chain, budget, True, deadline)
            if seeds.staged(K, pairs, exact_all):
                sub, sub_ms = staged_incumbent(chain, budget, solver, threads, deadline, info)
                if sub is not None and (ms is None or sub_ms < ms):
                    sched, ms, src = sub, sub_ms, f"ilp passes={seeds.STAGED_PASSES} pairs=True"
            if sched is not None:
                warm = sched
                info["warm_start"], info["incumbent"] = src, ms
        model = build_model(sc, budget // g, K, pairs=pairs, deadline=deadline)
        deadline.check("starting the MIP solve")
    except DeadlineExpired as e:
        return stopped(chain, budget, warm, lower, info, cls, t0, e.what)
    start = None
    if warm is not None:
        start = encode(model, warm)
        if start is None:
            info["warm_start"] = f"{info['warm_start']} (does not fit the passes)"
    return _solve_built(chain, budget, model, start, warm, lower, solver, threads, deadline,
                        info, cls, exact_all, t0)


def _solve_built(chain, budget, model, start, warm, lower, solver, threads, deadline, info,
                 cls, exact_all, t0) -> Solution:
    """Run the built K-pass ``model`` and read its answer (``warm``: the warm start's
    schedule, the incumbent when the solver has nothing better)."""
    K, pairs = model.passes, model.pairs
    scale = max(1.0, chain.ideal_makespan())
    if lower is not None:
        # a proven lower bound on every schedule: a valid cut (it is no normal-form argument)
        model.prob += model.prob.objective >= lower - model.constant - 1e-9 * scale, "relaxation"
        info["relaxation_cut"] = lower
    info["variables"] = len(model.prob.variables())
    info["constraints"] = model.prob.numConstraints()
    res = backends.run_model(model, solver, deadline.remaining(0.01), start, threads, scale)
    info["solver_status"] = res.status_text
    if res.retries:  # a back end failed and another answered (backends.ATTEMPTS)
        info["mip_backend"] = res.backend
        info["mip_retries"] = list(res.retries)
    if res.infeasible:
        try:
            return infeasible_answer(chain, budget, K, pairs, solver, threads, deadline, info,
                                     cls)
        except DeadlineExpired as e:
            return stopped(chain, budget, None, lower, info, cls, t0, e.what)
    if not res.has_solution and warm is None:
        bound = chain.ideal_makespan() if res.bound is None else max(res.bound, chain.ideal_makespan())
        return Solution(NAME, TIME_LIMIT, None, None, None, budget, bound=bound,
                        optimal_for=cls, info=info, wall_time=time.perf_counter() - t0,
                        message=f"time limit reached with no schedule found ({res.status_text})")
    if res.has_solution and (res.proven or warm is None or res.objective <= info["incumbent"]):
        schedule = decode(model)
    else:
        # Stopped (time limit) with nothing better than the warm start, or before loading it
        # (CBC may also reject a start that sets only the binaries): the warm start, a valid
        # schedule, is the incumbent.
        schedule = warm
        res.objective = info["incumbent"]
        info["incumbent_from"] = "warm start"
    try:
        sim = simulate(chain, schedule, budget)
    except RematError as e:
        raise IlpError(f"ilp: the decoded MILP solution is not a valid schedule ({e}); "
                       f"solver status {res.status_text}") from None
    if not math.isclose(sim.makespan, res.objective, rel_tol=1e-7, abs_tol=1e-7):
        raise IlpError(f"ilp: the MILP objective {res.objective} differs from the decoded "
                       f"schedule's makespan {sim.makespan}")
    # Every schedule runs each operation at least once: the ideal makespan is a bound even
    # when the solver stopped before proving one.
    bound = chain.ideal_makespan() if res.bound is None else max(res.bound, chain.ideal_makespan())
    if lower is not None:
        bound = max(bound, lower)
    bound = min(bound, sim.makespan)
    info["mip_gap"] = max(0.0, (sim.makespan - bound) / sim.makespan) if sim.makespan else 0.0
    status = OPTIMAL if res.proven else TIME_LIMIT
    if status == OPTIMAL:
        bound = sim.makespan if bound is None else bound
    msg = "proven optimal" if status == OPTIMAL else \
        f"time limit: not proven optimal (bound {bound}, makespan {sim.makespan})"
    if status == OPTIMAL and not exact_all:
        msg += (f" among schedules with at most {K} {'weakly ' if pairs else ''}increasing "
                f"forward runs per phase")
    return Solution(NAME, status, schedule, sim.makespan, sim.peak_memory, budget, bound=bound,
                    optimal_for=cls, info=info, wall_time=time.perf_counter() - t0, message=msg)
