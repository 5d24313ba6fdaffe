"""Makespan against budget with a second memory tier, on profiled networks' chains.

For each chain file (``remat profile --model NAME --out CHAIN.json`` writes one: the
built-in networks and captured ones), at copy channels of several speeds (GB/s, each way;
the chain's own compute times, from the profile), at budgets from the least one any method
reaches to store-all's peak, the makespan (relative to the ideal, store-all's) of:

- remat only: ``dp`` (the persistent optimum, the chain without its channel);
- offload only: ``dp-offload-only`` (store-all with the transfers of ``dp-offload``'s
  class: the best of ``store-all+offload``) and the baselines ``save-on-cpu`` and
  ``offload-all`` (``torch.autograd.graph.save_on_cpu`` and its overlapped version);
- the combination: ``dp-offload`` (class ``persistent+offload``).

The DPs count memory in ``--slots`` slots of budget/slots bytes (sizes rounded up: every
schedule is valid at the real budget, replayed by the referee).  Bandwidth 0 is the chain
with a dead channel: no transfer (offload only then needs store-all's memory).  Usage:

    python benchmarks/offload_networks.py benchmarks/results/offload_chains/*.json \
        --bandwidths 0,1,4,16,64 --points 8 --slots 1000 \
        --out benchmarks/results/offload_networks.json

(the chain files there were written by ``remat profile --model NAME --scale small
--repeats 3 --threads 1``, with ``--granularity fine`` for the captured gpt2, llama,
tv-resnet and vit, on this project's 2-core CPU machine: times in seconds of CPU).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from remat_theory import Chain
from solvers import registry

METHODS = (("remat only", "dp", {}),
           ("offload only", "dp-offload-only", {}),
           ("save-on-cpu", "save-on-cpu", {}),
           ("offload-all", "offload-all", {}),
           ("remat + offload", "dp-offload", {}))
SLOTTED = ("dp", "dp-offload-only", "dp-offload")


def _least(chain: Chain) -> int:
    """The least budget any of the methods can reach: the combination's (its class holds
    remat only's persistent schedules and save-on-cpu)."""
    from solvers.offload.dp import UnitChain, min_units
    uc, g = UnitChain.exact(chain)
    return min_units(uc, chain) * g


def run_chain(path: str, bandwidths, points: int, slots: int) -> list:
    base = Chain.load(path)
    name = os.path.splitext(os.path.basename(path))[0]
    rows = []
    for gbs in bandwidths:
        chain = base.replace(bandwidth=gbs * 1e9)
        lo, hi = _least(chain), chain.store_all_memory()
        budgets = sorted({lo + (hi - lo) * k // (points - 1) for k in range(points)})
        for budget in budgets:
            row = {"chain": name, "stages": chain.length, "bandwidth_GBps": gbs,
                   "budget": budget, "budget_fraction": budget / hi,
                   "ideal": chain.ideal_makespan()}
            for label, solver, opts in METHODS:
                if solver in SLOTTED:
                    opts = {**opts, "slots": slots}
                c = chain.replace(bandwidth=None) if solver == "dp" else chain
                t0 = time.perf_counter()
                sol = registry.solve(c, budget, solver, **opts)
                row[label] = {
                    "status": sol.status, "makespan": sol.makespan,
                    "relative": None if sol.makespan is None else
                    sol.makespan / chain.ideal_makespan(),
                    "transfers": None if sol.schedule is None else
                    sum(op.is_transfer for op in sol.schedule),
                    "seconds": round(time.perf_counter() - t0, 3)}
            rows.append(row)
            print(json.dumps({k: (round(v["relative"], 4) if isinstance(v, dict) and
                                  v["relative"] is not None else
                                  (None if isinstance(v, dict) else v))
                              for k, v in row.items()}), file=sys.stderr, flush=True)
    return rows


def summary(rows: list) -> list:
    """Per chain and bandwidth: the least budget (fraction of store-all) at which each
    method stays within 10% and 20% of the ideal makespan."""
    out = []
    keys = sorted({(r["chain"], r["bandwidth_GBps"]) for r in rows})
    for chain, gbs in keys:
        rs = [r for r in rows if r["chain"] == chain and r["bandwidth_GBps"] == gbs]
        entry = {"chain": chain, "bandwidth_GBps": gbs}
        for label, _, _ in METHODS:
            for tol in (1.1, 1.2):
                ok = [r["budget_fraction"] for r in rs if r[label]["relative"] is not None
                      and r[label]["relative"] <= tol]
                entry[f"{label} <= {tol}"] = round(min(ok), 3) if ok else None
        out.append(entry)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("chains", nargs="+", help="chain files (remat profile --out)")
    p.add_argument("--bandwidths", default="0,1,4,16,64", help="GB/s, comma-separated")
    p.add_argument("--points", type=int, default=8)
    p.add_argument("--slots", type=int, default=200)
    p.add_argument("--out")
    a = p.parse_args(argv)
    rows = []
    for path in a.chains:
        rows += run_chain(path, [float(b) for b in a.bandwidths.split(",")], a.points,
                          a.slots)
    args = argv if argv is not None else sys.argv[1:]
    out = {"command": "python benchmarks/offload_networks.py " + " ".join(args),
           "methods": {label: solver for label, solver, _ in METHODS},
           "note": "makespan relative to the ideal (store-all) makespan; the DPs in slots "
                   "mode (valid at the real budget, optimal for the rounded sizes); "
                   "'summary' gives the least budget fraction within 10% / 20% of the ideal",
           "summary": summary(rows), "rows": rows}
    text = json.dumps(out, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
