"""``remat hard`` for the class-gap objectives (``dp-gap`` without ``--solver``,
``dp-weak-gap``, ``budget-gap``): the search of :mod:`remat_theory.analysis.hard_objectives`."""
from __future__ import annotations

import math
import sys
from pathlib import Path

from remat_theory.analysis.hard_objectives import GapConfig, Hit, certificate, search
from remat_theory.cli.commands._common import print_json
from remat_theory.model import fields as chain_fields
from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError

GAP_OBJECTIVES = ("dp-weak-gap", "budget-gap")  # dp-gap comes here without --solver


def uses_gap_search(args) -> bool:
    return args.objective in GAP_OBJECTIVES or (args.objective == "dp-gap" and not args.solver)


def _fmt(v) -> str:
    return "-" if v is None else ("inf" if math.isinf(v) else f"{v:.4f}")


def _name(kind: str, cfg: GapConfig, k: int, h: Hit) -> str:
    return f"{cfg.objective}-{kind}{k:02d}-L{Chain.from_dict(h.chain).length}-score{_fmt(h.score)}.json"


def config(args) -> GapConfig:
    if args.overheads:
        raise RematError(f"--overheads: objective {args.objective} draws overheads already "
                         f"(--no-overheads turns them off)")
    if args.keep is not None and not math.isfinite(args.keep):
        raise RematError(f"--keep = {args.keep} must be a finite number")
    # the variations drawn: those named by --variations, else every one of the field table
    drawn = args.variations or chain_fields.variation_names()
    return GapConfig(objective=args.objective, solver=args.solver,
                     min_stages=args.min_stages if args.min_stages_given else 2,
                     max_stages=args.max_stages, max_time=args.max_time,
                     max_size=args.max_size, min_time=args.min_time,
                     fall_at_least_fwd=args.fall_at_least_fwd,
                     all_saved=args.all_saved or "unsaved-outputs" not in drawn,
                     fall_costs=not args.no_fall_costs and "fall-costs" in drawn,
                     overheads=not args.no_overheads)


def run(args) -> int:
    cfg = config(args)
    res = search(cfg, seconds=args.time, seed=args.seed, workers=args.workers,
                 scheduler=args.scheduler, progress=not args.no_progress and not args.json,
                 keep=args.keep, max_evals=args.max_evals)
    written = []
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        what = (f"remat hard --objective {cfg.objective} --seed {args.seed}"
                + (f" --min-time {cfg.min_time:g}" if cfg.min_time else "")
                + (" --fall-at-least-fwd" if cfg.fall_at_least_fwd else "")
                + (" --all-saved" if cfg.all_saved else ""))
        if res.shrunk is not None:
            cert = certificate(res.shrunk, cfg, description=f"{what}: best chain, shrunk")
            written.append(str(cert.save(out / _name("shrunk", cfg, 0, res.shrunk))))
        for k, h in enumerate(res.found[:args.top]):
            cert = certificate(h, cfg, description=f"{what}: restart seed {h.seed}")
            written.append(str(cert.save(out / _name("found", cfg, k, h))))
    best = res.found[0] if res.found else None
    summary = {
        "objective": cfg.objective, "solver": cfg.target, "evaluations": res.evaluations,
        "restarts": len(res.found),
        "best_score": None if best is None else _fmt(best.score),
        "best": None if best is None else {"chain": best.chain, "budget": best.budget,
                                           "values": best.values},
        "shrunk_score": None if res.shrunk is None else _fmt(res.shrunk.score),
        "shrunk": None if res.shrunk is None else {"chain": res.shrunk.chain,
                                                     "budget": res.shrunk.budget},
        "anomalies": [m for m, _, _ in res.anomalies], "files": written,
        "wall_time": round(res.wall_time, 2),
    }
    if args.json:
        print_json(summary)
        return _anomalies(res)
    print(f"remat hard {cfg.objective} ({cfg.target} vs OPT): {res.evaluations} chains scored "
          f"in {res.wall_time:.1f} s")
    if best is None:
        print("no scorable chain found (is the time too short?)")
    else:
        print(f"best score {_fmt(best.score)} (L={Chain.from_dict(best.chain).length}, budget "
              f"{best.budget}, {best.values})")
        if best.score <= 1.0 + 1e-12:
            print(f"no gap found: {cfg.target} matched OPT on every chain tried")
    for label, h in (("shrunk", res.shrunk),):
        if h is None:
            continue
        c = Chain.from_dict(h.chain)
        print(f"{label} to L={c.length}, budget {h.budget}, score {_fmt(h.score)}:")
        d = c.to_dict()
        for f in chain_fields.names():  # the table's order; JSON holds those that are set
            if f in d:
                print(f"  {f:13s} {d[f]}")
    for path in written:
        print(f"wrote {path}")
    return _anomalies(res)


def _anomalies(res) -> int:
    if not res.anomalies:
        return 0
    print(f"remat: {len(res.anomalies)} anomalies (a class DP beat the exact optimum); first: "
          f"{res.anomalies[0][0]}", file=sys.stderr)
    return 1
