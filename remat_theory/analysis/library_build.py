"""Building library instances: budgets from the smallest feasible to store-all, and each
instance solved for its best known schedule and proved lower bound.

What proves a bound (over every schedule of the canonical model, class ``all``):

- the store-all makespan: no valid schedule is shorter (every stage records its tape at
  least once and every backward runs once: proofs/model.md), so at a budget where store-all
  fits it is the optimum, a closed form;
- an exact solver's answer whose class contains ``all`` (``exhaustive``, ``prove``, ``ilp``):
  its optimum, or at a time limit the bound it proved;
- a certificate's recorded optimum over ``all``, replayed through the simulator and solved
  again by the recorded solver (:func:`remat_theory.analysis.certificates.reprove`).

Every schedule comes from :func:`solvers.solve`, which replays it through the simulator.
The generator is ``benchmarks/build_library.py``; this module holds what it shares with the
tests.
"""
from __future__ import annotations

import math
import time

import solvers
from remat_theory.analysis.library import OPEN, OPTIMAL, same
from remat_theory.model import classes, fields
from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError, SolverContractError
from remat_theory.model.schedule import Schedule
from remat_theory.model.simulator import simulate
from solvers.feasibility import LOWER_BOUND, smallest_feasible_budget

STORE_ALL_BOUND = "store-all makespan (closed form, proofs/model.md)"
#: exact solvers tried in this order, by chain length (the first that proves stops it)
EXACT_SHORT = ("exhaustive", "prove")  # up to EXHAUSTIVE_MAX stages
EXACT_LONG = ("prove", "ilp")
EXHAUSTIVE_MAX = 8
#: schedules tried for the best known makespan where no exact solver proves one: the class
#: DPs at exact memory, then (sizes too fine for their tables) with sizes rounded up to slots
UPPER = (("dp-weak", {}), ("dp", {}), ("dp", {"slots": 2000}), ("dp-weak", {"slots": 1000}))
#: classes whose proved bound is a bound over every canonical schedule (they contain ``all``)
CONTAINS_ALL = tuple(c.key for c in classes.RANKED if classes.subset(classes.ALL.key, c.key))

__all__ = ["store_all_tokens", "store_all_makespan", "budget_ladder", "solve_instance",
           "instance_record", "variations_of", "STORE_ALL_BOUND"]


def store_all_tokens(chain: Chain) -> list:
    L = chain.length
    return [f"Fall{i}" for i in range(L)] + ["Loss"] + [f"B{i}" for i in reversed(range(L))]


def store_all_makespan(chain: Chain) -> float:
    """The makespan of store-all: a lower bound on every valid schedule's."""
    return simulate(chain, Schedule(store_all_tokens(chain)), None).makespan


def _fits(chain: Chain, budget: int) -> bool:
    """A schedule is found at ``budget`` by the persistent DP with sizes rounded up to
    slots (the fast one of the two slot DPs: 0.5 s at 80 stages where the weak one takes 15)."""
    name, opts = UPPER[2]
    try:
        return solvers.solve(chain, budget, name, **opts).schedule is not None
    except (RematError, SolverContractError, MemoryError):
        return False


