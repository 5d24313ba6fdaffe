"""Option schemas: what each solver option is, checked by the registry before the solver runs.

A solver declares its options in its registration (``register(options={"slots":
Option("int", "...", minimum=1, none=True), ...})``); the default is the one of the
function's signature.  :func:`solvers.registry.solve` checks every option given (a
variant's fixed ones included) against its :class:`Option` and passes the normalised value
(a plain ``int``, ``float`` or ``bool``) on, so a solver body never checks a value's type or
range again; what depends on several options or on the chain beyond its length (exhaustive
search's ``schedule_class`` with ``allow_drop``) stays in the solver.  ``remat solvers
NAME`` prints each option's :meth:`Option.help` (as scipy's ``show_options`` does).

Every option error is made by :func:`option_error` (the one place that picks its class).
The checks are those of :mod:`remat_theory.model.validation`.
"""
from __future__ import annotations

import inspect
import numbers
from dataclasses import dataclass
from typing import Any, Mapping

from remat_theory.model import fields as chain_fields
from remat_theory.model.errors import SolverError, SolverOptionError
from remat_theory.model.solution import CLASS_NONE, FEASIBLE, OPTIMAL, Solution
from remat_theory.model.validation import (check_bool, check_choice, check_int, check_positive,
                                           check_real, option_owner)

__all__ = ["Option", "option_error", "check_all", "KINDS", "supports_of", "schema_of",
           "as_heuristic"]


def option_error(message: str) -> Exception:
    """The exception for a misused option (the class is chosen here, and only here)."""
    return SolverOptionError(message)


#: ``int`` (``minimum``/``maximum``; ``maximum="L"``: the chain's length, ``"L-2"``: two
#: less), ``real`` (``minimum``), ``seconds`` (a positive number of seconds), ``fraction`` (a
#: number in (0, 1]), ``bool``, ``choice`` (one of ``choices``), ``str``, ``indices`` (a
#: list of integers, each in ``[minimum, maximum]``; normalised to a sorted tuple without
#: repeats).
KINDS = ("int", "real", "seconds", "fraction", "bool", "choice", "str", "indices")


def _maximum_of(maximum, chain):
    """``maximum`` with ``"L"`` / ``"L-k"`` read on ``chain`` (None when it is not known)."""
    if not isinstance(maximum, str):
        return maximum
    return None if chain is None else chain.length + int(maximum[1:] or 0)


def _maximum_text(maximum) -> str:
    if isinstance(maximum, str):
        return "the number of stages" + maximum[1:].replace("-", " - ")
    return str(maximum)


@dataclass(frozen=True)
class Option:
    """One option of a solver.

    kind : one of :data:`KINDS`.
    doc : one line: what it does.
    minimum, maximum : the range of an ``int`` (``maximum="L"``: at most the chain's
        length) or the minimum of a ``real``.
    choices : the values of a ``choice``.
    none : None is accepted too (it means the solver's default behaviour).
    """

    kind: str
    doc: str
    minimum: Any = None
    maximum: Any = None
    choices: tuple = ()
    none: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"option kind {self.kind!r} is not one of {', '.join(KINDS)}")

    def check(self, value, name: str, solver: str, chain=None):
        """``value`` normalised, or :func:`option_error` naming the solver, the option and
        the value.  ``chain`` (when known) gives ``maximum="L"`` its value."""
        owner = option_owner(solver)
        if value is None:
            if self.none:
                return None
            raise option_error(f"{owner} {name} = None is not allowed: it must be "
                               f"{self.type_text()}")
        kind, err = self.kind, option_error
        if kind == "int":
            return check_int(value, name, minimum=self.minimum,
                             maximum=_maximum_of(self.maximum, chain), error=err, owner=owner)
        if kind == "indices":
            return self._check_indices(value, name, owner, chain)
        if kind == "real":
            return check_real(value, name, minimum=self.minimum, error=err, owner=owner)
        if kind == "seconds":
            return check_positive(value, name, error=err, owner=owner, unit="seconds")
        if kind == "fraction":
            if (isinstance(value, bool) or not isinstance(value, numbers.Real)
                    or not 0 < value <= 1):
                raise err(f"{owner} {name} = {value!r} must be a number in (0, 1]")
            return float(value)
        if kind == "bool":
            return check_bool(value, name, error=err, owner=owner)
        if kind == "choice":
            return check_choice(value, name, self.choices, error=err, owner=owner)
        if not isinstance(value, str):
            raise err(f"{owner} {name} = {value!r} must be a string")
        return value

    def _check_indices(self, value, name: str, owner: str, chain) -> tuple:
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise option_error(f"{owner} {name} = {value!r} must be a list of integers")
        maximum = _maximum_of(self.maximum, chain)
        out = set()
        for v in value:
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise option_error(f"{owner} {name} = {value!r}: {v!r} is not an integer")
            v = int(v)
            if ((self.minimum is not None and v < self.minimum)
                    or (maximum is not None and v > maximum)):
                lo = "" if self.minimum is None else f"{self.minimum} <= "
                hi = "" if self.maximum is None else f" <= {_maximum_text(self.maximum)}"
                now = ("" if not isinstance(self.maximum, str) or maximum is None
                       else f" = {maximum} on this chain")
                raise option_error(f"{owner} {name} = {value!r}: {v} is out of range (each "
                                   f"must be {lo}j{hi}{now})")
            out.add(v)
        return tuple(sorted(out))

    def type_text(self) -> str:
        """What a value must be, in words: ``an integer >= 1``."""
        kind = self.kind
        if kind == "int":
            text = "an integer"
            if self.minimum is not None:
                text += f" >= {self.minimum}"
            if self.maximum is not None:
                text += f" and <= {_maximum_text(self.maximum)}"
        elif kind == "indices":
            text = "a list of integers"
            if self.minimum is not None:
                text += f" >= {self.minimum}"
            if self.maximum is not None:
                text += f" and <= {_maximum_text(self.maximum)}"
        elif kind == "real":
            text = "a finite number" + ("" if self.minimum is None else f" >= {self.minimum:g}")
        elif kind == "seconds":
            text = "a positive number of seconds"
        elif kind == "fraction":
            text = "a number in (0, 1]"
        elif kind == "bool":
            text = "true or false"
        elif kind == "choice":
            text = "one of " + ", ".join(map(str, self.choices))
        else:
            text = "a string"
        return text + (", or None" if self.none else "")

    def help(self, name: str, default=None, has_default: bool = True) -> str:
        """One line: ``slots: an integer >= 1, or None (default None). Memory slots ...``."""
        shown = f" (default {default!r})" if has_default else ""
        return f"{name}: {self.type_text()}{shown}. {self.doc}"


