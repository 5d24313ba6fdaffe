"""Random chains beyond the complete ranges, each over every forward-time vector at once
(proofs/classic_model.md C.8).

    python benchmarks/classic_random_all_times.py --chains 2000 --seed 1 \
        --out benchmarks/results/classic_random_all_times.json

Draws ``--chains`` chains of ``--min-stages``..``--max-stages`` stages (sizes, tape
excesses and forward overheads in ``0..--max-size`` with extra weight on 0, backward
overheads in ``0..2``; every output saved unless ``--unsaved``) and scores each with
:func:`remat_theory.analysis.classic_times.budget_ratios`: the class's largest ratio to the
unrestricted optimum over every budget and every forward-time vector, exact.  Writes the
command, the CPU seconds, the histogram of the largest ratio per chain and the chains that
reach the largest one (each with a time vector attaining it).  ``--zero-fwd-overhead``
draws chains without forward overheads; ``--pareto`` also compares the class's Pareto set
of forward-count vectors with every schedule's at every budget (the stronger statement
"every schedule's counts are matched by one class schedule under the same budget") and
counts the chains where they differ.
"""
from __future__ import annotations

import argparse
import json
import random
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from remat_theory.analysis.classic_times import (budget_ratios, count_labels,  # noqa: E402
                                                 store_all_peak, vectors_at)
from remat_theory.model.chain import Chain  # noqa: E402


def draw(rng: random.Random, lo: int, hi: int, k: int, unsaved: bool,
         zero_fo: bool = False) -> Chain:
    L = rng.randint(lo, hi)
    pick = lambda: rng.choice([0, 0] + list(range(1, k + 1)))  # noqa: E731
    x = [0] + [pick() for _ in range(L)]
    return Chain(name="random", fwd_time=[1.0] * L, bwd_time=[0.0] * (L + 1), x_size=x,
                 tape_size=[x[i + 1] + pick() for i in range(L)],
                 fwd_overhead=[0 if zero_fo else pick() for _ in range(L)],
                 bwd_overhead=[rng.choice([0, 0, 0, 1, 2]) for _ in range(L + 1)],
                 output_saved=[rng.random() < 0.6 for _ in range(L)] if unsaved else None)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--chains", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--min-stages", type=int, default=3)
    p.add_argument("--max-stages", type=int, default=5)
    p.add_argument("--max-size", type=int, default=4)
    p.add_argument("--unsaved", action="store_true")
    p.add_argument("--class", dest="cls", default="weak")
    p.add_argument("--zero-fwd-overhead", action="store_true", dest="zero_fo")
    p.add_argument("--pareto", action="store_true")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    rng = random.Random(a.seed)
    t0 = time.process_time()
    hist, best, top, differ = {}, 1, [], []
    for _ in range(a.chains):
        c = draw(rng, a.min_stages, a.max_stages, a.max_size, a.unsaved, a.zero_fo)
        if a.pareto:
            cap = store_all_peak(c)
            A, K = count_labels(c, "all", cap), count_labels(c, a.cls, cap)
            for b in sorted({pk for _, pk in A} | {pk for _, pk in K}):
                if vectors_at(A, b) != vectors_at(K, b):
                    differ.append({"budget": b, "chain": c.to_dict()})
                    break
        rows = budget_ratios(c, a.cls)
        if not rows:
            hist["no class schedule below store-all"] = hist.get(
                "no class schedule below store-all", 0) + 1
            continue
        b, r, f = max(rows, key=lambda x: x[1])
        hist[str(r)] = hist.get(str(r), 0) + 1
        if r > 1 and r >= best:
            if r > best:
                best, top = r, []
            d = c.to_dict()
            d["fwd_time"] = f
            top.append({"budget": b, "ratio": str(r), "chain": d})
    out = {"command": "python benchmarks/classic_random_all_times.py " + " ".join(
               shlex.quote(x) for x in (argv if argv is not None else sys.argv[1:])),
           "class": a.cls, "chains": a.chains, "cpu_s": round(time.process_time() - t0, 1),
           "largest_ratio": str(best), "histogram": hist, "largest": top[:20]}
    if a.pareto:
        out["pareto_differs"] = {"chains": len(differ), "first": differ[:20]}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"{a.out}: {a.chains} chains, largest ratio {best}, {out['cpu_s']} CPU s; {hist}"
          + (f"; Pareto sets differ on {len(differ)}" if a.pareto else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
