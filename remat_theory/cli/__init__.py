"""The ``remat`` command line: :mod:`remat_theory.cli.main` builds the parser from the
subcommand modules of :mod:`remat_theory.cli.commands`."""
from remat_theory.cli.main import build_parser, entry, main

__all__ = ["build_parser", "entry", "main"]
