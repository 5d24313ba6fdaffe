"""``remat hard --family drive|repeat|compose --base FILE``: score a parametric family
member by member (:mod:`remat_theory.analysis.hard_families`) and print its trend."""
from __future__ import annotations

import json
import math
from pathlib import Path

from remat_theory.analysis import certificates
from remat_theory.analysis.hard_families import (FamilySpec, best_certificate, growth,
                                                  trend)
from remat_theory.analysis.hard_objectives import GapConfig
from remat_theory.cli.commands._common import print_json
from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError


def add_arguments(p) -> None:
    p.add_argument("--family", choices=("drive", "repeat", "compose"), default=None,
                   help="score a parametric family instead of searching: drive one entry "
                        "(--field, --index, --factor), repeat a stage (--stage) or compose "
                        "copies of the base (--costly-first); needs --base; objective "
                        "dp-gap, dp-weak-gap or budget-gap")
    p.add_argument("--base", default=None, metavar="FILE",
                   help="--family: the base chain (a chain file or a certificate)")
    p.add_argument("--field", default=None, help="--family drive: the field driven")
    p.add_argument("--index", type=int, default=None, help="--family drive: its entry")
    p.add_argument("--factor", type=int, default=2,
                   help="--family drive: growth per step (default 2)")
    p.add_argument("--stage", type=int, default=None, help="--family repeat: the stage")
    p.add_argument("--block", type=int, default=1,
                   help="--family repeat: repeat the stages STAGE..STAGE+BLOCK-1 as a block "
                        "(default 1: the stage alone)")
    p.add_argument("--costly-first", action="store_true", dest="costly_first",
                   help="--family compose: copies after the first have every time 0")
    p.add_argument("--all-times", action="store_true", dest="all_times",
                   help="--family: score each member over every forward-time vector at once "
                        "(no recording costs; dp-weak-gap or dp-gap): the exact largest ratio "
                        "and a time vector attaining it")
    p.add_argument("--steps", type=int, default=6,
                   help="--family: members n = 0..STEPS (default 6; stops past the exact "
                        "solver's reach or at --time)")


def _base(path: str) -> Chain:
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise RematError(f"--base {path}: cannot read it ({e})") from e
    if isinstance(data, dict) and data.get("format") == certificates.FORMAT:
        return certificates.load(p).chain
    return Chain.load(p)


def _fmt(v) -> str:
    return "-" if v is None else ("inf" if math.isinf(v) else f"{v:.4f}")


def run(args) -> int:
    if args.base is None:
        raise RematError("--family needs --base FILE (a chain file or a certificate)")
    if args.objective not in ("dp-gap", "dp-weak-gap", "budget-gap") or (
            args.objective == "dp-gap" and args.solver):
        raise RematError(f"--family scores dp-gap (without --solver), dp-weak-gap or "
                         f"budget-gap, not {args.objective}")
    spec = FamilySpec(args.family, field=args.field, index=args.index, factor=args.factor,
                      stage=args.stage, costly_first=args.costly_first, block=args.block)
    base = _base(args.base)
    cfg = GapConfig(objective=args.objective,
                    solver=args.solver if args.objective == "budget-gap" else None)
    rows = trend(base, spec, cfg, args.steps, seconds=args.time, all_times=args.all_times)
    word = growth(rows)
    written = []
    if args.out is not None and rows:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        what = (f"remat hard --family {args.family} --base {Path(args.base).name} "
                f"--objective {args.objective}" + (" --all-times" if args.all_times else ""))
        cert = best_certificate(rows, spec, cfg, what)
        if cert is not None:
            best = max(rows, key=lambda r: (r.score, r.n))
            name = (f"family-{args.family}-{args.objective}-n{best.n}-L{best.stages}-"
                    f"score{_fmt(best.score)}.json")
            written.append(str(cert.save(out / name)))
    if args.json:
        print_json({"family": spec.label(), "objective": cfg.objective, "solver": cfg.target,
                    "trend": word, "files": written,
                    "rows": [{"n": r.n, "stages": r.stages, "score": r.score,
                              "budget": r.budget, "values": r.values, "seconds": r.seconds}
                             for r in rows]})
        return 0
    print(f"remat hard family {spec.label()} ({cfg.objective}, {cfg.target} vs OPT"
          f"{', every forward-time vector' if args.all_times else ''}) from {args.base}: {word}")
    print(f"{'n':>3} {'L':>3} {'score':>8} {'budget':>7}  values")
    for r in rows:
        print(f"{r.n:>3} {r.stages:>3} {_fmt(r.score):>8} {r.budget:>7}  {r.values}")
    if not rows:
        print("no member could be scored (past the exact solver's reach?)")
    for path in written:
        print(f"wrote {path}")
    return 0
