"""``remat bench solvers`` (speed and peak memory) and ``remat bench quality`` (makespan ratio
to the optimum); each prints a table and writes JSON into ``--out DIR`` (by default a new
folder under the system's temporary folder, whose path is printed: never over a committed
result unless ``--out benchmarks/results`` says so)."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from remat_theory.analysis import benchmark as bm
from remat_theory.model.errors import RematError
from remat_theory.analysis.parallel import check_scheduler
from remat_theory.cli.commands._common import (check_output_dir, default_output_dir, name_list,
                                               plain_float, plain_int, positive_float,
                                               positive_int, seed_arg, stdout_to_stderr)

NAME = "bench"
ORDER = 60
HELP = "benchmark solver speed and peak memory, or solution quality against the optimum"


def int_list(text: str) -> tuple:
    try:
        vals = tuple(plain_int(t, "value") for t in text.replace(" ", ",").split(",") if t)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must list integers >= 1")
    return vals


def fraction(text: str) -> float:
    v = plain_float(text, "fraction")
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 0 and 1")
    return v


def fraction_list(text: str) -> tuple:
    return tuple(fraction(t) for t in text.replace(" ", ",").split(",") if t) or \
        _bad_list(text)


def _bad_list(text: str):
    raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of fractions")


def add_arguments(p) -> None:
    sub = p.add_subparsers(dest="what", metavar="WHAT")
    sub.required = True
    s = sub.add_parser("solvers", help="time and peak RSS of dp, ilp, exhaustive and prove",
                       description="Time (and peak resident memory, each run in its own "
                                   "subprocess) of the exact solvers over problem sizes.")
    s.add_argument("--quick", action="store_true",
                   help="a small grid (seconds): dp up to 100 stages and 500 slots, "
                        "ilp on 5 and 10 stages, exhaustive up to 6 stages; files get _quick")
    s.add_argument("--only", type=name_list, default=("dp", "ilp", "exhaustive"),
                   help="which benchmarks: dp, ilp, exhaustive, prove (comma-separated; "
                        "default dp,ilp,exhaustive)")
    s.add_argument("--dp-solver", default="dp", dest="dp_solver",
                   help="registry name of the DP to time (default dp; e.g. dp-weak)")
    s.add_argument("--dp-stages", type=int_list, default=None, dest="dp_stages",
                   help=f"default {','.join(map(str, bm.DP_STAGES))}")
    s.add_argument("--dp-slots", type=int_list, default=None, dest="dp_slots",
                   help=f"default {','.join(map(str, bm.DP_SLOTS))}")
    s.add_argument("--dp-families", type=name_list, default=None, dest="dp_families",
                   help=f"default {','.join(bm.DP_FAMILIES)}")
    s.add_argument("--ilp-stages", type=int_list, default=None, dest="ilp_stages",
                   help=f"default {','.join(map(str, bm.ILP_STAGES))}")
    s.add_argument("--ilp-seeds", type=positive_int, default=None, dest="ilp_seeds",
                   help="random chains per length (default 3)")
    s.add_argument("--ilp-backends", type=name_list, default=bm.ILP_BACKENDS, dest="ilp_backends",
                   help="MILP back ends (default highs,cbc)")
    s.add_argument("--ilp-modes", type=name_list, default=("fast",), dest="ilp_modes",
                   help="ILP formulations: fast (passes=1, pairs: optimal among schedules "
                        "with one weakly increasing forward run per phase; the default here) "
                        "and/or exact (the solver's default model, optimal over all "
                        "schedules; tens of seconds from about 5 stages on)")
    s.add_argument("--ilp-time-limit", type=positive_float, default=None, dest="ilp_time_limit",
                   help="seconds per ILP solve (default 300)")
    s.add_argument("--budget-frac", type=fraction, default=0.5, dest="budget_frac",
                   help="budget as a fraction of the way from the smallest feasible budget "
                        "(dp: the memory lower bound) to store-all (default 0.5)")
    s.add_argument("--exhaustive-stages", type=int_list, default=None, dest="exhaustive_stages",
                   help=f"default {','.join(map(str, bm.EXHAUSTIVE_STAGES))}")
    s.add_argument("--exhaustive-fracs", type=fraction_list, default=(0.0, 0.5),
                   dest="exhaustive_fracs",
                   help="exhaustive budgets as fractions of the way from the smallest "
                        "feasible budget to store-all (default 0,0.5; 0.1 is the tight one)")
    s.add_argument("--exhaustive-seeds", type=positive_int, default=1, dest="exhaustive_seeds",
                   help="random chains per length (seeds L, L+1, ...; default 1)")
    s.add_argument("--prove-families", type=name_list, default=bm.PROVE_FAMILIES,
                   dest="prove_families", help=f"default {','.join(bm.PROVE_FAMILIES)}")
    s.add_argument("--prove-stages", type=int_list, default=bm.PROVE_STAGES, dest="prove_stages",
                   help=f"default {','.join(map(str, bm.PROVE_STAGES))}")
    s.add_argument("--prove-seeds", type=positive_int, default=1, dest="prove_seeds",
                   help="chains per family and length (default 1)")
    s.add_argument("--prove-budget-frac", type=fraction, default=0.1, dest="prove_budget_frac",
                   help="prove's budget, as --budget-frac (default 0.1: tight)")
    s.add_argument("--prove-time-limit", type=positive_float, default=300.0,
                   dest="prove_time_limit", help="seconds per prove run (default 300)")
    s.add_argument("--timeout", type=positive_float, default=600.0,
                   help="seconds before a dp or exhaustive run is killed (default 600)")
    _out_args(s)

    q = sub.add_parser("quality", help="makespan / optimum of every solver per family and budget",
                       description="For each family, one chain, budgets from the smallest "
                                   "feasible to store-all: every solver's makespan divided by "
                                   "the exact optimum (exhaustive search; ILP beyond its "
                                   "size, '*' when not proven).")
    q.add_argument("--families", type=name_list, default=bm.QUALITY_FAMILIES)
    q.add_argument("--stages", type=positive_int, default=7, help="chain length (default 7)")
    q.add_argument("--seed", type=seed_arg, default=0)
    q.add_argument("--seeds", type=positive_int, default=1,
                   help="chains per family (seeds SEED..SEED+N-1); with more than one the "
                        "table gives mean/max ratios per budget fraction (default 1)")
    q.add_argument("--budgets", type=positive_int, default=8,
                   help="budgets per family from the smallest feasible to store-all (default 8)")
    q.add_argument("--solvers", type=name_list, default=None,
                   help="solvers (default: every registered one)")
    q.add_argument("--time-limit", type=positive_float, default=60.0, dest="time_limit",
                   help="seconds per solve for solvers that take a limit (default 60)")
    q.add_argument("--max-exhaustive-stages", type=positive_int, default=None,
                   dest="max_exhaustive_stages")
    q.add_argument("--workers", type=positive_int, default=None)
    q.add_argument("--scheduler", default=None, metavar="ADDRESS")
    _out_args(q)


def _out_args(p) -> None:
    p.add_argument("--out", "--out-dir", default=None, dest="out_dir", metavar="DIR",
                   help="where the JSON goes (default: a new folder under the system's "
                        "temporary folder, printed; benchmarks/results to update the "
                        "committed results)")
    p.add_argument("--tag", default=None, help="suffix of the file names")
    p.add_argument("--no-write", action="store_true", dest="no_write", help="write no file")
    p.add_argument("--no-progress", action="store_true", dest="no_progress",
                   help="print no progress (default: a bar on a terminal, else a line every "
                        "few seconds, on stderr)")
    p.add_argument("--json", action="store_true", help="print the JSON instead of tables")


def _path(args, stem: str) -> Path:
    tag = args.tag if args.tag is not None else ("quick" if getattr(args, "quick", False) else "")
    if args.out_dir is None:
        args.out_dir = str(default_output_dir("bench"))
    return Path(args.out_dir) / (f"{stem}_{tag}.json" if tag else f"{stem}.json")


def _emit(args, stem: str, payload: dict, table: str) -> None:
    if args.json:
        sys.stdout.flush()
        with os.fdopen(os.dup(args._json_out), "w") as out:
            json.dump(payload, out, indent=1, default=str)
            out.write("\n")
    else:
        print(table)
        print()
    if not args.no_write:
        path = _path(args, stem)
        try:
            bm.write_json(path, payload)
        except OSError as e:
            raise RematError(f"cannot write {str(path)!r}: {e.strerror}") from None
        print(f"wrote {path}", file=sys.stderr)


def _check_before_work(args) -> None:
    """Every argument the run reads, checked before the first benchmark starts."""
    import solvers

    if not args.no_write and args.out_dir is not None:
        check_output_dir(args.out_dir, "--out")
    if args.what == "solvers":
        unknown = [w for w in args.only if w not in ("dp", "ilp", "exhaustive", "prove")]
        if unknown:
            raise RematError(f"--only {unknown[0]!r} is not one of dp, ilp, exhaustive, prove")
        for what in args.only:
            name = args.dp_solver if what == "dp" else what
            solvers.get(name)  # raises naming an unknown solver (e.g. --dp-solver nosuch)
            if what == "dp" and "slots" not in solvers.get(name).options:
                raise RematError(f"--dp-solver {name!r} takes no slots: the dp benchmark times "
                                 f"a slot DP (dp, dp-weak)")
    else:
        check_scheduler(args.scheduler)
        for name in args.solvers or ():
            solvers.get(name)


def run(args) -> int:
    _check_before_work(args)
    if args.json:  # only the JSON on stdout: native solver banners go to stderr
        real_stdout = os.dup(1)
        with stdout_to_stderr():
            args._json_out = real_stdout
            try:
                return _run_solvers(args) if args.what == "solvers" else _run_quality(args)
            finally:
                os.close(real_stdout)
    return _run_solvers(args) if args.what == "solvers" else _run_quality(args)


def _run_solvers(args) -> int:
    import solvers

    quick = bm.QUICK if args.quick else {}
    progress = not args.no_progress  # on stderr: the JSON on stdout stays clean
    command = "remat " + " ".join(sys.argv[1:]) if sys.argv and sys.argv[0].endswith("remat") else None
    for what in args.only:
        name = args.dp_solver if what == "dp" else what
        meta = {"machine": bm.machine_info(), "command": command}
        if what == "dp":
            rows = bm.bench_dp(args.dp_stages or quick.get("dp_stages", bm.DP_STAGES),
                               args.dp_slots or quick.get("dp_slots", bm.DP_SLOTS),
                               args.dp_families or quick.get("dp_families", bm.DP_FAMILIES),
                               args.budget_frac, args.timeout, progress, solver=name)
            _emit(args, f"bench_solvers_{name}", {**meta, "rows": rows}, table_title(name) + bm.table_dp(rows))
        elif what == "ilp":
            rows = bm.bench_ilp(args.ilp_stages or quick.get("ilp_stages", bm.ILP_STAGES),
                                args.ilp_backends, args.ilp_seeds or quick.get("ilp_seeds", 3),
                                args.budget_frac,
                                args.ilp_time_limit or quick.get("ilp_time_limit", 300.0), progress,
                                modes=args.ilp_modes)
            _emit(args, "bench_solvers_ilp", {**meta, "rows": rows, "medians": bm.ilp_medians(rows)},
                  table_title("ilp") + bm.table_ilp(rows))
        elif what == "exhaustive":
            rows = bm.bench_exhaustive(args.exhaustive_stages or quick.get(
                "exhaustive_stages", bm.EXHAUSTIVE_STAGES), args.timeout, progress,
                fracs=args.exhaustive_fracs, seeds=args.exhaustive_seeds)
            _emit(args, "bench_solvers_exhaustive", {**meta, "rows": rows},
                  table_title("exhaustive") + bm.table_exhaustive(rows))
        else:
            rows = bm.bench_prove(args.prove_families, args.prove_stages, args.prove_seeds,
                                  args.prove_budget_frac, args.prove_time_limit, progress)
            _emit(args, "bench_solvers_prove", {**meta, "rows": rows},
                  table_title("prove") + bm.table_prove(rows))
    return 0


def table_title(name: str) -> str:
    return f"== {name} ==\n"


def _run_quality(args) -> int:
    import solvers

    names = tuple(args.solvers) if args.solvers else tuple(solvers.names())
    rows = bm.bench_quality(args.families, args.stages, args.seed, args.budgets, names,
                            args.time_limit, args.max_exhaustive_stages, args.workers,
                            args.scheduler, not args.no_progress,
                            seeds=args.seeds)
    summary = bm.quality_summary(rows, names)
    main_table = (bm.table_quality(rows, names) if args.seeds == 1
                  else bm.table_quality_by_fraction(rows, names))
    table = main_table + "\n\n" + bm.format_table(
        ["solver", "cells", "no schedule", "not proven (time limit)", "max ratio", "mean ratio"],
        [[s["solver"], s["cells"], s["no_schedule"], s["time_limited"], bm._s(s["max_ratio"], 5),
          bm._s(s["mean_ratio"], 5)] for s in summary])
    table += ("\n(ratio = makespan / exact optimum over all schedules; inf = no schedule; "
              "'*' = reference not proven optimal; '~' = stopped at its time limit, not proven; "
              "below 1 = a schedule with Drop ops, outside the canonical model"
              + ("; cells: mean/max over the chains, -k = no schedule on k chains)"
                 if args.seeds > 1 else ")"))
    payload = {"machine": bm.machine_info(), "stages": args.stages, "seed": args.seed,
               "seeds": args.seeds, "solvers": list(names), "rows": rows, "summary": summary}
    stem = f"quality_L{args.stages}_s{args.seed}" + (f"_n{args.seeds}" if args.seeds > 1 else "")
    _emit(args, stem, payload, table)
    return 0
