"""``auto``: the best exact answer the chain's size allows within a time budget.

``remat solve`` uses it when no solver is named.  It picks one exact solver from the
chain's length L and its memory resolution M (the budget, capped at store-all's peak, in
units of the sizes' gcd), using the solvers' stated complexities and speeds measured on
this project's benchmark chains (``remat bench solvers``), and returns that solver's answer
unchanged except for ``info["answered_by"]`` and a message saying who answered and why:

1. ``store-all`` when the budget holds every tape (its makespan is then the optimum over all
   schedules: nothing is recomputed);
2. ``ilp`` (its certified default, optimal over all schedules when it proves it) when
   L <= :data:`ILP_MAX_STAGES` and the weak DP it starts from fits the time budget: on
   random and family chains of 20-30 stages it proves middle budgets in seconds;
3. else ``dp-weak`` (optimal among weakly persistent schedules) when its O(L^4 M) table fits;
4. else ``dp`` (optimal among persistent schedules) in exact memory when its O(L^3 M) table
   fits, else with ``slots`` chosen so that it fits (status ``feasible``: optimal for the
   rounded sizes only);
5. else, when not even the slot DP fits (thousands of stages), the best of the fast
   baselines (status ``feasible``, no optimality claim), and the message says so.

A chain with a ``bandwidth`` (a copy channel to the host) takes its own route after step 1:
``exhaustive-offload`` on tiny chains, the offload ILP where it proves its answer, the
offload DP otherwise, compared with remat alone (``solvers/offload/auto.py``).

Sizes with no common factor make M large (millions of units for sizes in bytes): the DPs'
tables grow with M, exhaustive search's work does not.  On chains within exhaustive
search's stage guard whose weak DP does not fit, exhaustive search is tried first.

``status``, ``bound`` and ``optimal_for`` are those of the solver that answered: what it
proved, for its class.  When the ILP stops at the time limit without a schedule, the DPs
are tried with the time left.

Never a false "infeasible".  A DP that finds no schedule proves only that none of *its
class* fits, and a class's smallest budget can exceed the global one (docs/solvers.md).
So an answer ``infeasible`` for a class is passed on only after a solver whose answer
covers all schedules decided the budget (:func:`decide_all`): the memory lower bound
(:meth:`Chain.memory_lower_bound`: below it nothing fits), exhaustive search within its
stage guard, then the ILP (its smallest-budget MILP at an infeasible budget).  When none
decides in the time left, the answer is ``time_limit`` with no schedule ("not decided"),
never ``infeasible``; ``info["class_min_budget"]`` keeps the class's smallest budget, a
budget at which a schedule exists.

What each solver proved is in ``info["proofs"]`` (one entry per solver that ran: its name,
status, class and smallest budget), and the message names the solver that answered.
``time_limit`` (seconds, default :data:`DEFAULT_TIME_LIMIT`) is the budget for the whole
call; it is passed on to every solver that takes one, and the estimates below decide what
is attempted.
"""
from __future__ import annotations

import math
import time

from remat_theory.model.chain import Chain
from remat_theory.model.errors import (AT_LEAST, RematError, Remedy, SolverContractError,
                                       SolverError, SolverLimitError)
from remat_theory.model.solution import CLASS_ALL, CLASS_NONE, FEASIBLE, INFEASIBLE, Solution

from remat_theory.model import classes

from solvers import registry
from solvers._deadline import Deadline
from solvers.exhaustive import DEFAULT_MAX_STAGES as EXHAUSTIVE_MAX_STAGES
from solvers.registry import Option, register

