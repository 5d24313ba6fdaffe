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
from typing import Any, Iterable, Sequence

import numpy as np

from remat_theory.model.errors import ChainError, RematError

__all__ = ["check_int", "check_bool", "check_real", "check_positive", "check_choice",
           "option_owner", "format_number", "check_time_entry", "check_size_entry",
           "check_flag_entry", "check_rate", "check_array"]


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


# ----------------------------------------------------------------- chain entries
# One entry of a chain field (remat_theory.model.fields.KINDS): ChainError naming the field
# and the index.

def format_number(v) -> str:
    """A number as an error message shows it: as written when short (``-2.0``, ``7``),
    else compactly (``1e+308``, ``1.235e+20``), never a 309-digit integer."""
    text = repr(v)
    if len(text) <= 12:
        return text
    try:
        return f"{float(v):.4g}"
    except OverflowError:  # an integer beyond the float range: mantissa and exponent by hand
        digits = str(abs(int(v)))
        mantissa = f"{digits[0]}.{digits[1:4]}".rstrip("0").rstrip(".")
        return f"{'-' if v < 0 else ''}{mantissa}e+{len(digits) - 1}"
    except (TypeError, ValueError):
        return text[:37] + "..."


def _not_a_number(field_name: str, index: int, value: Any) -> ChainError:
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return ChainError(f"{field_name}[{index}] = {text} is not a number")


def check_time_entry(field_name: str, index: int, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _not_a_number(field_name, index, value)
    return _finite_non_negative(f"{field_name}[{index}]", value, value_shown=False)


def check_rate(field_name: str, index: Any, value: Any) -> float:
    """A rate (bytes per second): a finite number >= 0; ``index`` None for a field of one
    number (``bandwidth``), named alone in the error."""
    where = field_name if index is None else f"{field_name}[{index}]"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        text = repr(value)
        raise ChainError(f"{where} = {text[:37] + '...' if len(text) > 40 else text} is not "
                         f"a number (bytes per second)")
    return _finite_non_negative(where, value, value_shown=True,
                                inf_hint=" (leave it out for no copy channel)")


def _finite_non_negative(where: str, value: Any, *, value_shown: bool, inf_hint: str = "") -> float:
    """``value`` (a real number) as a float, refused when it overflows, is NaN, infinite or
    negative; a negative one is shown as given (``value_shown``) or as its float."""
    try:
        v = float(value)
    except OverflowError:  # an integer beyond the float range
        raise ChainError(f"{where} = {format_number(value)} is not finite") from None
    if math.isnan(v):
        raise ChainError(f"{where} is NaN")
    if math.isinf(v):
        raise ChainError(f"{where} = {v} is not finite{inf_hint}")
    if v < 0:
        raise ChainError(f"{where} = {format_number(value if value_shown else v)} is negative")
    return v


def check_size_entry(field_name: str, index: int, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _not_a_number(field_name, index, value)
    if isinstance(value, numbers.Integral):
        v = int(value)
    else:
        f = float(value)
        if math.isnan(f):
            raise ChainError(f"{field_name}[{index}] is NaN")
        if math.isinf(f):
            raise ChainError(f"{field_name}[{index}] = {f} is not finite")
        if not f.is_integer():
            raise ChainError(f"{field_name}[{index}] = {format_number(value)} is not an integer "
                             f"(sizes are bytes)")
        v = int(f)
    if v < 0:
        raise ChainError(f"{field_name}[{index}] = {format_number(v)} is negative")
    return v


def check_flag_entry(field_name: str, index: int, value: Any) -> bool:
    """A boolean entry (JSON ``true`` / ``false``; numpy booleans too), never a number."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    raise ChainError(f"{field_name}[{index}] = {text} is not a boolean (true or false)")


def check_array(field_name: str, values: Any, length: int, checker) -> tuple:
    """The entries of a field, each checked by ``checker`` (ChainError naming the field,
    the index and the value)."""
    return check_array_and_numpy(field_name, values, length, checker)[0]


def check_array_and_numpy(field_name: str, values: Any, length: int, checker
                          ) -> tuple[tuple, "np.ndarray | None"]:
    """:func:`check_array`, with the entries as a numpy array when the check made one (a
    long array of plain numbers: int64 sizes, float64 times), else None."""
    what = "booleans" if checker is check_flag_entry else "numbers"
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) and not hasattr(values, "__len__"):
        raise ChainError(f"{field_name} must be a list of {what}, got {type(values).__name__}")
    try:
        values = list(values)
    except TypeError:
        raise ChainError(f"{field_name} must be a list of {what}, got "
                         f"{type(values).__name__}") from None
    if len(values) != length:
        raise ChainError(f"{field_name} has length {len(values)}, expected {length}")
    fast = _fast_array(values, checker)
    if fast is not None:
        return fast
    return tuple(checker(field_name, i, v) for i, v in enumerate(values)), None


def _fast_array(values: list, checker) -> tuple | None:
    """The checked entries of a long array of plain Python numbers, checked at once (numpy),
    with their numpy array (None for flags), or None when any entry needs the one-by-one
    check (another type, or a value that check
    refuses: it then names the field, the index and the value).  The result is the one of
    the one-by-one check: ``float(v)`` for a time, the ``int`` itself for a size, the
    ``bool`` for a flag."""
    if len(values) < 64:
        return None
    types = set(map(type, values))
    try:
        if checker is check_flag_entry:
            return (tuple(values), None) if types == {bool} else None
        if checker is check_size_entry:
            if types != {int}:
                return None
            arr = np.fromiter(values, dtype=np.int64, count=len(values))
            return (tuple(values), arr) if bool((arr >= 0).all()) else None
        if checker is check_time_entry:
            if not types <= {int, float}:
                return None
            # OverflowError: an int beyond the float range
            floats = tuple(values) if types == {float} else tuple(map(float, values))
            arr = np.fromiter(floats, dtype=np.float64, count=len(floats))
            return (floats, arr) if bool((np.isfinite(arr) & (arr >= 0)).all()) else None
    except (OverflowError, ValueError):
        return None
    return None
