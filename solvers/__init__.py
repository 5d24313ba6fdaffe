"""Solvers: exact optimizers and baselines, all with one signature and one result type.

Every module of this package registers its solvers with :func:`solvers.registry.register`,
which holds every fact about a solver (class, stage limits, variants, Drop, CLI note); the
registry imports them all on first use, then the plug-ins of the entry-point group
``remat.solvers``.  Use :func:`solve` (which replays every returned schedule through the
simulator) rather than calling a solver function directly; it also takes a variant label
(``ilp-fast``) or a ``package.module:function`` path of your own.
"""
from solvers.registry import (Variant, get, names, register, registered, resolve, solve,
                              variant, variants, verify_solution)

__all__ = ["Variant", "check_feasible", "get", "names", "register", "registered", "resolve",
           "solve", "variant", "variants", "verify_solution"]


def check_feasible(chain, budget: int) -> None:
    """Raise :class:`~remat_theory.model.errors.InfeasibleBudgetError` when no schedule at
    all fits ``budget`` (:func:`solvers.feasibility.check_feasible`)."""
    from solvers.feasibility import check_feasible as check

    check(chain, budget)