DEFAULT_TIME_LIMIT = 60.0
#: The certified ILP is tried up to this many stages (proofs in seconds on 20-30 stages).
ILP_MAX_STAGES = 30
#: Cost model of the DPs, fitted to timings of ``dp-weak`` and ``dp`` on random, family and
#: homogeneous chains (one core, 20-2,000 stages): seconds = cells * (CELL_S + M * UNIT_S),
#: with about L^4 / 24 cells for ``dp-weak`` and L^3 / 6 for ``dp``, M the memory units (or
#: slots).  A cell has a fixed numpy overhead besides its M-long row.  The constants sit at
#: the slow end of what was measured (up to 3x over), so the estimate errs towards the cheaper
#: solver.
DP_WEAK_CELL_S, DP_WEAK_UNIT_S = 1e-5, 2.5e-7
DP_CELL_S, DP_UNIT_S = 2e-7, 1e-8
#: Largest table (bytes) auto lets a DP build: a fraction of a small machine's memory.
MAX_TABLE_BYTES = 2 * 2 ** 30
#: Fast baselines for chains too long for any exact solver in the time budget, in the
#: canonical model (no Drop), cheapest first, with their time relative to the first (their
#: replay included; fresh processes, 10,000 and 100,000 stages, a quarter of store-all, on
#: the shared 2-core machine under a load of 6: chen-sqrt 1.8-2.8e-5 s per stage, revolve
#: 1.3-2x that, periodic 2-3x, chen-greedy 5-7x).
FALLBACK = ("chen-sqrt", "chen-greedy", "periodic", "revolve")
FALLBACK_COST = {"chen-sqrt": 1.0, "chen-greedy": 6.0, "periodic": 3.0, "revolve": 2.0}
#: Seconds per stage of the cheapest baseline, its replay included: the slow end of the
#: measurements above (2.8e-5) with a margin.  When it is over the time left (and the
#: overrun allowed) auto refuses up front rather than answer past its limit; an estimate
#: below the truth is safe (the baseline honours its deadline and answers ``time_limit``).
#: The previous 3e-4 was ten times the measured cost: auto refused chains of 30,000 stages
#: at a 5 s limit that chen-sqrt answers in about a second.
FALLBACK_SECONDS_PER_STAGE = 4e-5
#: What a time limit may be overrun by (the checks of issue #29: T + 10% + 2 s).
OVERRUN_S = 2.0


