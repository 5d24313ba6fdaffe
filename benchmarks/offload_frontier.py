"""Makespan against budget with a second memory tier (docs/model.md, "Offloading").

For a few built-in family chains, at copy channels of several speeds, and at budgets from
the smallest feasible one (with offloading) to store-all's peak, the optimal makespan of:

- remat only: ``exhaustive`` (the single-stream optimum; also valid with a channel, O.1);
- offload only: ``exhaustive-offload-only`` (no recomputation);
- save-on-cpu and offload-all: the baselines of ``torch.autograd.graph.save_on_cpu``;
- the combination: ``exhaustive-offload``.

The channel's speed is given as the ratio of the time to copy a mean tape to the mean
forward time (4: slow, 1: even, 0.25: fast).  Makespans are divided by the chain's ideal
makespan (store-all's time).  The file in benchmarks/results (about 15 minutes on one core):

    python benchmarks/offload_frontier.py --families transformer --stages 4 \
        --points 4 --time-limit 20 --out benchmarks/results/offload_frontier.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from remat_theory.analysis import families
from solvers import registry
from solvers.offload.exhaustive import min_feasible_budget

METHODS = (("remat only", "exhaustive", {}),
           ("offload only", "exhaustive-offload-only", {}),
           ("save-on-cpu", "save-on-cpu", {}),
           ("offload-all", "offload-all", {}),
           ("remat + offload", "exhaustive-offload", {}))


def _with_ratio(chain, ratio):
    L = chain.length
    copy = ratio * sum(chain.fwd_time) / L
    return chain.replace(bandwidth=sum(chain.tape_size) / L / copy)


def run(names, length, ratios, points, time_limit):
    rows = []
    for name in names:
        base = families.make(name, length, 0)
        for ratio in ratios:
            chain = _with_ratio(base, ratio)
            lo, hi = min_feasible_budget(chain), chain.store_all_memory()
            budgets = sorted({lo + (hi - lo) * k // (points - 1) for k in range(points)})
            for budget in budgets:
                row = {"family": name, "stages": length, "ratio": ratio,
                       "bandwidth": chain.bandwidth, "budget": budget,
                       "budget_fraction": budget / hi, "ideal": chain.ideal_makespan()}
                for label, solver, opts in METHODS:
                    if solver.startswith("exhaustive"):
                        opts = {**opts, "time_limit": time_limit}
                    c = chain.replace(bandwidth=None) if solver == "exhaustive" else chain
                    t0 = time.perf_counter()
                    sol = registry.solve(c, budget, solver, **opts)
                    row[label] = {
                        "status": sol.status,
                        "makespan": sol.makespan,
                        "relative": None if sol.makespan is None else
                        sol.makespan / chain.ideal_makespan(),
                        "bound": sol.bound, "seconds": round(time.perf_counter() - t0, 3),
                        "schedule": None if sol.schedule is None else str(sol.schedule)}
                rows.append(row)
                print(json.dumps({k: (v["relative"] if isinstance(v, dict) else v)
                                  for k, v in row.items()}), file=sys.stderr, flush=True)
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--families", default="random,resnet,transformer")
    p.add_argument("--stages", type=int, default=4)
    p.add_argument("--ratios", default="4,1,0.25")
    p.add_argument("--points", type=int, default=5)
    p.add_argument("--time-limit", type=float, default=60.0)
    p.add_argument("--out")
    a = p.parse_args(argv)
    rows = run(a.families.split(","), a.stages, [float(r) for r in a.ratios.split(",")],
               a.points, a.time_limit)
    out = {"command": "python benchmarks/offload_frontier.py " + " ".join(
               argv if argv is not None else sys.argv[1:]), "methods": [m[0] for m in METHODS],
           "note": "makespan relative to the ideal (store-all) makespan; status 'optimal' "
                   "is proven; 'time_limit' is not", "rows": rows}
    text = json.dumps(out, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
