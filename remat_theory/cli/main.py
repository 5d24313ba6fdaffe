"""The ``remat`` command line (docs/README.md lists the subcommands).

Subcommands live in :mod:`remat_theory.cli.commands`, one module each, discovered at start:
a module defines ``NAME``, ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``.

Errors never show a traceback:

* a usage error prints one line ``remat COMMAND: error: ...`` and exits with code 2;
* bad input of any kind (a package error, a plug-in's own failure, a numeric overflow,
  input nested too deeply, a problem too large for memory) prints one line ``remat: error:
  ...`` naming the field, index, step or option and exits with code 2; its ways out (the
  error's :class:`~remat_theory.model.errors.Remedy` facts) are spelt in the command's own
  syntax by :mod:`remat_theory.cli.render` (``--slots 40 or less``, ``-o pairs=true``);
* a false answer of a solver (:class:`~remat_theory.model.errors.SolverContractError`: an
  invalid schedule, a claim the simulator refutes) is that solver's bug, which may be a
  plug-in's rather than remat's: one line ``remat: error: COMMAND: a false answer, ...``
  naming the solver and the claim, exit code 1;
* any other exception (:class:`~remat_theory.model.errors.InternalError`, or anything that
  is not a :class:`~remat_theory.model.errors.RematError`) is a bug of remat: one line
  ``remat: internal error (this is a bug): ...`` naming the exception and where it was
  raised, exit code 1.  Set ``REMAT_TRACEBACK=1`` to see the full traceback instead.

With ``--json`` every outcome is one JSON object on stdout, errors included: ``{"status":
"error", "error": CLASS, "message": ..., "exit_code": N}`` (the one line still goes to
stderr).
"""
from __future__ import annotations

import time

#: When the command started (before its imports): ``--time-limit`` counts from here.
START = time.perf_counter()

import argparse  # noqa: E402
import importlib
import json
import os
import sys
import traceback

from remat_theory import __version__
from remat_theory.cli.render import error_text, one_line
from remat_theory.model.errors import (InfeasibleBudgetError, PluginError, RematError,
                                       SolverContractError)

USER_ERROR, BUG = 2, 1


def _module(name: str):
    """The module of subcommand ``name`` (imported now: only the command that runs is)."""
    from remat_theory.cli.commands import COMMANDS

    mod = next(m for n, m, _ in COMMANDS if n == name)
    return importlib.import_module(f"remat_theory.cli.commands.{mod}")


def _commands():
    """Every subcommand's module, in ``remat -h`` order (imports them all)."""
    from remat_theory.cli.commands import COMMANDS

    return [_module(name) for name, _, _ in COMMANDS]


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors naming the command (``remat verify: error: ...``, exit
    code 2)."""

    def error(self, message):  # noqa: D401 - argparse hook
        raise UsageError(f"{self.prog}: error: {one_line(message)}")


class UsageError(Exception):
    """A usage error argparse found: its one line, ready to print."""


def build_parser(command: str | None = None, *, every: bool = True) -> argparse.ArgumentParser:
    """The ``remat`` parser.  With ``every`` (the default) each subcommand has its arguments,
    which imports every command module; else only ``command``'s module is imported and the
    other subcommands are names with their help (what :func:`main` builds: start-up then
    costs the imports of the command that runs, not of all of them)."""
    from remat_theory.cli.commands import COMMANDS

    parser = _Parser(
        prog="remat",
        description="Find, prove and confirm optimal activation re-materialization schedules.")
    parser.add_argument("--version", action="version", version=f"remat {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    parser.commands = {}
    for name, _, help_ in COMMANDS:
        if not (every or name == command):
            parser.commands[name] = sub.add_parser(name, help=help_, description=help_)
            continue
        mod = _module(name)
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=getattr(mod, "DESCRIPTION", mod.HELP))
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
        parser.commands[mod.NAME] = p
    return parser


def command_of(argv) -> str | None:
    """The subcommand ``argv`` names: its first word that is not an option (``remat`` itself
    takes only ``-h`` and ``--version``, which take no value), or None."""
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word
    return None


def parse(parser: argparse.ArgumentParser, argv) -> argparse.Namespace:
    """``parser.parse_args(argv)``, with arguments the command does not know reported by
    that command's parser (``remat verify: error: unrecognized arguments: ...``)."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        sub = parser.commands.get(getattr(args, "command", None), parser)
        sub.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def usage_line(parser: argparse.ArgumentParser) -> str:
    """``remat`` run with no command: the usage and the commands, on one line."""
    names = list(parser.commands)
    return (f"remat: error: no command given; usage: remat [-h] [--version] COMMAND [ARGS] "
            f"with COMMAND one of {', '.join(names)}; remat COMMAND -h describes one")


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