def memory_units(chain: Chain, budget: int) -> int:
    """M: the budget above x_0, capped at store-all's peak, in units of the sizes' gcd."""
    g = chain.size_gcd()
    top = min(budget, chain.store_all_memory())
    return max(0, top // g - chain.x_size[0] // g)


def dp_weak_cost(L: int, M: int) -> tuple[float, int]:
    """Estimated ``(seconds, table bytes)`` of ``dp-weak`` (solvers/dp_weak.py: O(L^4 M)
    time, O(L^3 M) memory)."""
    cells = (L + 1) ** 4 / 24
    return cells * (DP_WEAK_CELL_S + M * DP_WEAK_UNIT_S), (L + 1) ** 3 // 6 * (M + 1) * 8


def dp_cost(L: int, M: int) -> tuple[float, int]:
    """Estimated ``(seconds, table bytes)`` of ``dp`` (solvers/dp.py: O(L^3 M) time,
    O(L^2 M) memory), M being the slots in the slot mode."""
    cells = (L + 1) ** 3 / 6
    return cells * (DP_CELL_S + M * DP_UNIT_S), (L + 1) * (L + 2) // 2 * (M + 1) * 8


def max_slots(L: int, seconds: float) -> int:
    """The most slots with which ``dp`` fits ``seconds`` and :data:`MAX_TABLE_BYTES` (by
    :func:`dp_cost`); 0 when not even one does."""
    cells = (L + 1) ** 3 / 6
    by_time = (seconds / cells - DP_CELL_S) / DP_UNIT_S
    by_memory = MAX_TABLE_BYTES / ((L + 1) * (L + 2) // 2 * 8) - 1
    return max(0, int(min(by_time, by_memory)))


def plan(chain: Chain, budget: int, time_limit: float) -> list[tuple[str, dict, str]]:
    """The solvers auto tries, in order: ``(name, options, why)``."""
    L, M = chain.length, memory_units(chain, budget)
    known = registry.names()
    steps = []
    weak_s, weak_b = dp_weak_cost(L, M)
    if "ilp" in known and L <= ILP_MAX_STAGES and weak_s <= time_limit / 4 \
            and weak_b <= MAX_TABLE_BYTES:
        steps.append(("ilp", {}, f"{L} stages <= {ILP_MAX_STAGES}: the certified ILP, "
                                 f"optimal over all schedules when it proves it"))
    elif "exhaustive" in known and L <= EXHAUSTIVE_MAX_STAGES:
        steps.append(("exhaustive", {},
                      f"{L} stages <= {EXHAUSTIVE_MAX_STAGES} and the DPs' tables "
                      f"({M + 1} memory units: sizes with little common factor) are large: "
                      f"exhaustive search, whose work does not grow with the sizes, optimal "
                      f"over all schedules"))
    if "dp-weak" in known and weak_s <= time_limit / 2 and weak_b <= MAX_TABLE_BYTES:
        steps.append(("dp-weak", {}, f"the weak DP's table ({L} stages x {M + 1} memory units) "
                                     f"fits the time limit"))
    if "dp" in known:
        dp_s, dp_b = dp_cost(L, M)
        if dp_s <= time_limit / 2 and dp_b <= MAX_TABLE_BYTES:
            steps.append(("dp", {}, f"the persistent DP's exact table ({L} stages x {M + 1} "
                                    f"memory units) fits the time limit"))
        else:
            slots = min(max_slots(L, time_limit / 2), M)
            if slots >= min(M, 16) and slots >= 1:
                steps.append(("dp", {"slots": slots},
                              f"the persistent DP with memory in {slots} slots (the exact "
                              f"table, {M + 1} memory units, does not fit the time limit)"))
    return steps


def _answer(sol: Solution, name: str, why: str, tried: list, time_limit: float,
            proofs: list | None = None, keep_message: bool = False) -> Solution:
    info = dict(sol.info)
    info.update(answered_by=name, auto_tried=tried, auto_time_limit=time_limit,
                proofs=list(proofs or ()))
    if keep_message:  # the message is auto's own (its status is not the solver's)
        message = f"{sol.message} (answered by {name}: {why})"
    else:
        message = f"answered by {name}: {why}" + (f"; {sol.message}" if sol.message else "")
    return sol.replace(solver="auto", info=info, message=message, wall_time=0.0)


@register("auto", optimal_for=CLASS_ALL, exact=True, delegates=True,
          description="The best exact answer within a time limit (default 60 s): store-all "
                      "when it fits, else the certified ilp up to 30 stages, else dp-weak, "
                      "else dp (slots if needed); says which solver answered and what it "
                      "proved.",
          # In a sweep, the ILP's own limit: auto runs the certified ILP on short chains.
          max_stages=4,
          # It answers with the class of the solver that answered.
          classes=(CLASS_ALL, "weakly-persistent", "persistent", classes.OFFLOAD_KEY,
                   classes.PERSISTENT_OFFLOAD_KEY),
          # every solver it may call models them (they are checked again on each call);
          # a chain with bandwidth takes the two-stream route (solvers/offload/auto.py)
          supports=("fall_time", "fall_overhead", "output_saved", "bandwidth"),
          options={"time_limit": Option("seconds", "for the whole call, passed on to every "
                                        "solver that takes one (default 60 s)", none=True)})
def solve_auto(chain: Chain, budget: int, *, time_limit: float | None = None) -> Solution:
    """The best exact answer the chain's size allows within ``time_limit`` seconds (default
    :data:`DEFAULT_TIME_LIMIT`); see the module docstring for the order tried.

    Parameters
    ----------
    chain : the chain.
    budget : memory budget, bytes.
    time_limit : seconds for the whole call, passed on to every solver that takes one.

    Returns
    -------
    Solution
        The answering solver's solution with ``solver="auto"``, ``info["answered_by"]``
        naming it and ``info["auto_tried"]`` listing what was tried; status, bound and
        ``optimal_for`` are that solver's.
    """
    if time_limit is None:
        time_limit = DEFAULT_TIME_LIMIT
    deadline = Deadline(time_limit)
    tried: list = []
    proofs: list = []
    if chain.store_all_memory() <= budget:
        # (store-all has no transfer: solved on the chain without its channel, if any)
        sol = registry.solve(chain.replace(bandwidth=None), budget, "store-all")
        # optimal over all schedules; its min_budget (store-all's own) is not the smallest
        # feasible budget of all schedules, so it is not passed on as one
        # (with a copy channel too: the ideal makespan, which no transfer shortens)
        cls = CLASS_ALL if chain.bandwidth is None else classes.OFFLOAD_KEY
        sol = sol.replace(optimal_for=cls, bound=sol.makespan, min_budget=None)
        return _answer(sol, "store-all",
                       "the budget holds every tape, so nothing is recomputed: optimal over "
                       "all schedules", tried, time_limit, proofs)
    if chain.bandwidth is not None:  # the two-stream model: its own route
        from solvers.offload import auto as offload_auto  # only for a chain with a channel

        return offload_auto.solve(chain, budget, time_limit, _run, _answer, tried, proofs)
    last = class_only = None
    for name, opts, why in plan(chain, budget, time_limit):
        if deadline.remaining() <= 0.05 and last is not None:
            break
        sol = _run(chain, budget, name, opts, deadline, tried, proofs)
        if sol is None:
            continue
        last = (sol, name, why)
        if sol.schedule is not None:
            return _answer(sol, name, why, tried, time_limit, proofs)
        if sol.status == INFEASIBLE:
            if sol.optimal_for == CLASS_ALL:
                return _answer(sol, name, why, tried, time_limit, proofs)
            class_only = last  # proves only that no schedule of its class fits
            break
    if class_only is not None:
        return decide_all(chain, budget, class_only, deadline, tried, proofs, time_limit)
    return _fallback(chain, budget, tried, last, time_limit, proofs, deadline)


def _run(chain: Chain, budget: int, name: str, opts: dict, deadline: Deadline, tried: list,
         proofs: list) -> Solution | None:
    """``name`` with ``opts`` and the time left; None when it refuses (e.g. a table larger
    than it allows).  Every answer is recorded in ``tried`` and ``proofs``."""
    opts = dict(opts)
    if "time_limit" in registry.get(name).options:
        opts["time_limit"] = deadline.remaining(0.05)
    try:
        sol = registry.solve(chain, budget, name, **opts)
    except (SolverError, SolverContractError) as e:
        tried.append(f"{name}: {e}")
        return None
    tried.append(f"{name}: {sol.status}")
    proofs.append({"solver": name, "status": sol.status, "optimal_for": sol.optimal_for,
                   "min_budget": sol.min_budget, "makespan": sol.makespan,
                   "bound": sol.bound})
    return sol


def _class_words(sol: Solution) -> str:
    cls = sol.schedule_class
    return "schedule" if cls.key == CLASS_ALL else f"{cls.key} schedule"


def decide_all(chain: Chain, budget: int, class_only: tuple, deadline: Deadline, tried: list,
               proofs: list, time_limit: float) -> Solution:
    """A class solver found no schedule of its class: decide the budget over all schedules
    (module docstring), or say it is not decided."""
    sol, name, why = class_only
    found = (f"{name} found no {_class_words(sol)} in {budget}"
             + (f" (the smallest budget of that class is {sol.min_budget})"
                if sol.min_budget is not None else ""))
    lb = chain.memory_lower_bound()
    if budget < lb:
        proofs.append({"solver": "memory lower bound", "status": INFEASIBLE,
                       "optimal_for": CLASS_ALL, "min_budget": None, "makespan": None,
                       "bound": None})
        exact = None
        if chain.length <= EXHAUSTIVE_MAX_STAGES and "exhaustive" in registry.names():
            from solvers.exhaustive import min_feasible_budget
            exact = min_feasible_budget(chain)
        between = (f"the smallest feasible budget is {exact}" if exact is not None else
                   f"the smallest feasible budget is between {lb} and "
                   f"{sol.min_budget if sol.min_budget is not None else chain.store_all_memory()}")
        answer = Solution.infeasible("auto", budget, optimal_for=CLASS_ALL, min_budget=exact,
                                     info=dict(sol.info, class_min_budget=sol.min_budget),
                                     message=f"no schedule fits in {budget}: every schedule "
                                             f"needs at least {lb} bytes; {between}")
        return _answer(answer, "memory lower bound", f"{found}; the chain's memory lower "
                       f"bound {lb} proves that no schedule fits", tried, time_limit, proofs,
                       keep_message=True)
    for other in ("exhaustive", "ilp"):
        if other not in registry.names() or deadline.remaining(1.0) <= 0.05:
            continue
        limit = EXHAUSTIVE_MAX_STAGES if other == "exhaustive" else ILP_MAX_STAGES
        if chain.length > limit or any(p["solver"] == other for p in proofs):
            continue
        got = _run(chain, budget, other, {}, deadline, tried, proofs)
        if got is None or got.optimal_for != CLASS_ALL:
            continue
        if got.schedule is not None or got.status == INFEASIBLE:
            return _answer(got, other, f"{found}, so {other} decided the budget over all "
                                       f"schedules", tried, time_limit, proofs)
    return _answer(_undecided(chain, budget, sol.min_budget, sol.info, found), name, why,
                   tried, time_limit, proofs, keep_message=True)


def _undecided(chain: Chain, budget: int, class_min: int | None, info: dict,
               found: str) -> Solution:
    """No schedule found and none proven impossible: status ``time_limit``, no schedule."""
    where = (f"exhaustive search (up to {EXHAUSTIVE_MAX_STAGES} stages) and the ILP (up to "
             f"{ILP_MAX_STAGES}) did not decide {chain.length} stages in the time limit")
    more = (f"; a schedule exists from {class_min}" if class_min is not None else "")
    return Solution.time_limit(
        "auto", budget, optimal_for=CLASS_NONE, info=dict(info, class_min_budget=class_min),
        message=f"no schedule found, and none proven impossible (not proven optimal): "
                f"{found}; whether another schedule fits is not decided: {where}{more}")


def _fallback(chain: Chain, budget: int, tried: list, last, time_limit: float, proofs: list,
              deadline: Deadline) -> Solution:
    """Best fast baseline: no exact solver answered within the time limit.  Each runs only
    when its estimate (the first one's measured time, scaled by :data:`FALLBACK_COST`) fits
    the time left; when not even the first fits, auto refuses, naming a limit that would."""
    best = None
    first = FALLBACK_SECONDS_PER_STAGE * chain.length
    if last is None and first > deadline.remaining() + OVERRUN_S:
        need = math.ceil(first * 1.5 + (time_limit - deadline.remaining()))
        raise SolverLimitError(
            f"solver 'auto': {chain.length:,} stages: no solver answers within the time limit "
            f"of {time_limit:g} s (no exact solver fits, and the fastest baseline, "
            f"{FALLBACK[0]}, needs about {first:.0f} s with the replay of its schedule); raise "
            f"the time limit to about {need} s, or name a solver", solver="auto",
            estimate_s=first, remedies=(Remedy(options=(("time_limit", AT_LEAST, need),)),))
    per_unit = None  # measured seconds of one unit of FALLBACK_COST
    for name in FALLBACK:
        if name not in registry.names():
            continue
        cost = FALLBACK_COST.get(name, 1.0)
        guess = (per_unit if per_unit is not None else FALLBACK_SECONDS_PER_STAGE
                 * chain.length) * cost
        if best is not None and guess > deadline.remaining() + OVERRUN_S / 2:
            tried.append(f"{name}: not run (about {guess:.1f} s, past the time limit)")
            continue
        opts = {}
        if "time_limit" in registry.get(name).options:
            opts["time_limit"] = deadline.remaining(0.05)
        t0 = time.perf_counter()
        try:
            sol = registry.solve(chain, budget, name, **opts)
        except (RematError, SolverContractError) as e:
            tried.append(f"{name}: {e}")
            continue
        if per_unit is None:
            per_unit = (time.perf_counter() - t0) / cost
        tried.append(f"{name}: {sol.status}")
        if sol.schedule is not None and (best is None or sol.makespan < best[0].makespan):
            best = (sol, name)
    if best is None:
        if last is not None:
            return _answer(*last, tried, time_limit, proofs)
        # a baseline that finds no schedule proves nothing about other schedules
        lb = chain.memory_lower_bound()
        found = "no exact solver fits the time limit, and no fast baseline finds a schedule"
        if budget < lb:
            sol = Solution.infeasible("auto", budget, optimal_for=CLASS_ALL,
                                      message=f"no schedule fits in {budget}: every schedule "
                                              f"needs at least {lb} bytes")
            return _answer(sol, "memory lower bound", found, tried, time_limit, proofs,
                           keep_message=True)
        return _answer(_undecided(chain, budget, None, {}, found), "auto", found, tried,
                       time_limit, proofs, keep_message=True)
    sol, name = best
    return _answer(sol.replace(status=FEASIBLE, min_budget=None), name,
                   f"no exact solver fits {chain.length} stages in the time limit (the slot "
                   f"DP needs about {dp_cost(chain.length, 16)[0]:.0f} s at 16 slots): the "
                   f"best of the fast baselines, not proven optimal", tried, time_limit, proofs)
