"""Parametric families on the gadgets of proofs/classic_model.md: each family's trend with
``L`` or with the driven field (``remat hard --family``, one family per row), in one run.

    python benchmarks/classic_families.py --seconds 60 \
        --out benchmarks/results/classic_families.json

Each row: the base certificate, the family, the objective, the trend word and every member
scored ``(n, L, ratio, budget, seconds)`` (the class DP against exhaustive search at every
budget where the class's makespan changes, or the smallest budgets); a family stops at
``--seconds`` or past exhaustive search's reach (10 stages).  ``--certificates DIR`` also
writes the longest member of each rising or flat family longer than its base.
``--all-times`` scores each member over every forward-time vector at once (the
``dp-weak-gap`` rows; proofs/classic_model.md C.8), so the ``drive fwd_time`` rows are
left out: their limits are among the vectors covered.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from remat_theory.analysis.certificates import load  # noqa: E402
from remat_theory.analysis.hard_families import (FamilySpec, best_certificate, growth,  # noqa: E402
                                                  trend)
from remat_theory.analysis.hard_objectives import GapConfig  # noqa: E402

CERTS = ROOT / "proofs" / "certificates"
D = lambda f, i: FamilySpec("drive", field=f, index=i)  # noqa: E731
R = lambda s: FamilySpec("repeat", stage=s)  # noqa: E731
# (base certificate, objective, families)
PLAN = [
    ("classic_weak_gap_L3.json", "dp-weak-gap",
     [FamilySpec("compose"), FamilySpec("compose", costly_first=True), R(0), R(1), R(2),
      D("fwd_time", 0), D("tape_size", 1), D("fwd_overhead", 2), D("x_size", 2)]),
    ("classic_weak_gap_L2.json", "dp-weak-gap",
     [FamilySpec("compose"), FamilySpec("compose", costly_first=True), R(0), R(1),
      D("x_size", 1), D("tape_size", 0), D("fwd_overhead", 1), D("bwd_overhead", 2)]),
    ("persistence_gap_weak.json", "dp-weak-gap",
     [FamilySpec("compose", costly_first=True), R(1), R(2), D("fwd_overhead", 1)]),
    ("classic_budget_gap_L2.json", "budget-gap",
     [FamilySpec("compose"), R(0), R(1), D("tape_size", 0), D("fwd_overhead", 1),
      D("x_size", 1)]),
    ("hard_budget_gap_unsaved_L3.json", "budget-gap",
     [FamilySpec("compose"), R(0), R(1), R(2), D("fwd_overhead", 1), D("x_size", 1)]),
    ("referee_weak_gap_L6.json", "dp-weak-gap",
     [D("fwd_time", 0), D("fwd_time", 1), R(2)]),
]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=60.0, help="per family")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--only", default=None, help="only the bases whose file name has this")
    p.add_argument("--certificates", default=None, metavar="DIR")
    p.add_argument("--all-times", action="store_true", dest="all_times")
    p.add_argument("--max-stages", type=int, default=10, dest="max_stages",
                   help="stop a family past this many stages (default 10)")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    rows = []
    for base_name, objective, specs in PLAN:
        if a.only and a.only not in base_name:
            continue
        if a.all_times and objective != "dp-weak-gap":
            continue
        base = load(CERTS / base_name).chain
        cfg = GapConfig(objective, opt_time_limit=a.seconds)
        for spec in specs:
            if a.all_times and spec.field == "fwd_time":
                continue
            t0 = time.perf_counter()
            tr = trend(base, spec, cfg, a.steps, seconds=a.seconds, all_times=a.all_times,
                       max_stages=a.max_stages)
            word = growth(tr)
            row = {"base": base_name, "objective": objective, "family": spec.label(),
                   "all_times": a.all_times,
                   "trend": word, "seconds": round(time.perf_counter() - t0, 1),
                   "members": [[r.n, r.stages, r.score, r.budget, r.seconds] for r in tr]}
            if a.certificates and word in ("rising", "flat") and tr and tr[-1].stages > base.length:
                cert = best_certificate(tr[-1:], spec, cfg,
                                        f"benchmarks/classic_families.py ({base_name})")
                name = (f"family_{Path(base_name).stem}_{spec.kind}"
                        f"{'' if spec.stage is None else spec.stage}_L{tr[-1].stages}.json")
                row["certificate"] = str(cert.save(Path(a.certificates) / name))
            rows.append(row)
            print(f"{base_name:34s} {spec.label():34s} {word:8s} "
                  + " ".join(f"L{m[1]}:{m[2]:.4f}" for m in row["members"]), flush=True)
    out = {"command": "python benchmarks/classic_families.py " + " ".join(
        shlex.quote(x) for x in (argv if argv is not None else sys.argv[1:])), "rows": rows}
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