def check_all(schema: dict, options: dict, solver: str, chain=None) -> dict:
    """``options`` with every value that has a schema entry checked and normalised."""
    return {k: schema[k].check(v, k, solver, chain) if k in schema else v
            for k, v in options.items()}


# ------------------------------------------------------------- registration checks

def supports_of(name: str, supports) -> tuple:
    """A registration's ``supports``: optional chain fields, checked, in table order."""
    known = chain_fields.optional_names()
    if isinstance(supports, str):
        supports = (supports,)
    for f in supports:
        if f not in known:
            raise SolverError(f"solver {name!r}: supports names {f!r}, which is not an optional "
                              f"chain field (known: {', '.join(known)})")
    return tuple(f for f in known if f in supports)


def schema_of(name: str, schema: Mapping | None, opts: tuple) -> dict:
    """A registration's option schema, checked against the options the solver takes."""
    for k, spec in (schema or {}).items():
        if k not in opts:
            raise SolverError(f"solver {name!r}: the option schema names {k!r}, which the "
                              f"solver does not take")
        if not isinstance(spec, Option):
            raise SolverError(f"solver {name!r}: option {k!r} must be declared as an Option")
    return dict(schema or {})


def as_heuristic(sol: Solution, missing: tuple) -> Solution:
    """A plug-in's answer on a chain using fields it declares nothing about: a schedule
    (replayed, so valid), never a claim (status feasible, no class, bound or smallest
    budget)."""
    note = (f"{sol.solver} declares no model of {', '.join(missing)}: answered as a "
            f"heuristic, not proven optimal")
    return sol.replace(status=FEASIBLE if sol.status == OPTIMAL else sol.status,
                       optimal_for=CLASS_NONE, bound=None, min_budget=None,
                       message=f"{sol.message}; {note}" if sol.message else note)


# ---------------------------------------------------------------- options read from a signature
RESERVED = ("chain", "budget", "solver")  # the names solvers.solve takes itself


def options_of(func, name: str) -> tuple:
    params = inspect.signature(func).parameters
    opts = tuple(p for p in params if p not in ("chain", "budget")
                 and params[p].kind == inspect.Parameter.KEYWORD_ONLY)
    clash = [o for o in opts if o in RESERVED]
    if clash:
        raise SolverError(f"solver {name!r}: option name {clash[0]!r} is reserved by "
                          f"solvers.solve(chain, budget, solver, **options)")
    return opts


def takes_any_option(func) -> bool:
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params)


def defaults_of(func, opts: tuple) -> dict:
    params = inspect.signature(func).parameters
    return {o: params[o].default for o in opts if params[o].default is not inspect.Parameter.empty}
