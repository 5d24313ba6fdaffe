"""remat: optimal activation re-materialization (checkpointing) for chains.

The package in floors, each importing only from those below it (``tests/test_layers.py``):

- :mod:`remat_theory.model`: the chain, operations and schedules, the simulator that judges
  every schedule, the solution record, schedule classes, errors (numpy only);
- :mod:`solvers` (a sibling package): exact optimizers and baselines behind one registry;
- :mod:`remat_theory.analysis`: verify, certificates, hard instances, benchmarks, plots;
- :mod:`remat_theory.cli` (the ``remat`` command) and :mod:`remat_theory.torch` (the torch
  harness, optional: the only floor that imports torch).

The names below are the public ground floor; :mod:`remat_theory.strategies` holds the
hypothesis strategies.
"""
from remat_theory.model.chain import FORMAT, Chain
from remat_theory.model.errors import (BudgetExceededError, ChainError, InfeasibleBudgetError,
                     InvalidScheduleError, RematError, ScheduleParseError, SolverContractError,
                     SolverError, SolverOptionError)
from remat_theory.model.schedule import Op, Schedule
from remat_theory.model.simulator import SimulationResult, State, simulate, transition
from remat_theory.model import offload as _offload  # noqa: F401  (registers the two-stream replay)
from remat_theory.model.classes import ScheduleClass
from remat_theory.model.solution import Solution

__version__ = "0.1.0"

__all__ = [
    "FORMAT", "Chain", "Op", "Schedule", "simulate", "transition", "State", "SimulationResult",
    "Solution", "RematError", "ChainError", "ScheduleParseError", "InvalidScheduleError",
    "BudgetExceededError", "InfeasibleBudgetError", "SolverError", "SolverOptionError",
    "SolverContractError", "ScheduleClass",
]
