"""Argument checks shared by every layer (the hypothesis ``internal/validation.py`` habit).

Each helper checks one value, returns it normalised (a plain ``int``, ``float`` or
``bool``), and otherwise raises the error type the caller names, with a message that names
the field and the value: ``solver 'periodic': option segments = 2.5 is not an integer``.
``owner`` is the prefix that says whose field it is (``"solver 'periodic': option"``);
without it the message starts with the field name.  ``bool`` is never accepted as a
number (``True`` is an ``int`` in Python, never a count here).
"""
from __future__ import annotations

import math
import numbers
from typing import Iterable

from remat_theory.model.errors import RematError

__all__ = ["check_int", "check_bool", "check_real", "check_positive", "check_choice",
           "option_owner"]


def option_owner(solver: str) -> str:
    """The ``owner`` prefix of a solver option: ``solver 'NAME': option``."""
    return f"solver {solver!r}: option"


def _field(name: str, owner: str | None) -> str:
    return f"{owner} {name}" if owner else name


def check_int(value, name: str, *, minimum: int | None = None, maximum: int | None = None,
              error: type = RematError, owner: str | None = None) -> int:
    """An integer (numpy integers too, never bool) in ``[minimum, maximum]``."""
    what = _field(name, owner)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise error(f"{what} = {value!r} is not an integer")
    value = int(value)
    if minimum is not None and value < minimum:
        raise error(f"{what} = {value} must be >= {minimum}")
    if maximum is not None and value > maximum:
        raise error(f"{what} = {value} must be <= {maximum}")
    return value


def check_bool(value, name: str, *, error: type = RematError, owner: str | None = None) -> bool:
    """Exactly ``True`` or ``False`` (not 0, 1 or a string)."""
    if not isinstance(value, bool):
        raise error(f"{_field(name, owner)} = {value!r} must be True or False")
    return value


def check_real(value, name: str, *, minimum: float | None = None, error: type = RematError,
               owner: str | None = None) -> float:
    """A finite real number (never bool), at least ``minimum`` when given."""
    what = _field(name, owner)
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise error(f"{what} = {value!r} must be a finite number"
                    + ("" if minimum is None else f" >= {minimum:g}"))
    if minimum is not None and value < minimum:
        raise error(f"{what} = {value!r} must be a finite number >= {minimum:g}")
    return float(value)


def check_positive(value, name: str, *, error: type = RematError, owner: str | None = None,
                   unit: str = "") -> float:
    """A finite real number > 0 (a time limit in seconds, a scale)."""
    what = _field(name, owner)
    if (isinstance(value, bool) or not isinstance(value, numbers.Real)
            or not math.isfinite(value) or value <= 0):
        raise error(f"{what} = {value!r} must be a positive number" + (f" of {unit}" if unit else ""))
    return float(value)


def check_choice(value, name: str, choices: Iterable, *, error: type = RematError,
                 owner: str | None = None):
    """One of ``choices`` (compared with ==)."""
    choices = tuple(choices)
    if value not in choices:
        raise error(f"{_field(name, owner)} = {value!r} is not one of "
                    f"{', '.join(map(str, choices))}")
    return value