def smallest_found(chain: Chain) -> tuple[int, str]:
    """``(budget, source)``: the smallest feasible budget where it is known (exhaustive
    search, or the smallest budget of the weak DP's or the DP's class: a schedule exists
    there); else, where the class DPs' tables are too large, the smallest budget at which
    the DPs with sizes rounded up to slots find a schedule (bisection between the memory
    lower bound and store-all): a budget where a schedule exists, not a proved minimum."""
    m, source = smallest_feasible_budget(chain)
    top = chain.store_all_memory()
    if source != LOWER_BOUND or _fits(chain, m):
        return min(m, top), source
    lo, hi = m, top  # lo: no schedule found; hi: store-all fits
    while hi - lo > max(1, top // 2_000):
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if _fits(chain, mid) else (mid, hi)
    return hi, "bisection with the slot DP (within 0.05% of store-all)"


def budget_ladder(chain: Chain, fractions=(0.0, 0.15, 0.45, 1.0)) -> tuple[list, str]:
    """``(budgets, source)``: the smallest feasible budget ``m`` (:func:`smallest_found`;
    ``source`` says how it is known) and ``m + f (store_all - m)`` for each fraction
    ``f``, distinct and increasing."""
    m, source = smallest_found(chain)
    top = chain.store_all_memory()
    return sorted({m + int(round((top - m) * f)) for f in fractions}), source


def _bound_of(sol) -> float | None:
    """The bound over every canonical schedule that ``sol`` proves, or None."""
    over = (sol.info or {}).get("bound_over") or sol.optimal_for
    if over not in CONTAINS_ALL or sol.bound is None or not math.isfinite(sol.bound):
        return None
    return float(sol.bound)


def solve_instance(chain: Chain, budget: int, time_limit: float, log=None) -> dict:
    """Best known schedule and proved bound of ``(chain, budget)`` within about
    ``time_limit`` seconds per exact solver: a dict ``best`` (makespan, solver, schedule
    tokens), ``bound`` (value, solver) and ``status``."""
    best = None  # (makespan, solver, tokens)
    lb, lb_solver = store_all_makespan(chain), STORE_ALL_BOUND

    def offer(sol, label):
        nonlocal best, lb, lb_solver
        if sol.schedule is not None and (best is None or sol.makespan < best[0]
                                         and not same(sol.makespan, best[0])):
            best = (float(sol.makespan), label, sol.schedule.tokens())
        b = _bound_of(sol)
        if b is not None and b > lb and not same(b, lb):
            lb, lb_solver = b, label

    def closed():
        return best is not None and (same(best[0], lb) or best[0] < lb)

    if budget >= chain.store_all_memory():
        offer(solvers.solve(chain, budget, "store-all"), "store-all")
    exact = EXACT_SHORT if chain.length <= EXHAUSTIVE_MAX else EXACT_LONG
    for name in exact:
        if closed():
            break
        opts = {"time_limit": time_limit}
        if name == "exhaustive":
            opts["max_stages"] = max(EXHAUSTIVE_MAX, chain.length)
        t0 = time.perf_counter()
        try:
            sol = solvers.solve(chain, budget, name, **opts)
        except (RematError, SolverContractError, MemoryError) as e:
            if log:
                log(f"  {name}: {type(e).__name__}: {str(e)[:120]}")
            continue
        if log:
            log(f"  {name}: {sol.status} {sol.makespan} bound {sol.bound} "
                f"({time.perf_counter() - t0:.1f} s)")
        offer(sol, name)
    by_class_dp = False  # the slot DPs only where the DPs at exact memory found nothing
    for name, opts in UPPER:
        if closed() or (opts and by_class_dp):
            break
        label = " ".join([name] + [f"{k}={v}" for k, v in opts.items()])
        try:
            sol = solvers.solve(chain, budget, name, time_limit=time_limit, **opts)
        except (RematError, SolverContractError, MemoryError):
            continue
        offer(sol, label)
        by_class_dp = by_class_dp or (not opts and sol.schedule is not None)
    if best is None:
        raise RematError(f"no schedule found for {chain.name} at budget {budget}")
    if best[0] < lb and not same(best[0], lb):  # a schedule below a proved bound: a bug
        raise SolverContractError(f"{chain.name} at {budget}: {best[1]}'s makespan {best[0]} is "
                                  f"below the bound {lb} proved by {lb_solver}")
    status = OPTIMAL if same(best[0], lb) else OPEN
    if status == OPTIMAL:
        lb = best[0]  # equal up to float order: record the schedule's own sum
    return {"best": {"makespan": best[0], "solver": best[1], "schedule": best[2]},
            "bound": {"value": lb, "solver": lb_solver}, "status": status}


def variations_of(chain: Chain) -> list:
    """The variations (:data:`remat_theory.model.fields.VARIATIONS`: ``fall-costs``,
    ``unsaved-outputs``, ...) whose fields ``chain`` gives values of its own."""
    used = set(chain.fields_used())
    return [name for name, v in fields.VARIATIONS.items() if used & set(v.fields)]


def instance_record(iid: str, cls: str, chain: Chain, budget: int, solved: dict,
                    source: str = "") -> dict:
    """The library record of one solved instance (:mod:`remat_theory.analysis.library`)."""
    return {"id": iid, "class": cls, "source": source, "chain": chain.to_dict(),
            "budget": int(budget), "variations": variations_of(chain), "model": {},
            **solved}
