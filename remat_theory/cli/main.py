"""The ``remat`` command line (docs/README.md lists the subcommands).

Subcommands live in :mod:`remat_theory.cli.commands`, one module each, discovered at start:
a module defines ``NAME``, ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``.

Errors never show a traceback:

* bad input of any kind (a package error, a numeric overflow, input nested too deeply, a
  problem too large for memory) prints one line ``remat: error: ...`` naming the field,
  index, step or option, in the command line's own syntax (``-o allow_drop=true``, not
  ``allow_drop=True``), and exits with code 2;
* any other exception is a bug of remat: one line ``remat: internal error (this is a bug):
  ...`` naming the exception and where it was raised, exit code 1.  Set ``REMAT_TRACEBACK=1``
  to see the full traceback instead.
"""
from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import re
import sys
import traceback

from remat_theory.model.errors import RematError

USER_ERROR, BUG = 2, 1


def _commands():
    from remat_theory.cli import commands

    mods = []
    for m in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if m.name.startswith("_"):
            continue
        mods.append(importlib.import_module(f"{commands.__name__}.{m.name}"))
    return mods


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``remat: error: ...``, exit code 2)."""

    def error(self, message):  # noqa: D401 - argparse hook
        self.exit(2, f"{self.prog.split()[0]}: error: {self.prog}: {one_line(message)}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="remat",
        description="Find, prove and confirm optimal activation re-materialization schedules.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for mod in sorted(_commands(), key=lambda m: getattr(m, "ORDER", 50)):
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=getattr(mod, "DESCRIPTION", mod.HELP))
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


# Python spellings of options in solver messages, and what a command-line user types.
_FLAGS = {"slots": "--slots {v}", "time_limit": "--time-limit {v}"}
_SIMULATE_FLAGS = {"allow_drop": "--allow-drop"}


def _option(key: str, value: str, command: str | None) -> str:
    if command == "simulate" and key in _SIMULATE_FLAGS:
        return _SIMULATE_FLAGS[key]
    if command == "solve" and key in _FLAGS:
        return _FLAGS[key].format(v=value)
    return f"-o {key}={ {'True': 'true', 'False': 'false', 'None': 'null'}.get(value, value)}"


def _compact_int(m: re.Match) -> str:
    digits = m.group(0).replace(",", "")
    mantissa = f"{digits[0]}.{digits[1:4]}".rstrip("0").rstrip(".")
    return f"{mantissa}e+{len(digits) - 1}"


def one_line(message: str) -> str:
    """A message on one line, at most about 600 characters."""
    text = " ".join(str(message).split())
    return text if len(text) <= 600 else text[:597] + "..."


def cli_message(message: str, command: str | None = None) -> str:
    """A solver's or the model's error message as a command-line user should read it: option
    hints in CLI syntax (``pass slots=S`` -> ``use --slots S``; ``passes=1, pairs=True`` ->
    ``-o passes=1 -o pairs=true``), integers of more than 18 digits in compact form, one line."""
    text = re.sub(r"\bpass (\w+)=([^\s,;)]+)",
                  lambda m: "use " + _option(m.group(1), m.group(2), command), message)
    text = re.sub(r"\boption (\w+) needs (\w+)=([^\s,;)]+)",
                  lambda m: f"{_option(m.group(1), 'true', command)} needs "
                            f"{_option(m.group(2), m.group(3), command)}", text)
    text = re.sub(r"\((passes)=(\d+), (pairs)=True\b",
                  lambda m: f"(-o passes={m.group(2)} -o pairs=true", text)
    text = re.sub(r"\braise (max_\w+)\b", r"raise it with -o \1=N", text)
    text = re.sub(r"\b\d{1,3}(?:,\d{3}){6,}\b|\b\d{19,}\b", _compact_int, text)
    return one_line(text)


def _where(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    if not tb:
        return ""
    f = tb[-1]
    path = f.filename.replace(os.sep, "/")
    for root in ("remat_theory/", "solvers/"):
        if root in path:
            path = root + path.rsplit(root, 1)[1]
            break
    else:
        path = os.path.basename(path)
    return f" (in {f.name}, {path}:{f.lineno})"


def report(exc: BaseException, command: str | None) -> int:
    """Print the one line for ``exc`` on stderr and return the exit code (see the module
    docstring)."""
    if isinstance(exc, RematError):
        print(f"remat: error: {cli_message(str(exc), command)}", file=sys.stderr)
        return USER_ERROR
    if isinstance(exc, MemoryError):
        print(f"remat: error: {command or 'remat'}: out of memory: the problem is too large for "
              f"this machine (use smaller inputs, --slots, or a solver with a time limit)",
              file=sys.stderr)
        return USER_ERROR
    if isinstance(exc, RecursionError):
        print(f"remat: error: {command or 'remat'}: the input is nested or chained too deeply "
              f"for Python's recursion limit{_where(exc)}", file=sys.stderr)
        return USER_ERROR
    if isinstance(exc, OverflowError):
        print(f"remat: error: {command or 'remat'}: numeric overflow ({one_line(exc)}): a value "
              f"of the input is too large{_where(exc)}", file=sys.stderr)
        return USER_ERROR
    print(f"remat: internal error (this is a bug): {type(exc).__name__}: "
          f"{cli_message(str(exc), command)}{_where(exc)}; set REMAT_TRACEBACK=1 for the "
          f"traceback", file=sys.stderr)
    return BUG


def main(argv=None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit code:
    0 success, 1 a failed check (e.g. ``verify``) or a bug of remat, 2 bad input."""
    command = None
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        command = args.command
        return int(args._run(args) or 0)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2, one line printed)
        code = e.code
        if code is None or isinstance(code, int):
            return int(code or 0)
        print(f"remat: error: {one_line(code)}", file=sys.stderr)
        return USER_ERROR
    except KeyboardInterrupt:
        print("remat: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:  # noqa: BLE001 - the one place every error becomes one line
        if os.environ.get("REMAT_TRACEBACK"):
            raise
        return report(e, command)


def entry() -> None:  # console script
    code = main()
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away: nothing left to say
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    sys.exit(code)


if __name__ == "__main__":
    entry()
