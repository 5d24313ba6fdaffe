"""Subcommands of ``remat``; one module each (see :mod:`remat_theory.cli`).

:data:`COMMANDS` names them, in the order ``remat -h`` lists them, with their one-line help,
so that the command line imports only the module of the command it runs (a module imports
what its command needs: the solvers, numpy, torch).  ``tests/test_cli_startup.py`` checks
that this table and the modules' own ``NAME``, ``HELP`` and ``ORDER`` agree.
"""

#: ``(NAME, module, HELP)`` of every subcommand, in ``ORDER``.
COMMANDS = (
    ("simulate", "simulate",
     "replay a schedule on a chain and report makespan, peak memory and the profile"),
    ("solve", "solve", "find a schedule for a chain under a memory budget (default solver: auto)"),
    ("compare", "compare",
     "run every registered solver on a chain at a budget (or a sweep) and compare them"),
    ("solvers", "solvers_cmd",
     "list the registered solvers and their variants, or one solver's options"),
    ("verify", "verify", "cross-check every exact solver and baseline on random and family chains"),
    ("profile", "profile", "profile a torch network into a chain (sizes in bytes, times in seconds)"),
    ("plan", "plan", "plan a transformers model's recomputation at its real size on a GPU, from fake tensors (no GPU, no download)"),
    ("bench", "bench",
     "benchmark solver speed and peak memory, or solution quality against the optimum"),
    ("confirm", "confirm",
     "check predicted vs measured memory and time of schedules on real torch networks"),
    ("hard", "hard",
     "search for hard instances (class DP/OPT gaps, class-budget gaps, baseline/OPT gap, slow "
     "ILP proofs)"),
    ("frontier", "frontier",
     "time per step vs peak memory on the original model: remat against Hugging Face's "
     "checkpointing, checkpoint_sequential and torch.compile's memory budget"),
    ("plot", "plot", "plot makespan against budget for every solver on a chain, and one memory "
     "profile"),
)
