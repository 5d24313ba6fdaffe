"""The one result type of every solver (docs/solvers.md), in the manner of scipy's
``OptimizeResult``: a caller never needs to know which solver ran to read the answer."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from remat_theory.model.schedule import Schedule

OPTIMAL, FEASIBLE, INFEASIBLE, TIME_LIMIT = "optimal", "feasible", "infeasible", "time_limit"
STATUSES = (OPTIMAL, FEASIBLE, INFEASIBLE, TIME_LIMIT)

# Classes of schedules a value can be optimal for (``optimal_for``).
CLASS_ALL = "all"  # every valid schedule of the canonical model
CLASS_ALL_WITH_DROP = "all+drop"  # every valid schedule with explicit deletions allowed
CLASS_PERSISTENT = "persistent"
CLASS_WEAK = "weakly-persistent"
CLASS_MONOTONE = "weak-runs<=1"  # forward stages never decrease inside a phase (persistence.py)
CLASS_NONE = "none"  # a heuristic: optimal for no stated class


@dataclass(frozen=True)
class Solution:
    """What a solver returns.

    Attributes
    ----------
    solver : registry name of the solver.
    status : ``optimal`` (proven optimal for ``optimal_for``), ``feasible`` (a valid
        schedule, no optimality claim), ``infeasible`` (no schedule of the solver's class fits;
        ``min_budget`` says the smallest budget that does, when known) or ``time_limit``
        (stopped by a time limit; ``schedule`` is the incumbent if any, ``bound`` the best
        proven lower bound).
    schedule : the schedule (None when infeasible or when a time limit left no incumbent).
    makespan : its total time (seconds), as the solver computed it; the registry checks it
        against the simulator.
    peak_memory : its peak memory (bytes), as simulated.
    budget : the budget (bytes) it was solved for.
    bound : a proven lower bound on the optimal makespan within ``optimal_for`` (None if
        the solver proves none).
    optimal_for : the class in which ``makespan`` is optimal when status is ``optimal``.
    min_budget : smallest feasible budget of the solver's class (bytes), when known.
    wall_time : seconds spent solving.
    message : human-readable detail.
    info : solver-specific extras (e.g. MIP gap, slots, guaranteed budget).
    """

    solver: str
    status: str
    schedule: Schedule | None
    makespan: float | None
    peak_memory: int | None
    budget: int | None
    bound: float | None = None
    optimal_for: str = CLASS_NONE
    min_budget: int | None = None
    wall_time: float = 0.0
    message: str = ""
    info: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status = {self.status!r} is not one of {STATUSES}")

    @property
    def success(self) -> bool:
        return self.schedule is not None

    @property
    def gap(self) -> float | None:
        """Relative gap between makespan and bound, when both exist."""
        if self.makespan is None or self.bound is None:
            return None
        if self.makespan == 0:
            return 0.0
        return max(0.0, (self.makespan - self.bound) / self.makespan)

    def replace(self, **changes: Any) -> "Solution":
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return {
            "solver": self.solver,
            "status": self.status,
            "makespan": self.makespan,
            "peak_memory": self.peak_memory,
            "budget": self.budget,
            "bound": self.bound,
            "gap": self.gap,
            "optimal_for": self.optimal_for,
            "min_budget": self.min_budget,
            "wall_time": self.wall_time,
            "message": self.message,
            "schedule": None if self.schedule is None else self.schedule.tokens(),
            "info": self.info,
        }
