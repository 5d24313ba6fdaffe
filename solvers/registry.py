"""The solver registry: every solver has the signature ``solve(chain, budget, **options)``
and returns a :class:`~remat_theory.model.solution.Solution`.

:func:`solve` is the one entry point: it validates the input, times the solver, and
replays the schedule it returns through the simulator, so that no solver's claim is ever
trusted on its own word (the networkx ``validate_flows`` habit).
"""
from __future__ import annotations

import contextlib
import importlib
import inspect
import math
import pkgutil
import time
from dataclasses import dataclass
from typing import Callable

from remat_theory.model.chain import Chain
from remat_theory.model.errors import InvalidScheduleError, RematError, SolverError
from remat_theory.model.simulator import check_budget, simulate
from remat_theory.model.solution import Solution

# Relative tolerance between a solver's claimed makespan and the simulated one: the two
# are sums of the same floats in possibly different orders, nothing more.
MAKESPAN_RTOL = 1e-9


@dataclass(frozen=True)
class SolverInfo:
    name: str
    func: Callable[..., Solution]
    optimal_for: str  # class of schedules it is optimal for ("none" for heuristics)
    exact: bool  # True for exact optimizers (dp, dp-weak, ilp, exhaustive)
    description: str
    options: tuple  # names of keyword options it accepts


_REGISTRY: dict[str, SolverInfo] = {}
_RESERVED = ("chain", "budget", "solver")
_LOADED = False


def register(name: str, *, optimal_for: str, exact: bool = False, description: str = ""):
    """Decorator: register ``func(chain, budget, **options)`` under ``name``."""

    def deco(func):
        if name in _REGISTRY and _REGISTRY[name].func is not func:
            raise SolverError(f"solver name {name!r} is registered twice")
        params = inspect.signature(func).parameters
        opts = tuple(p for p in params if p not in ("chain", "budget")
                     and params[p].kind == inspect.Parameter.KEYWORD_ONLY)
        clash = [o for o in opts if o in _RESERVED]
        if clash:
            raise SolverError(f"solver {name!r}: option name {clash[0]!r} is reserved by "
                              f"solvers.solve(chain, budget, solver, **options)")
        doc = description or (inspect.getdoc(func) or "").split("\n\n")[0].replace("\n", " ")
        _REGISTRY[name] = SolverInfo(name, func, optimal_for, exact, doc, opts)
        return func

    return deco


def _load_all() -> None:
    global _LOADED
    if _LOADED:
        return
    import solvers

    for mod in pkgutil.iter_modules(solvers.__path__):
        if not mod.name.startswith("_") and mod.name != "registry":
            importlib.import_module(f"solvers.{mod.name}")
    _LOADED = True


def names() -> list[str]:
    """Registered solver names, in registration order of their modules (sorted)."""
    _load_all()
    return sorted(_REGISTRY)


def get(name: str) -> SolverInfo:
    _load_all()
    if name not in _REGISTRY:
        raise SolverError(f"unknown solver {name!r} (known: {', '.join(sorted(_REGISTRY))})")
    return _REGISTRY[name]


def verify_solution(chain: Chain, sol: Solution, budget: int | None) -> None:
    """Replay ``sol.schedule`` and check the solver's claims; raise SolverError if false."""
    if sol.schedule is None:
        return
    allow_drop = bool(sol.info.get("allow_drop", False))
    try:
        sim = simulate(chain, sol.schedule, budget, allow_drop=allow_drop)
    except InvalidScheduleError as e:
        raise SolverError(f"solver {sol.solver!r} returned an invalid schedule: {e}") from None
    if sol.makespan is None or not math.isclose(sol.makespan, sim.makespan,
                                                rel_tol=MAKESPAN_RTOL, abs_tol=1e-12):
        raise SolverError(f"solver {sol.solver!r} claims makespan {sol.makespan} but the "
                          f"simulator measures {sim.makespan}")
    if sol.peak_memory != sim.peak_memory:
        raise SolverError(f"solver {sol.solver!r} claims peak {sol.peak_memory} but the "
                          f"simulator measures {sim.peak_memory}")


def solve(chain: Chain, budget: int, solver: str = "store-all", **options) -> Solution:
    """Solve ``chain`` under ``budget`` (bytes) with the named solver, then verify.

    Unknown options raise :class:`SolverError` naming them.  The returned schedule has been
    replayed through the simulator and its makespan and peak match the solver's claims.
    """
    if not isinstance(chain, Chain):
        raise RematError(f"chain must be a Chain, got {type(chain).__name__}")
    budget = check_budget(budget)
    if budget is None:
        raise RematError("budget is required")
    info = get(solver)
    bad = [k for k in options if k not in info.options]
    if bad:
        accepted = ", ".join(info.options) or "none"
        raise SolverError(f"solver {solver!r} does not take option {bad[0]!r} (it takes: {accepted})")
    t0 = time.perf_counter()
    sol = info.func(chain, budget, **options)
    elapsed = time.perf_counter() - t0
    if not isinstance(sol, Solution):
        raise SolverError(f"solver {solver!r} returned {type(sol).__name__}, not a Solution")
    if not sol.wall_time:
        sol = sol.replace(wall_time=elapsed)
    verify_solution(chain, sol, budget)
    return sol


@contextlib.contextmanager
def registered(name: str, func: Callable[..., Solution], **kwargs):
    """Register ``func`` under ``name`` for the duration of a ``with`` block: for testing
    a solver of your own with ``remat verify``'s machinery, or a deliberately wrong one."""
    _load_all()
    register(name, **kwargs)(func)
    try:
        yield name
    finally:
        _REGISTRY.pop(name, None)
