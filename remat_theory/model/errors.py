"""Exception types of the package.

Every error a user can trigger by bad input is one of these, with a message that names
the field, index, token or schedule step at fault.  They subclass ``ValueError`` so that
generic callers can still catch them as value errors.
"""
from __future__ import annotations


class RematError(ValueError):
    """Base class of every error raised by remat for bad input or an invalid schedule."""


class ChainError(RematError):
    """A chain description is malformed: wrong lengths, bad numbers, unknown format."""


class ScheduleParseError(RematError):
    """A schedule's token form cannot be parsed (unknown token, bad index)."""


class InvalidScheduleError(RematError):
    """A schedule breaks a rule of the operation table at some step.

    Attributes
    ----------
    step : int or None
        0-based position of the first invalid operation (None when the schedule as a
        whole is wrong, e.g. it ends without computing d_0).
    op : str or None
        Token of that operation.
    reason : str
        Why it is invalid.
    """

    def __init__(self, reason: str, step: int | None = None, op: str | None = None):
        self.step = step
        self.op = op
        self.reason = reason
        where = f"step {step} ({op}): " if step is not None else ""
        super().__init__(where + reason)


class BudgetExceededError(InvalidScheduleError):
    """An operation's peak memory exceeds the budget."""

    def __init__(self, reason: str, step: int, op: str, peak: int, budget: int):
        self.peak = peak
        self.budget = budget
        super().__init__(reason, step, op)


class InfeasibleBudgetError(RematError):
    """No schedule (of the class a solver searches) fits in the budget.

    ``smallest_feasible`` is the smallest budget that is feasible, when known.
    """

    def __init__(self, message: str, budget: int, smallest_feasible: int | None):
        self.budget = budget
        self.smallest_feasible = smallest_feasible
        super().__init__(message)


class SolverError(RematError):
    """Base class of the solver errors: a solver was misused (:class:`SolverOptionError`) or
    returned something false (:class:`SolverContractError`).  Catch this to catch both."""


class SolverOptionError(SolverError):
    """Misuse of a solver: an unknown solver name or plug-in path, an unknown option, or an
    option value of the wrong type or out of range.  The message names the solver, the
    option and the value.  Nothing was solved: this is bad input, not a finding."""


class SolverContractError(SolverError):
    """A solver returned something false: a schedule the simulator rejects (invalid, or over
    the budget), a claimed makespan or peak the simulator does not measure, or a result that
    is not a solution at all.  ``remat verify`` counts these (and only these, besides
    crashes) as violations."""
