"""remat: optimal activation re-materialization (checkpointing) for chains.

Ground floor of the package: the chain model, the operations and schedules, and the
simulator that judges every schedule.  Solvers live in the sibling package ``solvers``;
the torch harness in :mod:`remat_theory.torch` (optional, needs torch).
"""
from .chain import FORMAT, Chain
from .errors import (BudgetExceededError, ChainError, InfeasibleBudgetError,
                     InvalidScheduleError, RematError, ScheduleParseError, SolverError)
from .schedule import Op, Schedule
from .simulator import SimulationResult, State, simulate, transition
from .solution import Solution

__version__ = "0.1.0"

__all__ = [
    "FORMAT", "Chain", "Op", "Schedule", "simulate", "transition", "State", "SimulationResult",
    "Solution", "RematError", "ChainError", "ScheduleParseError", "InvalidScheduleError",
    "BudgetExceededError", "InfeasibleBudgetError", "SolverError",
]
