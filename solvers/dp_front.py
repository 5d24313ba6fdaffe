"""The front end of the dynamic programs, written once (``dp``, ``dp-weak``, ``dp-offload``).

Every DP over memory units answers the same way around its table: refuse a chain too long
for any table before any work; exact memory (sizes divided by their gcd) or ``slots``
(sizes rounded up to budget/S: valid at the real budget, optimal for the rounded sizes
only); ``infeasible`` with the smallest feasible budget (exact memory) and a claim about
the class only where rounding cannot have lost it; ``optimal`` where nothing was rounded;
an optional lower bound with sizes rounded down; ``time_limit`` with the ideal makespan as
bound when the clock runs out.  :func:`solve_front` is that logic; a DP gives its name, its
class and three functions (:class:`DPParts`); the offload DP adds its replay in the
two-stream referee.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from remat_theory.model.chain import Chain
from remat_theory.model.solution import CLASS_NONE, FEASIBLE, OPTIMAL, Solution

from solvers._dp_tables import (Deadline, DeadlineExpired, UnitChain, all_sizes, peak,
                                refuse_by_length, slot_info, time_up)

__all__ = ["DPParts", "solve_front"]

#: The message of an answer optimal only for the rounded sizes.
SLOTS_NOT_PROVEN = ("slots mode: optimal for the rounded sizes, not proven optimal at the real "
                    "budget")


@dataclass(frozen=True)
class DPParts:
    """What a DP gives :func:`solve_front`.

    name, schedule_class : the solver's name and the class it is optimal for.
    words : the class in a message ("persistent").
    least_table_bytes : ``(stages) -> bytes`` of the smallest table any budget gives (a
        chain refused from its length alone, :func:`solvers._dp_tables.refuse_by_length`).
    solve_units : ``(unit chain, budget units, deadline, slots) -> (makespan, schedule,
        least)``: (inf, None, ...) when nothing fits; ``least`` the smallest feasible budget
        in the chain's units when known for free, else None.
    min_units : ``(unit chain, deadline) -> int``, the smallest feasible budget in units.
    replay : ``(chain, schedule, makespan) -> (makespan, peak, info)`` for an answer, or None
        (the default: the table's makespan, the peak by :func:`solvers._dp_tables.peak`, no
        info); the offload DP replays its schedule in the referee (two streams) and checks
        the table's makespan there.
    least_words : how a message names the smallest feasible budget (the class's, where
        another class may fit lower).
    """

    name: str
    schedule_class: str
    words: str
    least_table_bytes: Callable[[int], float]
    solve_units: Callable
    min_units: Callable
    replay: Callable | None = None
    least_words: str = "the smallest feasible budget"


def _answer(parts: DPParts, chain: Chain, schedule, makespan, info: dict):
    """(makespan, peak) of an answer, with what the DP's replay adds to ``info``."""
    if parts.replay is None:
        return makespan, peak(chain, schedule)
    makespan, at_peak, more = parts.replay(chain, schedule, makespan)
    info.update(more)
    return makespan, at_peak


def solve_front(parts: DPParts, chain: Chain, budget: int, slots: int | None,
                deadline: Deadline, barriers: tuple = (), slot_bound: bool = False,
                info: dict | None = None) -> Solution:
    """The DP's answer for ``chain`` at ``budget`` (module docstring).  ``slot_bound`` (with
    ``slots``): also solve with sizes rounded down, a lower bound (``optimal`` where the two
    agree).  ``barriers`` are passed to :class:`UnitChain` (``dp``'s option).  ``info``: the
    DP's own entries of the answer's info, first."""
    name, cls = parts.name, parts.schedule_class
    refuse_by_length(name, chain.length, parts.least_table_bytes(chain.length))
    uc_exact, gcd = UnitChain.exact(chain, barriers)
    info = dict(info or {})
    if slots is None:
        info.update({"memory": "exact", "unit": gcd, "budget_units": budget // gcd})
        try:
            makespan, schedule, least = parts.solve_units(uc_exact, budget // gcd, deadline, None)
            if schedule is None and least is None:
                least = parts.min_units(uc_exact, deadline)
        except DeadlineExpired as e:
            return time_up(name, cls, chain, budget, deadline, e.what, info)
        min_budget = None if least is None else least * gcd
        if schedule is None:
            return Solution.infeasible(name, budget, optimal_for=cls, min_budget=min_budget,
                                       info=info,
                                       message=f"no {parts.words} schedule fits in {budget}; "
                                               f"{parts.least_words} is {min_budget}")
        makespan, at_peak = _answer(parts, chain, schedule, makespan, info)
        return Solution.optimal(name, budget, schedule, makespan, at_peak, bound=makespan,
                                optimal_for=cls, min_budget=min_budget, info=info)
    info.update({"memory": "slots", **slot_info(chain, budget, slots)})
    uc = UnitChain.rounded(chain, budget, slots, barriers=barriers)
    try:
        makespan, schedule, _ = parts.solve_units(uc, slots, deadline, slots)
        if schedule is None:
            min_budget = parts.min_units(uc_exact, deadline) * gcd
            # Rounding up loses schedules: the class is proven empty only below the exact
            # smallest budget; at or above it the answer claims nothing about the class.
            claim = cls if budget < min_budget else CLASS_NONE
            return Solution.infeasible(
                name, budget, optimal_for=claim, min_budget=min_budget, info=info,
                message=f"no {parts.words} schedule fits in {budget} with sizes rounded up to "
                        f"{slots} slots; {parts.least_words} (exact memory) is "
                        f"{min_budget}")
        status, bound = FEASIBLE, None
        if budget == 0 or all(v * slots % budget == 0 for v in all_sizes(chain)):
            # every size is a whole number of slots: the slot DP is the exact DP, scaled
            status, bound = OPTIMAL, makespan
            info["rounding_exact"] = True
        elif slot_bound:
            down = UnitChain.rounded(chain, budget, slots, down=True, barriers=barriers)
            bound, _, _ = parts.solve_units(down, slots, deadline, slots)
            info["lower_bound_from"] = "sizes rounded down"
            if bound == makespan:
                status = OPTIMAL
    except DeadlineExpired as e:
        return time_up(name, cls, chain, budget, deadline, e.what, info)
    makespan, at_peak = _answer(parts, chain, schedule, makespan, info)
    return Solution(name, status, schedule, makespan, at_peak, budget, bound=bound,
                    optimal_for=cls if status == OPTIMAL else CLASS_NONE, info=info,
                    message="" if status == OPTIMAL else SLOTS_NOT_PROVEN)
