"""The one result type of every solver (docs/solvers.md), in the manner of scipy's
``OptimizeResult``: a caller never needs to know which solver ran to read the answer."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from remat_theory.model import classes
from remat_theory.model.errors import RematError
from remat_theory.model.classes import ScheduleClass
from remat_theory.model.schedule import Schedule

OPTIMAL, FEASIBLE, INFEASIBLE, TIME_LIMIT = "optimal", "feasible", "infeasible", "time_limit"
STATUSES = (OPTIMAL, FEASIBLE, INFEASIBLE, TIME_LIMIT)

# Keys of the classes of schedules a value can be optimal for (``optimal_for``); the
# classes themselves (rank, rules, membership) are in remat_theory.model.classes.
CLASS_ALL = classes.ALL.key  # every valid schedule of the canonical model
CLASS_ALL_WITH_DROP = classes.ALL_DROP.key  # every valid schedule with explicit deletions allowed
CLASS_PERSISTENT = classes.PERSISTENT.key
CLASS_WEAK = classes.WEAK.key
CLASS_MONOTONE = classes.MONOTONE.key  # forward stages never decrease inside a phase
CLASS_NONE = classes.NONE.key  # a heuristic: optimal for no stated class


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
    allows_drop : the schedule may use Drop operations (the explicit-deletion extension);
        the registry replays it with Drop allowed only then.  An ``info["allow_drop"]`` of
        True (the older spelling) sets it too.

    Build one with the named constructors :meth:`optimal`, :meth:`feasible`,
    :meth:`infeasible` and :meth:`time_limit`, which say what each status needs; the
    positional form ``Solution(solver, status, schedule, makespan, peak, budget, ...)`` still
    works.
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
    allows_drop: bool = False

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise RematError(f"status = {self.status!r} is not one of {STATUSES}")
        if isinstance(self.optimal_for, ScheduleClass):
            object.__setattr__(self, "optimal_for", self.optimal_for.key)
        if not self.allows_drop and self.info.get("allow_drop") is True:
            object.__setattr__(self, "allows_drop", True)

    # ----------------------------------------------------------------- constructors
    @classmethod
    def optimal(cls, solver: str, budget: int | None, schedule: Schedule, makespan: float,
                peak_memory: int, *, optimal_for: "str | ScheduleClass",
                bound: float | None = None, **extra: Any) -> "Solution":
        """A schedule proven optimal within ``optimal_for`` (its bound is its makespan
        unless another is given).  ``extra``: ``min_budget``, ``message``, ``info``,
        ``allows_drop``, ``wall_time``."""
        return cls(solver, OPTIMAL, schedule, makespan, peak_memory, budget,
                   bound=makespan if bound is None else bound, optimal_for=optimal_for, **extra)

    @classmethod
    def feasible(cls, solver: str, budget: int | None, schedule: Schedule, makespan: float,
                 peak_memory: int, *, bound: float | None = None,
                 optimal_for: "str | ScheduleClass" = CLASS_NONE, **extra: Any) -> "Solution":
        """A valid schedule with no optimality claim (a ``bound`` for ``optimal_for`` may
        come with it)."""
        return cls(solver, FEASIBLE, schedule, makespan, peak_memory, budget, bound=bound,
                   optimal_for=optimal_for, **extra)

    @classmethod
    def infeasible(cls, solver: str, budget: int | None, *, min_budget: int | None = None,
                   optimal_for: "str | ScheduleClass" = CLASS_NONE, message: str = "",
                   **extra: Any) -> "Solution":
        """No schedule found.  With ``optimal_for`` a class, a proof that no schedule of it
        fits (``min_budget``: the smallest budget at which one does, when known); with the
        default ``none``, only that this solver found none."""
        return cls(solver, INFEASIBLE, None, None, None, budget, optimal_for=optimal_for,
                   min_budget=min_budget, message=message, **extra)

    @classmethod
    def time_limit(cls, solver: str, budget: int | None, *, schedule: Schedule | None = None,
                   makespan: float | None = None, peak_memory: int | None = None,
                   bound: float | None = None, optimal_for: "str | ScheduleClass" = CLASS_NONE,
                   message: str = "", **extra: Any) -> "Solution":
        """Stopped by a limit before a proof: the incumbent schedule if any, the best proven
        lower ``bound`` for ``optimal_for``.  The message should say "not proven optimal"."""
        return cls(solver, TIME_LIMIT, schedule, makespan, peak_memory, budget, bound=bound,
                   optimal_for=optimal_for, message=message, **extra)

    @property
    def schedule_class(self) -> ScheduleClass:
        """``optimal_for`` as a :class:`ScheduleClass` (``none`` for an unknown name)."""
        return (classes.schedule_class(self.optimal_for) if classes.is_class_name(self.optimal_for)
                else classes.NONE)

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
            "allows_drop": self.allows_drop,
        }
