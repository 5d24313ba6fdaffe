"""Solvers: exact optimizers and baselines, all with one signature and one result type.

Every module of this package registers its solvers with :func:`solvers.registry.register`;
the registry imports them all on first use.  Use :func:`solve` (which replays every
returned schedule through the simulator) rather than calling a solver function directly.
"""
from solvers.registry import get, names, register, solve, verify_solution

__all__ = ["get", "names", "register", "solve", "verify_solution"]
