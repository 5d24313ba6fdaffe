"""``remat hard --objective dp-gap|dp-weak-gap|budget-gap|baseline-gap|ilp-time [--solver NAME]
[--time S] [--max-evals N] [--out DIR]``, and ``remat hard --family drive|repeat|compose
--base FILE`` (a parametric family's trend)"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import solvers

from remat_theory.analysis.certificates import Certificate
from remat_theory.model import fields as chain_fields
from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError
from remat_theory.analysis.hard_search import (OBJECTIVES, Found, SearchConfig, certificate,
                                              search)
from remat_theory.analysis.parallel import check_scheduler
from remat_theory.cli.commands import _hard_family, _hard_gap
from remat_theory.cli.commands._common import (Ticker, check_output_dir, plain_float,
                                               positive_float, positive_int, print_json,
                                               seed_arg, variation_list, variations_help)

NAME = "hard"
# OPT is exhaustive search up to its registered reference range, the ILP beyond.
_OPT_STAGES = solvers.get("exhaustive").reference_max_stages
ORDER = 60
HELP = ("search for hard instances (class DP/OPT gaps, class-budget gaps, baseline/OPT gap, "
        "slow ILP proofs)")
DESCRIPTION = (
    "Random restarts plus local search over stage values, in parallel over processes, then "
    "shrinking the best instance to a minimal one that keeps its score. OPT is exhaustive "
    f"search (up to {_OPT_STAGES} stages) or a proven ILP optimum. Writes a corpus "
    "of certificate files (remat-certificate/1: the chain, the budget, each solver's "
    "schedule, makespan, status).")


def add_arguments(p) -> None:
    p.add_argument("--objective", choices=OBJECTIVES + _hard_gap.GAP_OBJECTIVES,
                   default="dp-gap",
                   help="dp-gap: dp / OPT (largest over every budget of a chain; with --solver: "
                        "that solver / OPT at one budget); dp-weak-gap: dp-weak / OPT; "
                        "budget-gap: smallest class budget / smallest budget (--solver dp or "
                        "dp-weak, default dp-weak); baseline-gap: SOLVER / OPT; ilp-time: "
                        "seconds to prove the ILP optimum")
    p.add_argument("--solver", default=None,
                   help="solver compared with OPT (dp-gap: default dp, e.g. dp-weak, or "
                        "exhaustive-monotone, the optimum of the fast ILP's normal form, or a "
                        "package.module:function of your own; baseline-gap: required)")
    p.add_argument("--time", type=positive_float, default=60.0,
                   help="total wall-clock seconds, about (search, then shrinking; a solve in "
                        "progress finishes); default 60")
    p.add_argument("--max-evals", type=positive_int, default=None, dest="max_evals",
                   metavar="N",
                   help="each restart also stops after N instances evaluated (with a --time "
                        "long enough, the same search on every run)")
    p.add_argument("--seed", type=seed_arg, default=0, help="random seed (default 0)")
    p.add_argument("--workers", type=positive_int, default=None,
                   help="worker processes (default: every core)")
    p.add_argument("--scheduler", default=None,
                   help="Dask scheduler address, or 'local' (default: local processes)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="write the corpus here (one JSON file per instance)")
    p.add_argument("--top", type=positive_int, default=5,
                   help="how many of the best instances found to write besides the shrunk "
                        "one (default 5)")
    p.add_argument("--min-stages", type=positive_int, default=None, dest="min_stages",
                   help="smallest L drawn (default 3; gap objectives: 2)")
    p.add_argument("--max-stages", type=positive_int, default=6, dest="max_stages",
                   help=f"largest L drawn (default 6; above {_OPT_STAGES} OPT is the ILP)")
    p.add_argument("--max-time", type=positive_int, default=10, dest="max_time",
                   help="largest stage time drawn (integers)")
    p.add_argument("--max-size", type=positive_int, default=10, dest="max_size",
                   help="largest activation size drawn (bytes)")
    p.add_argument("--overheads", action="store_true", help="draw transient overheads too")
    p.add_argument("--variations", type=variation_list, default=(), metavar="NAMES",
                   help="comma-separated optional chain fields to draw and move: "
                        f"{variations_help()} (gap objectives: default every one)")
    p.add_argument("--min-time", type=lambda t: plain_float(t, "--min-time"), default=0.0,
                   dest="min_time",
                   help="gap objectives: every time at least this (default 0)")
    p.add_argument("--fall-at-least-fwd", action="store_true", dest="fall_at_least_fwd",
                   help="gap objectives: fall_time >= fwd_time at every stage")
    p.add_argument("--all-saved", action="store_true", dest="all_saved",
                   help="gap objectives: every output saved (no unsaved outputs)")
    p.add_argument("--no-fall-costs", action="store_true", dest="no_fall_costs",
                   help="gap objectives: recording forwards cost what no-grad ones do")
    p.add_argument("--no-overheads", action="store_true", dest="no_overheads",
                   help="gap objectives: no transient overheads")
    p.add_argument("--keep", type=lambda t: plain_float(t, "--keep"), default=None,
                   help="the shrinker keeps score >= KEEP (default: the best score found; "
                        "ilp-time: half of it)")
    p.add_argument("--no-progress", action="store_true",
                   help="print no progress (default: a bar on a terminal, else a line every "
                        "few seconds, on stderr)")
    p.add_argument("--json", action="store_true", help="print one JSON summary object")
    _hard_family.add_arguments(p)


def _fmt(score) -> str:
    if score is None:
        return "-"
    if math.isinf(score):
        return "inf"
    return f"{score:.4f}"


def _name(kind: str, cfg: SearchConfig, k: int, f: Found) -> str:
    L = Chain.from_dict(f.chain).length
    s = "inf" if math.isinf(f.score) else f"{f.score:.4f}"
    return f"{cfg.objective}-{kind}{k:02d}-L{L}-score{s}.json"


def _target(args, cfg, res) -> float:
    if args.keep is not None:
        return args.keep
    best = res.found[0].score
    return 0.5 * best if cfg.objective == "ilp-time" else best


def run(args) -> int:
    args.min_stages_given = args.min_stages is not None
    if args.min_stages is None:
        args.min_stages = 3
    if args.out is not None:  # checked before any work, whichever search runs
        check_output_dir(args.out, "--out")
    check_scheduler(args.scheduler)
    if args.family is not None:
        return _hard_family.run(args)
    if _hard_gap.uses_gap_search(args):
        return _hard_gap.run(args)
    if (args.min_time or args.fall_at_least_fwd or args.all_saved or args.no_fall_costs
            or args.no_overheads):
        raise RematError(f"--min-time, --fall-at-least-fwd, --all-saved, --no-fall-costs and "
                         f"--no-overheads constrain the gap objectives (dp-gap without "
                         f"--solver, dp-weak-gap, budget-gap), not {args.objective}")
    if args.objective == "ilp-time" and args.solver:
        raise RematError("--solver is not used by --objective ilp-time (it times the ilp solver)")
    if args.keep is not None and not math.isfinite(args.keep):
        raise RematError(f"--keep = {args.keep} must be a finite number")
    cfg = SearchConfig(objective=args.objective, solver=args.solver,
                       min_stages=args.min_stages, max_stages=args.max_stages,
                       max_time=args.max_time, max_size=args.max_size,
                       overheads=args.overheads, variations=args.variations)
    # progress: the time spent against --time (search, then shrinking), on stderr
    with Ticker(f"remat hard {cfg.objective}", limit=args.time, enabled=not args.no_progress,
                lines=True):
        res = search(cfg, seconds=args.time, seed=args.seed, workers=args.workers,
                     scheduler=args.scheduler, progress=False, keep=args.keep,
                     max_evals=args.max_evals)
    written = []
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        if res.shrunk is not None:
            cert = certificate(res.shrunk, cfg, description=(
                f"remat hard --objective {cfg.objective} --seed {args.seed}: best instance "
                f"found, shrunk keeping score >= {_fmt(_target(args, cfg, res))}"))
            written.append(str(cert.save(out / _name("shrunk", cfg, 0, res.shrunk))))
        for k, f in enumerate(res.found[:args.top]):
            cert = certificate(f, cfg, description=(
                f"remat hard --objective {cfg.objective} --seed {args.seed}: restart seed {f.seed}"))
            written.append(str(cert.save(out / _name("found", cfg, k, f))))
        for k, (msg, chain, budget) in enumerate(res.anomalies[:20]):
            cert = Certificate(Chain.from_dict(chain), budget,
                               {"note": {"solver": "none", "status": "anomaly", "makespan": None,
                                         "schedule": None}},
                               claim="anomaly", description=msg)
            written.append(str(cert.save(out / f"anomaly-{k:02d}.json")))
    summary = {
        "objective": cfg.objective,
        "solver": cfg.target,
        "evaluations": res.evaluations,
        "restarts": len(res.found),
        "best_score": None if not res.found else _fmt(res.found[0].score),
        "shrunk_score": None if res.shrunk is None else _fmt(res.shrunk.score),
        "shrunk": None if res.shrunk is None else {"chain": res.shrunk.chain,
                                                     "budget": res.shrunk.budget},
        "anomalies": [m for m, _, _ in res.anomalies],
        "files": written,
        "wall_time": round(res.wall_time, 2),
    }
    if args.json:
        print_json(summary)
    else:
        print(f"remat hard {cfg.objective} ({cfg.target} vs OPT): {res.evaluations} instances "
              f"evaluated in {res.wall_time:.1f} s")
        if not res.found:
            print("no scorable instance found (is the time too short?)")
        else:
            print(f"best score {_fmt(res.found[0].score)}")
            if cfg.objective != "ilp-time" and res.found[0].score <= 1.0 + 1e-12:
                print(f"no gap found: {cfg.target} was optimal on every instance tried")
        if res.shrunk is not None:
            c = Chain.from_dict(res.shrunk.chain)
            print(f"shrunk to L={c.length}, budget {res.shrunk.budget}, score "
                  f"{_fmt(res.shrunk.score)}:")
            # the base fields, and the optional fields the chain uses
            shown = [f.name for f in chain_fields.BASE] + list(c.fields_used())
            for f in shown:
                v = getattr(c, f)
                print(f"  {f:13s} {v if chain_fields.field(f).scalar else list(v)}")
        for path in written:
            print(f"wrote {path}")
    if res.anomalies:
        print(f"remat: {len(res.anomalies)} anomalies (a solver failed its replay or beat the "
              f"exact optimum); first: {res.anomalies[0][0]}", file=sys.stderr)
        return 1
    return 0
