"""``remat verify``: cross-check every exact solver and baseline (the package's main job).

Exit status: 0 when every relation holds, 1 on any disagreement or invalid schedule,
2 on bad input.
"""
from __future__ import annotations

import argparse
import json
import sys

import solvers

from remat_theory.model.errors import RematError
from remat_theory.analysis.verify import (DEFAULT_FAMILIES, VerifyConfig, default_max_stages_for,
                                          format_table, run_verify, variation_modes)
from remat_theory.analysis.parallel import check_scheduler
from remat_theory.cli.commands._common import (check_output_file, name_list, plain_int,
                                               positive_float, positive_int, print_json,
                                               seed_arg, stdout_to_stderr, variations_help)

NAME = "verify"
ORDER = 40
HELP = "cross-check every exact solver and baseline on random and family chains"
DESCRIPTION = (
    "Run every selected solver on random and family chains at several budgets per chain "
    "(below the smallest feasible budget, at it, and up to store-all), replay every schedule "
    "through the simulator, and check the relations between the answers: exact solvers of a "
    "class agree, ilp <= dp-weak <= dp, nothing beats a proven optimum, nothing fits where an "
    "exact solver proves no schedule fits, optima do not grow with the budget. Prints a table "
    "per solver and exits 1 on any violation. With --library: the solvers on the instance "
    "library instead, against its best known makespans and proved bounds (docs/library.md).")


def stage_range(text: str) -> tuple:
    """argparse type for ``MIN:MAX`` (or a single ``N``)."""
    parts = text.split(":")
    if len(parts) == 1:
        parts = parts * 2
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"stage range {text!r} is not MIN:MAX")
    try:
        lo, hi = (plain_int(p, "stage count") for p in parts)
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"stage range {text!r} is not MIN:MAX with integers "
                                         f"({e})") from None
    if lo < 1 or hi < lo:
        raise argparse.ArgumentTypeError(f"stage range {text!r} needs 1 <= MIN <= MAX")
    return lo, hi


def stage_caps(text: str) -> tuple:
    """argparse type for ``NAME=N,NAME=N``."""
    out = []
    for part in name_list(text):
        name, sep, num = part.partition("=")
        try:
            n = plain_int(num, "stage count")
        except argparse.ArgumentTypeError:
            n = 0
        if not sep or not name or n < 1:
            raise argparse.ArgumentTypeError(f"{part!r} is not SOLVER=N with N >= 1")
        out.append((name, n))
    return tuple(out)


def add_arguments(p) -> None:
    p.add_argument("--seed", type=seed_arg, default=0, help="master seed (default 0)")
    p.add_argument("--stages", type=stage_range, default=(2, 7), metavar="MIN:MAX",
                   help="range of chain lengths (default 2:7)")
    p.add_argument("--trials", type=positive_int, default=6,
                   help="chains per family (default 6)")
    p.add_argument("--families", type=name_list, default=DEFAULT_FAMILIES,
                   help=f"comma-separated families (default {','.join(DEFAULT_FAMILIES)})")
    p.add_argument("--solvers", type=name_list, default=None,
                   help="comma-separated solver names, variant labels or "
                        "package.module:function paths (default: every registered solver and "
                        "the variants it declares for verify; see `remat solvers`)")
    p.add_argument("--budgets-per-chain", type=positive_int, default=4, dest="budgets_per_chain",
                   help="feasible budgets per chain, from the smallest feasible to store-all "
                        "(default 4; one or two infeasible ones are added)")
    p.add_argument("--time-limit", type=positive_float, default=10.0, dest="time_limit",
                   help="time limit in seconds per solve, for solvers that take one (ILP); "
                        "default 10")
    defaults = ",".join(f"{n}={k}" for n, k in default_max_stages_for())
    p.add_argument("--max-stages-for", type=stage_caps, default=(), dest="max_stages_for",
                   metavar="SOLVER=N,...",
                   help=f"run a solver only on chains of at most N stages (default {defaults}; "
                        "given values replace those defaults, e.g. ilp=7)")
    p.add_argument("--variations", type=_variations, default=(), metavar="NAME[=all],...",
                   help="draw optional chain fields: NAME on the trials whose bit says so (the "
                        "variations listed meet in every combination, none included), "
                        f"NAME=all on every chain. {variations_help()}")
    p.add_argument("--workers", type=positive_int, default=None,
                   help="worker processes (default: every core; 1 runs in this process)")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="run on a Dask distributed scheduler (tcp://host:port, or 'local' for "
                        "an in-process cluster); needs the dask extra")
    p.add_argument("--no-progress", action="store_true", dest="no_progress",
                   help="print no progress (default: a bar on a terminal, else a line every "
                        "few seconds, on stderr)")
    lib = p.add_argument_group(
        "the instance library (docs/library.md)",
        "--library runs the selected solvers on the library's instances instead of random "
        "chains, replays every schedule and compares it with the best known makespan and the "
        "proved lower bound; exit 1 on an invalid schedule, a false optimum or a schedule "
        "below a proved bound")
    lib.add_argument("--library", nargs="?", const="", default=None, metavar="PATH",
                     help="a library file or folder (default: the one shipped with remat)")
    lib.add_argument("--solver", action="append", default=None, metavar="NAME",
                     help="one solver to run (repeatable; with --solvers, both count)")
    lib.add_argument("--classes", type=name_list, default=None, metavar="CLASS,...",
                     help="only these instance classes (NAME* for a prefix, e.g. network-*)")
    lib.add_argument("--ids", type=name_list, default=None, metavar="ID,...",
                     help="only these instance ids")
    lib.add_argument("--library-max-stages", type=positive_int, default=None,
                     dest="library_max_stages", metavar="N",
                     help="only instances of at most N stages")
    lib.add_argument("--markdown", action="store_true",
                     help="print the per-class table as Markdown (the docs' table)")
    p.add_argument("--json", nargs="?", const="-", default=None, metavar="FILE",
                   help="write the full report as JSON to FILE (or to stdout with no FILE, "
                        "instead of the table)")


