"""Infeasible budgets: the smallest feasible budget, from the min-budget variant of the
time-expanded model (the budget an integer variable, minimized).

Every peak is a multiple of the sizes' gcd g and the budget asked for is proven infeasible,
so a schedule found at the first multiple of g above it proves the smallest budget even
when the solver stops at its time limit; otherwise an unproven answer is reported as found
(``info["min_budget_found"]``) with its lower bound, never as ``min_budget``.
"""
from __future__ import annotations

import math
import time

from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError
from remat_theory.model.simulator import simulate
from remat_theory.model.solution import INFEASIBLE, Solution

from solvers._deadline import Deadline
from solvers.ilp import backends, seeds
from solvers.ilp.backends import IlpError
from solvers.ilp.model import Model, build_model, decode, encode, passes_sufficient

NAME = "ilp"


def _seed(chain: Chain, model: Model, sched, g: int) -> dict | None:
    """The MIP start of the min-budget ``model`` for ``sched``: its operations, and its peak
    (in units of g) as the budget."""
    start = encode(model, sched) if sched is not None else None
    if start is not None:
        start["budget"] = -(-simulate(chain, sched).peak_memory // g)
    return start


def _staged_seed(chain: Chain, sc: Chain, g: int, sched, solver: str, threads: int,
                 deadline: Deadline, info: dict):
    """The smallest budget of two weakly increasing runs per phase (a class the larger model
    contains), solved within :data:`~solvers.ilp.seeds.STAGED_CAP` seconds: its schedule
    when it beats ``sched``."""
    cap = deadline.share(seeds.STAGED_SHARE, seeds.STAGED_CAP)
    sub = build_model(sc, None, seeds.STAGED_PASSES, name="remat_min_budget_staged",
                      pairs=True, deadline=deadline)
    ts = time.perf_counter()
    r2 = backends.run_model(sub, solver, cap, _seed(chain, sub, sched, g), threads, 1.0)
    if not r2.has_solution:
        return sched
    two = decode(sub)
    try:
        peak = simulate(chain, two).peak_memory
    except RematError as e:
        raise IlpError(f"ilp: the decoded min-budget solution is not a valid schedule "
                       f"({e}); solver status {r2.status_text}") from None
    info["staged_min_budget"] = {"passes": seeds.STAGED_PASSES, "pairs": True,
                                 "proven": r2.proven, "budget": peak,
                                 "wall_time": round(time.perf_counter() - ts, 3)}
    if sched is None or peak < simulate(chain, sched).peak_memory:
        return two
    return sched


def infeasible_answer(chain: Chain, budget: int, K: int, pairs: bool, solver: str,
                      threads: int, deadline: Deadline, info: dict, cls: str) -> Solution:
    """Infeasible budget: the smallest feasible budget, by the min-budget MILP with K passes.

    Seeds: the weak DP's schedule at its own smallest budget (else store-all), and, for the
    models seeded from two weakly increasing runs per phase, that class's smallest budget
    and schedule.  A :class:`~solvers._deadline.DeadlineExpired` raised while a model is
    built goes to the caller."""
    g = chain.size_gcd()
    sc = chain.scaled_sizes(g)
    sched = seeds.smallest_weak_schedule(chain, deadline)
    if sched is None:
        sched, _, _ = seeds.incumbent(chain, 10 ** 18, False)
    if seeds.staged(K, pairs, K >= passes_sufficient(chain)):
        sched = _staged_seed(chain, sc, g, sched, solver, threads, deadline, info)
    model = build_model(sc, None, K, name="remat_min_budget", pairs=pairs, deadline=deadline)
    start = _seed(chain, model, sched, g)
    res = backends.run_model(model, solver, deadline.remaining(0.01), start, threads, 1.0)
    above = (budget // g + 1) * g  # the smallest budget that might still be feasible
    # the smallest budget known to fit: the solver's, or its start's (CBC may drop a start)
    known = [start["budget"] * g] if start is not None else []
    if res.has_solution:
        known.append(int(round(model.budget_var.varValue)) * g)
    found = min(known, default=None)
    mb = found if found is not None and (res.proven or found == above) else None
    msg = f"no schedule fits in {budget}"
    if mb is not None:
        msg += f"; the smallest feasible budget is {mb}"
    elif found is not None:
        low = above
        if res.bound is not None and math.isfinite(res.bound):
            low = max(low, math.ceil(res.bound - model.constant - 1e-9) * g)
        info["min_budget_found"], info["min_budget_bound"] = found, low
        msg += (f"; a schedule fits in {found}, not proven the smallest (time limit): the "
                f"smallest feasible budget is between {low} and {found}")
    return Solution(NAME, INFEASIBLE, None, None, None, budget, optimal_for=cls, min_budget=mb,
                    info=info, wall_time=deadline.elapsed(), message=msg)