def report(exc: BaseException, command: str | None) -> tuple[int, str]:
    """The exit code and the one line for ``exc`` (see the module docstring)."""
    if isinstance(exc, RematError):
        return USER_ERROR, f"remat: error: {error_text(exc, command)}"
    if isinstance(exc, SolverContractError):  # the solver's bug (maybe a plug-in's), not remat's
        return BUG, (f"remat: error: {command or 'remat'}: a false answer, a bug of the solver "
                     f"and not of the input: {one_line(exc)}")
    if isinstance(exc, MemoryError):
        return USER_ERROR, (f"remat: error: {command or 'remat'}: out of memory: the problem is "
                            f"too large for this machine (use smaller inputs, fewer slots, or a "
                            f"solver with a time limit)")
    if isinstance(exc, RecursionError):
        return USER_ERROR, (f"remat: error: {command or 'remat'}: the input is nested or chained "
                            f"too deeply for Python's recursion limit{_where(exc)}")
    if isinstance(exc, OverflowError):
        return USER_ERROR, (f"remat: error: {command or 'remat'}: numeric overflow "
                            f"({one_line(exc)}): a value of the input is too large{_where(exc)}")
    return BUG, (f"remat: internal error (this is a bug): {type(exc).__name__}: "
                 f"{one_line(exc)}{_where(exc)}; set REMAT_TRACEBACK=1 for the traceback")


def _wants_json(argv, args) -> bool:
    """Whether the command's output is a JSON document on stdout (``--json``; ``remat
    verify --json FILE`` writes it to FILE instead)."""
    if args is not None:
        value = getattr(args, "json", None)
        return value is True or value == "-"
    return "--json" in (argv if argv is not None else sys.argv[1:])


def _fail(code: int, line: str, exc: BaseException | None, json_out: bool) -> int:
    """Print the one line on stderr and, under ``--json``, the error object on stdout."""
    print(line, file=sys.stderr)
    if json_out:
        message = line.split(": error: ", 1)[-1] if ": error: " in line else line
        obj = {"status": "error", "error": type(exc).__name__ if exc is not None else "UsageError",
               "message": message, "exit_code": code}
        if isinstance(exc, PluginError):
            obj["plugin"] = exc.plugin
        if isinstance(exc, InfeasibleBudgetError):  # the numbers of the message, as fields
            obj.update(budget=exc.budget, smallest_feasible=exc.smallest_feasible,
                       source=exc.source, lower_bound=exc.lower_bound)
        try:
            sys.stdout.write(json.dumps(obj) + "\n")
            sys.stdout.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass
    return code


#: Commands whose process, run as a program, ends without freeing its objects one by one
#: (``os._exit`` once the output is flushed): a chain of a million stages and its schedule
#: take a second or more to free, which ``--time-limit`` would otherwise not cover.
FAST_EXIT = frozenset({"solve"})
#: The command :func:`main` ran last (None before, or when none was given).
LAST_COMMAND = None


def main(argv=None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit code:
    0 success, 1 a failed check (e.g. ``verify``) or a bug of remat, 2 bad input."""
    global LAST_COMMAND
    command = args = None
    try:
        words = sys.argv[1:] if argv is None else list(argv)
        parser = build_parser(command_of(words), every=False)
        args = parse(parser, words)
        command = LAST_COMMAND = args.command
        if command is None:
            return _fail(USER_ERROR, usage_line(parser), None, _wants_json(argv, None))
        return int(args._run(args) or 0)
    except UsageError as e:
        return _fail(USER_ERROR, str(e), None, _wants_json(argv, None))
    except SystemExit as e:  # argparse: --help or --version (0)
        code = e.code
        if code is None or isinstance(code, int):
            return int(code or 0)
        return _fail(USER_ERROR, f"remat: error: {one_line(code)}", None, _wants_json(argv, args))
    except KeyboardInterrupt:
        print("remat: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:  # noqa: BLE001 - the one place every error becomes one line
        if os.environ.get("REMAT_TRACEBACK"):
            raise
        code, line = report(e, command)
        return _fail(code, line, e, _wants_json(argv, args))


#: The ``time.perf_counter()`` reading at which this process started, when the command
#: line runs as a program (:func:`entry`): ``--time-limit`` counts from there, start-up
#: included.  None when :func:`main` is called in a running process.
PROCESS_START = None


def process_start() -> float | None:
    """The ``time.perf_counter()`` reading at this process's start (Linux: from
    /proc/self/stat, to the clock tick), or None where it cannot be read."""
    import time
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        age = uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return time.perf_counter() - max(0.0, age)


def entry() -> None:  # console script
    global PROCESS_START
    PROCESS_START = process_start()
    code = main()
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away: nothing left to say
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    if LAST_COMMAND in FAST_EXIT:
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()
