"""Exact offloading at depth (issue 41): can the exact solvers prove the optimum over all
schedules of the two-stream model on random chains of 6 and 8 stages?

Chains are the referee's distribution (``benchmarks/offload_dp_gap_referee.py``'s
``chain_of``: the ``random`` family, bandwidth log-uniform in 0.25-100, every output saved
or some unsaved).  Budgets: the class minimum of ``dp-offload`` (a budget at which a
schedule exists) and one and two thirds of the way from it to store-all's peak.  Each
instance runs ``exhaustive-offload`` (best-first search, exact over every schedule) under a
time limit, and ``ilp-offload -o proven=true`` (the MILP over normal-form schedules with
the length bound of O.21-O.22; it refuses when the bound passes ``max_proven_ops``).  An
instance is *proved* when one of them answers ``optimal`` over ``all+offload``; every
answer is replayed by the registry's referee.  ``dp-offload``'s makespan is recorded
beside the best lower bound found.

    python benchmarks/offload_exact_depth.py --stages 6 8 --chains 3 --limit 20 \\
        --out benchmarks/results/offload_exact_depth.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from benchmarks.offload_dp_gap_referee import chain_of
from solvers import registry
from solvers.offload.dp import class_min_budget


def _row(sol, seconds):
    return {"status": sol.status, "optimal_for": sol.optimal_for, "makespan": sol.makespan,
            "bound": sol.bound, "seconds": round(seconds, 2),
            "message": (sol.message or "")[:160]}


def run(stages, chains, limit, max_proven_ops):
    rows = []
    for L in stages:
        for seed in range(chains):
            chain = chain_of(L, seed, seed % 2 == 1)
            lo, hi = class_min_budget(chain), chain.store_all_memory()
            for frac in (0.0, 1 / 3, 2 / 3):
                b = lo + int(frac * (hi - lo))
                row = {"stages": L, "seed": seed, "unsaved_outputs": seed % 2 == 1,
                       "bandwidth": chain.bandwidth, "budget": b, "budget_frac": round(frac, 3)}
                dp = registry.solve(chain, b, "dp-offload")
                row["dp_offload"] = dp.makespan
                t = time.perf_counter()
                ex = registry.solve(chain, b, "exhaustive-offload", max_stages=L,
                                    time_limit=limit)
                row["exhaustive"] = _row(ex, time.perf_counter() - t)
                t = time.perf_counter()
                try:
                    ilp = registry.solve(chain, b, "ilp-offload", proven=True, max_stages=L,
                                         max_proven_ops=max_proven_ops, time_limit=limit)
                    row["ilp"] = _row(ilp, time.perf_counter() - t)
                except Exception as e:  # a refusal before any work (the length bound)
                    row["ilp"] = {"status": "refused", "message": str(e)[:160],
                                  "seconds": round(time.perf_counter() - t, 2)}
                answers = [row["exhaustive"], row["ilp"]]
                row["proved"] = any(a["status"] == "optimal" and a.get("optimal_for")
                                    == "all+offload" for a in answers)
                bounds = [a["bound"] for a in answers if a.get("bound") is not None]
                row["best_bound"] = max(bounds) if bounds else None
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    return {"rows": rows, "summary": summarize(rows)}


def summarize(rows) -> dict:
    """Per length: instances, how many proved, and by which solver."""
    summary = {}
    for L in sorted({r["stages"] for r in rows}):
        rs = [r for r in rows if r["stages"] == L]
        summary[f"{L} stages"] = {"instances": len(rs),
                                  "proved": sum(r["proved"] for r in rs),
                                  "by_exhaustive": sum(r["exhaustive"]["status"] == "optimal"
                                                       for r in rs),
                                  "by_ilp": sum(r["ilp"]["status"] == "optimal" and
                                                r["ilp"].get("optimal_for") == "all+offload"
                                                for r in rs)}
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stages", type=int, nargs="+", default=[6, 8])
    ap.add_argument("--chains", type=int, default=3)
    ap.add_argument("--limit", type=float, default=20.0,
                    help="time limit per solver and instance (seconds)")
    ap.add_argument("--max-proven-ops", type=int, default=48)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    res = run(a.stages, a.chains, a.limit, a.max_proven_ops)
    res["command"] = ("python benchmarks/offload_exact_depth.py --stages "
                      + " ".join(map(str, a.stages)) + f" --chains {a.chains} --limit "
                      f"{a.limit:g} --max-proven-ops {a.max_proven_ops}"
                      + (f" --out {a.out}" if a.out else ""))
    res["seconds"] = round(time.perf_counter() - t0, 1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(json.dumps(res, indent=1) + "\n")
    print(json.dumps({"command": res["command"], "summary": res["summary"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
