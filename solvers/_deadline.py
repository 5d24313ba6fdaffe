"""A wall-clock deadline shared by the steps of one solver run.

A solver given ``time_limit`` seconds runs several steps (a DP for a starting schedule,
model building, one or more MIP solves); each step gets what is left of the one limit
rather than the limit itself, and long loops (model building) check it as they go, so that
the limit bounds the whole run.  ``Deadline(None)`` never expires.
"""
from __future__ import annotations

import contextlib
import contextvars
import time

from remat_theory.model.errors import InternalError


class DeadlineExpired(InternalError):
    """Raised by :meth:`Deadline.check` when the time is up; ``what`` names the step that was
    running.  Solvers catch it and answer ``time_limit`` with what they have in hand (and
    :func:`solvers.solve` catches what they leave): one that escapes is a bug of remat, an
    :class:`~remat_theory.model.errors.InternalError`, not bad input."""

    def __init__(self, what: str, limit: float):
        super().__init__(f"time limit of {limit:g} s reached while {what}")
        self.what = what
        self.limit = limit


class Deadline:
    """``seconds`` from now (``None``: no limit).

    ``remaining(floor)``: seconds left (never below ``floor``, so that a solver given what
    is left still gets a positive limit), None without a limit; ``expired()``;
    ``check(what)``: raise :class:`DeadlineExpired` naming ``what`` once expired;
    ``require(seconds, what)``: the same, already when a step estimated at ``seconds`` will
    not fit;
    ``share(fraction, cap)``: a limit for a sub-step, ``fraction`` of what is left and at
    most ``cap`` seconds.
    """

    __slots__ = ("limit", "start")

    def __init__(self, seconds: float | None, start: float | None = None):
        self.limit = seconds
        self.start = time.perf_counter() if start is None else start

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def remaining(self, floor: float = 0.0) -> float | None:
        if self.limit is None:
            return None
        return max(floor, self.limit - self.elapsed())

    def expired(self) -> bool:
        return self.limit is not None and self.elapsed() >= self.limit

    def check(self, what: str) -> None:
        if self.expired():
            raise DeadlineExpired(what, self.limit)

    def require(self, seconds: float, what: str) -> None:
        """Raise :class:`DeadlineExpired` (naming ``what`` and the estimate) when a step
        estimated at ``seconds`` cannot finish in the time left: a step that cannot be
        interrupted (building a large model) is better not started."""
        left = self.remaining()
        if left is not None and seconds > left:
            raise DeadlineExpired(f"{what} (estimated {seconds:.3g} s, {left:.3g} s left)",
                                  self.limit)

    def share(self, fraction: float, cap: float | None = None) -> float | None:
        left = self.remaining()
        if left is None:
            return cap
        part = fraction * left
        return part if cap is None else min(cap, part)

    def fits(self, seconds: float, fraction: float = 1.0) -> bool:
        """Whether a step estimated at ``seconds`` fits in ``fraction`` of what is left."""
        left = self.remaining()
        return left is None or seconds <= fraction * left


# ----------------------------------------------------------------- the registry's deadline
# ``solvers.solve(..., time_limit=T)`` makes the deadline of the call current for its
# duration: the shared schedule-building helpers (solvers._schedules) and the replay check
# it as they go, so that a solver built from them stops at the limit without threading a
# deadline through every call (DeadlineExpired reaches the registry, which answers
# time_limit with no schedule).  A nested solve without a limit of its own inherits it.
_CURRENT: contextvars.ContextVar = contextvars.ContextVar("remat_deadline", default=None)


def current() -> Deadline:
    """The deadline of the solve in progress (one that never expires outside any)."""
    d = _CURRENT.get()
    return d if d is not None else _NEVER


def check(what: str) -> None:
    """:meth:`Deadline.check` of the current deadline."""
    d = _CURRENT.get()
    if d is not None:
        d.check(what)


@contextlib.contextmanager
def current_is(deadline: "Deadline | None"):
    """Make ``deadline`` current meanwhile (None: keep the one in force)."""
    if deadline is None or deadline.limit is None:
        yield
        return
    token = _CURRENT.set(deadline)
    try:
        yield
    finally:
        _CURRENT.reset(token)


_NEVER = Deadline(None)
