"""Subcommands of ``remat``; one module each (see :mod:`remat_theory.cli`)."""
