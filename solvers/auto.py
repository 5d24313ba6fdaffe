"""``auto``: the best exact answer the chain's size allows within a time budget.

``remat solve`` uses it when no ``--solver`` is named.  It picks one exact solver from the
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

``status``, ``bound`` and ``optimal_for`` are those of the solver that answered: what it
proved, for its class.  When the ILP stops at the time limit without a schedule, the DPs
are tried with the time left.  ``time_limit`` (seconds, default
:data:`DEFAULT_TIME_LIMIT`) is the budget for the whole call; it is passed on to every
solver that takes one, and the estimates below decide what is attempted.
"""
from __future__ import annotations

import time

from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError, SolverError
from remat_theory.model.solution import CLASS_ALL, FEASIBLE, INFEASIBLE, Solution

from solvers import registry
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
#: Fast baselines for chains too long for any exact solver in the time budget (all run
#: in about a second on 2,000 stages), in the canonical model (no Drop).
FALLBACK = ("chen-greedy", "periodic", "revolve", "chen-sqrt")


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


def _answer(sol: Solution, name: str, why: str, tried: list, time_limit: float) -> Solution:
    info = dict(sol.info)
    info.update(answered_by=name, auto_tried=tried, auto_time_limit=time_limit)
    message = f"answered by {name}: {why}" + (f"; {sol.message}" if sol.message else "")
    return sol.replace(solver="auto", info=info, message=message, wall_time=0.0)


@register("auto", optimal_for=CLASS_ALL, exact=True,
          description="The best exact answer within a time limit (default 60 s): store-all "
                      "when it fits, else the certified ilp up to 30 stages, else dp-weak, "
                      "else dp (slots if needed); says which solver answered and what it "
                      "proved.",
          # In a sweep, the ILP's own limit: auto runs the certified ILP on short chains.
          max_stages=4,
          # It answers with the class of the solver that answered.
          classes=(CLASS_ALL, "weakly-persistent", "persistent"),
          # every solver it may call models them (they are checked again on each call)
          supports=("fall_time", "fall_overhead", "output_saved"),
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
    t0 = time.perf_counter()
    tried: list = []
    if chain.store_all_memory() <= budget:
        sol = registry.solve(chain, budget, "store-all")
        # optimal over all schedules; its min_budget (store-all's own) is not the smallest
        # feasible budget of all schedules, so it is not passed on as one
        sol = sol.replace(optimal_for=CLASS_ALL, bound=sol.makespan, min_budget=None)
        return _answer(sol, "store-all",
                       "the budget holds every tape, so nothing is recomputed: optimal over "
                       "all schedules", tried, time_limit)
    last = None
    for name, opts, why in plan(chain, budget, time_limit):
        left = time_limit - (time.perf_counter() - t0)
        if left <= 0.05 and last is not None:
            break
        opts = dict(opts)
        if "time_limit" in registry.get(name).options:
            opts["time_limit"] = max(0.05, left)
        try:
            sol = registry.solve(chain, budget, name, **opts)
        except SolverError as e:  # e.g. a table larger than the solver allows: next one
            tried.append(f"{name}: {e}")
            continue
        tried.append(f"{name}: {sol.status}")
        last = (sol, name, why)
        if sol.schedule is not None or sol.status == INFEASIBLE:
            return _answer(sol, name, why, tried, time_limit)
    return _fallback(chain, budget, tried, last, time_limit)


def _fallback(chain: Chain, budget: int, tried: list, last, time_limit: float) -> Solution:
    """Best fast baseline: no exact solver answered within the time limit."""
    best = first = None
    for name in FALLBACK:
        if name not in registry.names():
            continue
        try:
            sol = registry.solve(chain, budget, name)
        except RematError as e:
            tried.append(f"{name}: {e}")
            continue
        tried.append(f"{name}: {sol.status}")
        first = first or (sol, name)
        if sol.schedule is not None and (best is None or sol.makespan < best[0].makespan):
            best = (sol, name)
    if best is None:
        if last is not None:
            return _answer(*last, tried, time_limit)
        if first is not None:  # a baseline's own smallest budget is no claim about others
            return _answer(first[0].replace(min_budget=None), first[1], "no exact solver fits the time limit, and no fast baseline "
                                   "finds a schedule", tried, time_limit)
        raise SolverError(f"solver 'auto': no solver answered at budget {budget} on "
                          f"{chain.length} stages ({'; '.join(tried) or 'none fits'}); "
                          f"name one with --solver, or raise the time limit")
    sol, name = best
    return _answer(sol.replace(status=FEASIBLE, min_budget=None), name,
                   f"no exact solver fits {chain.length} stages in the time limit (the slot "
                   f"DP needs about {dp_cost(chain.length, 16)[0]:.0f} s at 16 slots): the "
                   f"best of the fast baselines, not proven optimal", tried, time_limit)
