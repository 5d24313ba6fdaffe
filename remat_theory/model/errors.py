"""Exception types of the package: one taxonomy, used the same way everywhere.

===========================  ==========================================================
what happened                 class
===========================  ==========================================================
bad input (a chain, a         :class:`ChainError`, :class:`ScheduleParseError`,
schedule's text, an argument) :class:`RematError` itself for other arguments
option misuse                 :class:`SolverOptionError` (unknown solver or option, a
                              value of the wrong type or out of range)
a limit of a solver           :class:`SolverLimitError` (the problem is too large for it,
                              or its run is estimated far past the time limit; refused
                              before any work: neither bad input nor a finding)
infeasibility                 :class:`InfeasibleBudgetError` (no schedule fits)
an invalid schedule           :class:`InvalidScheduleError`, :class:`BudgetExceededError`
a user's plug-in failed       :class:`PluginError` (it raised, or has the wrong signature)
a bug of remat                :class:`InternalError`: *not* a :class:`RematError` (an
                              invariant of remat failed; the command line says "this is
                              a bug" and exits 1)
a false answer of a solver    :class:`SolverContractError`, an :class:`InternalError`
                              (``remat verify``'s findings; the command line names it as
                              the solver's bug and exits 1)
===========================  ==========================================================

Every :class:`RematError` names the field, index, token, option or schedule step at fault
in its message.  The ways out are facts, not text: :attr:`RematError.remedies` lists
:class:`Remedy` objects (an option to set and a value that fits, another solver to use),
which the message spells in Python terms and a front end (the ``remat`` command line)
spells in its own syntax from the same facts.  A limit error also carries its estimate
(:attr:`SolverLimitError.estimate_s`, :attr:`SolverLimitError.estimate_bytes`).  The
classes subclass ``ValueError`` so that generic callers can still catch them as value
errors.
"""
from __future__ import annotations

from dataclasses import dataclass

#: Relations of a :class:`Remedy`'s option values.
EQ, AT_MOST, AT_LEAST = "=", "<=", ">="


def _value_text(value) -> str:
    if value is None:  # a value of the user's choice
        return "N"
    return repr(value) if isinstance(value, str) else str(value)


@dataclass(frozen=True)
class Remedy:
    """One way out of an error, as facts: use ``solver`` (when not None) with ``options``,
    each ``(name, relation, value)`` with ``relation`` one of ``"="``, ``"<="``, ``">="``
    (``value`` None: a value of the user's choice);
    ``note`` says what that gives (e.g. "optimal among persistent schedules").

    >>> Remedy(options=(("slots", "<=", 40),)).python()
    'pass slots=40 or less'
    >>> Remedy(solver="dp", note="roughly 2 s here").python()
    "use solver 'dp' (roughly 2 s here)"
    """

    options: tuple = ()
    solver: str | None = None
    note: str = ""

    def __post_init__(self):
        for item in self.options:
            if len(item) != 3 or item[1] not in (EQ, AT_MOST, AT_LEAST):
                raise InternalError(f"Remedy option {item!r} is not (name, relation, value)")

    def python(self) -> str:
        """The remedy in Python terms (the keyword options of :func:`solvers.solve`)."""
        words = {EQ: "", AT_MOST: " or less", AT_LEAST: " or more"}
        opts = " and ".join(f"{k}={_value_text(v)}{words[r]}" for k, r, v in self.options)
        if self.solver is not None:
            text = f"use solver {self.solver!r}" + (f" with {opts}" if opts else "")
        else:
            text = f"pass {opts}"
        return text + (f" ({self.note})" if self.note else "")


def remedies_text(remedies) -> str:
    """The remedies in Python terms, joined with "or"."""
    return ", or ".join(r.python() for r in remedies)


@dataclass(frozen=True)
class Note:
    """Advice before a solve that may run very long (not an error): ``text`` says why, in
    words; ``remedies`` are the ways to a shorter run, as facts (:class:`Remedy`).  A
    solver's registered ``note`` returns one (or None); ``remat solve`` prints it."""

    text: str
    remedies: tuple = ()

    def python(self) -> str:
        return self.text + (f"; {remedies_text(self.remedies)}" if self.remedies else "")

    def __str__(self) -> str:
        return self.python()


class InternalError(RuntimeError):
    """An invariant of remat failed: a bug of remat, never a consequence of the input.

    Deliberately not a :class:`RematError` (nor a ``ValueError``): nothing should catch it
    as bad input.  The command line reports it as "internal error (this is a bug)" with
    exit code 1."""


