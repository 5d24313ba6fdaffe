"""The ``remat`` command line (docs/README.md lists the subcommands).

Subcommands live in :mod:`remat_theory.cli.commands`, one module each, discovered at start:
a module defines ``NAME``, ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``.
Bad input of any kind prints one line ``remat: error: ...`` naming the field, index or
step, and exits with code 2, without a traceback.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from remat_theory.model.errors import RematError


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
        self.exit(2, f"{self.prog.split()[0]}: error: {self.prog}: {message}\n")


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


def main(argv=None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2, one line printed)
        return int(e.code or 0)
    try:
        return int(args._run(args) or 0)
    except RematError as e:
        print(f"remat: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("remat: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


def entry() -> None:  # console script
    sys.exit(main())


if __name__ == "__main__":
    entry()
