"""The options of the ``ilp`` solver, validated in one place.

:class:`IlpOptions` holds what :func:`solvers.ilp.solve_ilp` takes as keyword options; its
constructor checks every one and raises :class:`~remat_theory.model.errors.SolverOptionError`
naming the option and the value, before any model is built.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from remat_theory.model.errors import SolverOptionError

from solvers.ilp.backends import SOLVERS

DEFAULT_PASSES = None  # the number proven sufficient (proofs/ilp.md, Theorem 1)
DEFAULT_MAX_BINARIES = 100_000


def _is_int(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, numbers.Integral)


@dataclass(frozen=True)
class IlpOptions:
    """The options of one ``ilp`` run (see :func:`solvers.ilp.solve_ilp` for their meaning).

    ``certify=None`` is resolved here: on for the proven model (``passes=None``), off
    otherwise."""

    time_limit: float | None = None
    mip_solver: str = "highs"
    passes: int | None = DEFAULT_PASSES
    pairs: bool = False
    warm_start: bool = True
    threads: int = 1
    max_binaries: int = DEFAULT_MAX_BINARIES
    certify: bool | None = None

    def __post_init__(self) -> None:
        if not _is_int(self.max_binaries) or self.max_binaries < 1:
            raise SolverOptionError(f"ilp: max_binaries = {self.max_binaries!r} must be an integer >= 1")
        if self.mip_solver not in SOLVERS:
            raise SolverOptionError(f"ilp: mip_solver = {self.mip_solver!r} is unknown "
                              f"(known: {', '.join(SOLVERS)})")
        tl = self.time_limit
        if tl is not None and (isinstance(tl, bool) or not isinstance(tl, numbers.Real)
                               or not math.isfinite(tl) or tl <= 0):
            raise SolverOptionError(f"ilp: time_limit = {tl!r} must be a positive number of seconds")
        if self.passes is not None and (not _is_int(self.passes) or self.passes < 1):
            raise SolverOptionError(f"ilp: passes = {self.passes!r} must be an integer >= 1 (or None)")
        if not isinstance(self.warm_start, bool):
            raise SolverOptionError(f"ilp: warm_start = {self.warm_start!r} must be True or False")
        if not _is_int(self.threads) or self.threads < 1:
            raise SolverOptionError(f"ilp: threads = {self.threads!r} must be an integer >= 1")
        if not isinstance(self.pairs, bool):
            raise SolverOptionError(f"ilp: pairs = {self.pairs!r} must be True or False")
        if self.certify is not None and not isinstance(self.certify, bool):
            raise SolverOptionError(f"ilp: certify = {self.certify!r} must be True, False or None "
                              f"(default)")
        if self.certify is None:
            object.__setattr__(self, "certify", self.passes is None)
        # plain Python numbers from here on (numpy integers are accepted above)
        if tl is not None:
            object.__setattr__(self, "time_limit", float(tl))
        for name in ("passes", "threads", "max_binaries"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, int(value))

    @property
    def proven(self) -> bool:
        """The model proven lossless over all schedules (``passes=None``)."""
        return self.passes is None

    @property
    def helper_cap(self) -> int:
        """The most binaries of the models the certified mode builds besides the proven one
        (the moment relaxation, the fast mode): ``max_binaries``, but never less than its
        default (a smaller ``max_binaries`` is about the proven model: the tests lower it to
        force an answer without it)."""
        return max(self.max_binaries, DEFAULT_MAX_BINARIES)