def _variations(text: str) -> tuple:
    try:
        return variation_modes(text)
    except RematError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _check_names(args) -> None:
    """Every solver named in ``--max-stages-for`` must exist (a registry name, a variant
    label, or whatever else the registry resolves): a misspelt name would otherwise cap
    nothing, silently."""
    for name, n in args.max_stages_for:
        try:
            solvers.get(name)  # a registry name, a variant label or a module:function path
        except RematError as e:
            raise RematError(f"--max-stages-for {name}={n}: {e}") from None


def _write_json(report: dict, path: str) -> None:
    try:
        with open(path, "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")
    except OSError as e:
        raise RematError(f"cannot write the report to {path!r}: {e.strerror}") from None
    print(f"report written to {path}", file=sys.stderr)


def run_library(args) -> int:
    """``remat verify --library [PATH]``: every selected solver on the library."""
    from remat_theory.analysis.library_verify import (LibraryVerifyConfig, format_table as table,
                                                      run_library_verify)
    _check_names(args)
    if args.json not in (None, "-"):
        check_output_file(args.json, "--json")
    chosen = list(args.solvers or []) + list(args.solver or [])
    cfg = LibraryVerifyConfig(path=args.library or None, solvers=tuple(chosen) or None,
                              time_limit=args.time_limit,
                              classes=None if args.classes is None else tuple(args.classes),
                              ids=None if args.ids is None else tuple(args.ids),
                              max_stages=args.library_max_stages,
                              max_stages_for=tuple(args.max_stages_for),
                              workers=args.workers or 1, progress=not args.no_progress)
    with stdout_to_stderr(args.json == "-"):
        report = run_library_verify(cfg)
    if report["instances"] == 0:
        raise RematError("no instance of the library matches --classes/--ids/"
                         "--library-max-stages")
    if args.json == "-":
        print_json(report)
    else:
        print(table(report, markdown=args.markdown))
        if args.json is not None:
            _write_json(report, args.json)
    return 0 if report["ok"] else 1


def run(args) -> int:
    if args.library is not None:
        return run_library(args)
    if args.solver or args.classes is not None or args.ids is not None \
            or args.library_max_stages is not None or args.markdown:
        raise RematError("--solver, --classes, --ids, --library-max-stages and --markdown go "
                         "with --library (the sweep takes --solvers)")
    _check_names(args)
    check_scheduler(args.scheduler)
    if args.json not in (None, "-"):
        check_output_file(args.json, "--json")
    cfg = VerifyConfig(seed=args.seed, min_stages=args.stages[0], max_stages=args.stages[1],
                       trials=args.trials, families=tuple(args.families),
                       solvers=None if args.solvers is None else tuple(args.solvers),
                       budgets_per_chain=args.budgets_per_chain, time_limit=args.time_limit,
                       max_stages_for=tuple(args.max_stages_for),
                       workers=args.workers,
                       scheduler=args.scheduler, variations=args.variations,
                       progress=not args.no_progress)  # on stderr: stdout stays clean
    with stdout_to_stderr(args.json == "-"):
        report = run_verify(cfg)
    if args.json == "-":
        print_json(report)
    else:
        print(format_table(report))
        if args.json is not None:
            _write_json(report, args.json)
    return 0 if report["ok"] else 1
