"""How the command line spells the facts the library returns.

The library's errors and notes carry their ways out as facts
(:class:`~remat_theory.model.errors.Remedy`: an option and a value that fits, another
solver); this module spells them in the syntax of the command that was run: ``--slots 40
or less`` in ``remat solve``, ``-o max_stages=12 or more`` for an option without a flag of
its own, ``--allow-drop`` in ``remat simulate``.  Nothing here reads a message's wording.
"""
from __future__ import annotations

import json
import re

from remat_theory.model.errors import AT_LEAST, AT_MOST, Note, RematError, Remedy

#: Options with a flag of their own, per command (the others are ``-o KEY=VALUE``).
FLAGS = {
    "solve": {"slots": "--slots", "time_limit": "--time-limit"},
    "simulate": {"allow_drop": "--allow-drop"},
    "compare": {"time_limit": "--time-limit"},
    "verify": {"time_limit": "--time-limit"},
    "plot": {"time_limit": "--time-limit"},
}
#: How a command is told which solver to run.
SOLVER_FLAGS = {"solve": "--solver", "compare": "--solvers", "verify": "--solvers",
                "plot": "--solvers", "hard": "--solver"}
#: Boolean options whose flag takes no value.
SWITCHES = {"allow_drop"}

_WORDS = {AT_MOST: " or less", AT_LEAST: " or more"}


def value_text(value) -> str:
    """A value as typed on the command line (JSON spelling: ``true``, ``null``)."""
    if value is None:  # a value of the user's choice
        return "N"
    if isinstance(value, str):
        return value
    return json.dumps(value)


def option_text(name: str, relation: str, value, command: str | None) -> str:
    flag = FLAGS.get(command or "", {}).get(name)
    if flag is not None and name in SWITCHES and value is True:
        return flag
    text = (f"{flag} {value_text(value)}" if flag is not None
            else f"-o {name}={value_text(value)}")
    return text + _WORDS.get(relation, "")


def remedy_text(remedy: Remedy, command: str | None) -> str:
    """One remedy as the user of ``command`` types it."""
    opts = " ".join(option_text(k, r, v, command) for k, r, v in remedy.options)
    if remedy.solver is not None:
        flag = SOLVER_FLAGS.get(command or "")
        text = f"use {flag} {remedy.solver}" if flag else f"use solver {remedy.solver}"
        if opts:
            text += f" {opts}" if flag else f" with {opts}"
    else:
        text = f"use {opts}"
    return text + (f" ({remedy.note})" if remedy.note else "")


def remedies_text(remedies, command: str | None) -> str:
    return ", or ".join(remedy_text(r, command) for r in remedies)


def error_text(exc: BaseException, command: str | None) -> str:
    """A library error as one line for the user of ``command``: its problem, then its
    remedies in that command's syntax."""
    if isinstance(exc, RematError) and exc.remedies:
        return one_line(f"{exc.problem}; {remedies_text(exc.remedies, command)}")
    return one_line(str(exc))


def note_text(note: Note | str, command: str | None) -> str:
    """A solver's :class:`~remat_theory.model.errors.Note` as a ``remat: note:`` line."""
    if isinstance(note, str):
        return one_line(f"remat: note: {note}")
    text = note.text
    if note.remedies:
        text += f"; {remedies_text(note.remedies, command)}"
    return one_line(f"remat: note: {text}")


_HUGE = re.compile(r"\b\d{19,}\b")


def _compact_int(m: re.Match) -> str:
    digits = m.group(0)
    mantissa = f"{digits[0]}.{digits[1:4]}".rstrip("0").rstrip(".")
    return f"{mantissa}e+{len(digits) - 1}"


def one_line(message) -> str:
    """A message on one line, at most about 600 characters, integers of more than 18 digits
    in e-notation (an input can hold a 400-digit number) and control characters escaped (a
    chain's name can hold newlines and terminal escapes)."""
    text = printable(" ".join(str(message).split()))
    text = _HUGE.sub(_compact_int, text)
    return text if len(text) <= 600 else text[:597] + "..."


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with control characters (C0, DEL, C1, and the bidirectional overrides that
    reorder what a terminal shows) escaped as ``\\xNN`` / ``\\uNNNN``, so that a name read
    from a file cannot move the cursor, clear the screen or split a line."""
    def esc(m):
        c = ord(m.group(0))
        return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"
    return _CONTROL.sub(esc, str(text))
