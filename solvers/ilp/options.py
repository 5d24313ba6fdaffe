"""The options of the ``ilp`` solver, in one record.

:class:`IlpOptions` holds what :func:`solvers.ilp.solve_ilp` takes as keyword options; the
registry checks each against the option schema of the solver's registration (raising
:class:`~remat_theory.model.errors.SolverOptionError` naming the option and the value)
before any model is built.
"""
from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PASSES = None  # the number proven sufficient (proofs/ilp.md, Theorem 1)
DEFAULT_MAX_BINARIES = 100_000


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
        # Types and ranges are checked by the registry before the solver runs (the option
        # schema of solvers/ilp/solver.py's registration); here only certify's default is
        # resolved and numbers made plain Python ones (numpy integers are accepted there).
        if self.certify is None:
            object.__setattr__(self, "certify", self.passes is None)
        if self.time_limit is not None:
            object.__setattr__(self, "time_limit", float(self.time_limit))
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