class RematError(ValueError):
    """Base class of every error raised by remat for bad input, a limit, an infeasible
    budget or an invalid schedule.

    ``problem`` is the message without its remedies; ``remedies`` (a tuple of
    :class:`Remedy`) are the ways out, appended to the message in Python terms."""

    problem: str = ""
    remedies: tuple = ()

    def __init__(self, problem: str = "", *args, remedies=()):
        self.problem = str(problem)
        self.remedies = tuple(remedies)
        text = self.problem
        if self.remedies:
            text += "; " + remedies_text(self.remedies)
        super().__init__(text, *args)


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

    def __init__(self, reason: str, step: int | None = None, op: str | None = None, *,
                 remedies=()):
        self.step = step
        self.op = op
        self.reason = reason
        where = f"step {step} ({op}): " if step is not None else ""
        super().__init__(where + reason, remedies=remedies)


class BudgetExceededError(InvalidScheduleError):
    """An operation's peak memory exceeds the budget."""

    def __init__(self, reason: str, step: int, op: str, peak: int, budget: int):
        self.peak = peak
        self.budget = budget
        super().__init__(reason, step, op)


class InfeasibleBudgetError(RematError):
    """No schedule (of the class a solver searches) fits in the budget.

    ``smallest_feasible`` is the smallest budget that is feasible, when known (a value that
    fits); ``source`` says where that number comes from (e.g. ``"exhaustive"``: exact over
    all schedules), ``lower_bound`` is a budget no schedule goes below (or None).
    """

    def __init__(self, message: str, budget: int, smallest_feasible: int | None, *,
                 source: str | None = None, lower_bound: int | None = None):
        self.budget = budget
        self.smallest_feasible = smallest_feasible
        self.source = source
        self.lower_bound = lower_bound
        super().__init__(message)


class SolverError(RematError):
    """Base class of the solver errors a user can act on: a solver was misused
    (:class:`SolverOptionError`) or refused a problem beyond its limits
    (:class:`SolverLimitError`).  A false answer (:class:`SolverContractError`) is not one
    of them: it is a bug of the solver, an :class:`InternalError`."""


class SolverOptionError(SolverError):
    """Misuse of a solver: an unknown solver name or plug-in path, an unknown option, or an
    option value of the wrong type or out of range.  The message names the solver, the
    option and the value.  Nothing was solved: this is bad input, not a finding."""


class SolverContractError(InternalError):
    """A solver returned something false: a schedule the simulator rejects (invalid, or over
    the budget), a claimed makespan or peak the simulator does not measure, or a result that
    is not a solution at all.  ``remat verify`` counts these (and only these, besides
    crashes) as violations.

    The solver's bug, never the input's: an :class:`InternalError`, not a
    :class:`RematError` (nor a :class:`SolverError`), so that no ``except RematError``
    takes it for bad input; a caller that tolerates a false answer catches it by name."""


class SolverLimitError(SolverError):
    """The problem is beyond a limit of the solver, which refuses it before any work: a
    table larger than it allows, a model with more binaries than ``max_binaries``, more
    stages than its size guard, a run estimated at far more than the time limit.

    Not bad input (the chain and options are valid) and not a finding (nothing false was
    answered): ``remat verify`` records the solve as ``refused``, ``auto`` tries its next
    solver.  The facts: ``solver``; ``estimate_s`` and ``estimate_bytes`` (the estimated
    seconds and bytes, or None); ``remedies`` (options whose values fit, other solvers)."""

    def __init__(self, problem: str, *, solver: str | None = None,
                 estimate_s: float | None = None, estimate_bytes: float | None = None,
                 remedies=()):
        self.solver = solver
        self.estimate_s = estimate_s
        self.estimate_bytes = estimate_bytes
        super().__init__(problem, remedies=remedies)


class CaptureError(RematError):
    """A model cannot be captured as a chain of stages (untraceable, no valid cut, bad input)."""


class PluginError(RematError):
    """A user's plug-in (a solver given as ``package.module:function`` or an entry point, a
    model factory of ``remat profile``) raised, or cannot be called as documented.  The
    plug-in's bug, not remat's: ``plugin`` names it and ``__cause__`` is its exception."""

    def __init__(self, problem: str, *, plugin: str | None = None):
        self.plugin = plugin
        super().__init__(problem)
