"""dp-offload's gap on the referee's distribution of issue 41: random chains of 2-5 stages,
bandwidths from 0.25 to 100 bytes/s, budgets from the smallest feasible one to store-all's.

Each chain is the ``random`` family's (sizes 1-10 bytes, times 1-10 s) of its length and
seed, with every output saved or some unsaved (drawn from the seed), and a bandwidth drawn
log-uniformly in [0.25, 100] (from the seed).  At ``--points`` budgets from the smallest
feasible one (exact, with the channel: proofs/offload.md O.3, O.23) to store-all's peak,
``dp-offload`` (the optimum of its class) is compared with ``exhaustive-offload`` (the
optimum over every schedule) under a time limit.  Where the exact search proves its
answer the ratio dp / optimum is exact; where it stops at its limit, the ratio
dp / (its lower bound) is an upper bound on the gap, reported apart ("unresolved").

    python benchmarks/offload_dp_gap_referee.py --stages 2 3 4 5 --seeds 20 20 6 3 \\
        --points 4 --limit 10 --out benchmarks/results/offload_dp_gap_referee.json
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time

from remat_theory.analysis import families
from solvers import registry
from solvers.offload.exhaustive import min_feasible_budget

BANDWIDTHS = (0.25, 100.0)


def chain_of(L: int, seed: int, unsaved: bool):
    base = families.make("random", L, seed)
    r = random.Random(f"{L}-{seed}")
    lo, hi = (math.log(b) for b in BANDWIDTHS)
    bandwidth = math.exp(r.uniform(lo, hi))
    chain = base.replace(bandwidth=round(bandwidth, 4))
    if unsaved:
        chain = chain.replace(output_saved=[r.random() < 0.5 for _ in range(L)])
    return chain


def percentile(values, q):
    """The q-th percentile (nearest rank) of ``values``."""
    if not values:
        return None
    v = sorted(values)
    return v[max(0, math.ceil(q / 100 * len(v)) - 1)]


def run(stages, seeds, points, limit) -> dict:
    rows = []
    for L, n in zip(stages, seeds):
        for seed in range(n):
            for unsaved in (False, True):
                chain = chain_of(L, seed, unsaved)
                lo, hi = min_feasible_budget(chain), chain.store_all_memory()
                budgets = sorted({lo + k * (hi - lo) // max(points - 1, 1)
                                  for k in range(points)})
                for b in budgets:
                    t = time.perf_counter()
                    ex = registry.solve(chain, b, "exhaustive-offload", max_stages=L,
                                        time_limit=limit)
                    t_ex = time.perf_counter() - t
                    dp = registry.solve(chain, b, "dp-offload")
                    row = {"stages": L, "seed": seed, "unsaved_outputs": unsaved,
                           "bandwidth": chain.bandwidth, "budget": b,
                           "budget_frac": (b - lo) / (hi - lo) if hi > lo else 1.0,
                           "exact_status": ex.status,
                           "optimum": ex.makespan if ex.status == "optimal" else None,
                           "lower_bound": ex.bound, "exact_seconds": round(t_ex, 3),
                           "dp_offload": dp.makespan if dp.schedule is not None else None}
                    ref = row["optimum"] if row["optimum"] is not None else ex.bound
                    row["ratio"] = (None if row["dp_offload"] is None or not ref else
                                    row["dp_offload"] / ref)
                    if ex.status == "optimal" and dp.schedule is not None and \
                            dp.makespan > ex.makespan * (1 + 1e-9):
                        row["optimal_schedule"] = str(ex.schedule)
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
    return {"rows": rows, "summary": summarize(rows)}


def summarize(rows) -> dict:
    def part(rs):
        exact = [r for r in rs if r["exact_status"] == "optimal"]
        ratios = [r["ratio"] for r in exact if r["ratio"] is not None]
        open_ = [r for r in rs if r["exact_status"] != "optimal"]
        return {"instances": len(rs), "proven_by_exact_search": len(exact),
                "dp_optimal": sum(1 for r in exact if r["ratio"] is not None
                                  and r["ratio"] <= 1 + 1e-9),
                "dp_infeasible_where_a_schedule_fits": sum(r["dp_offload"] is None
                                                           for r in exact),
                "ratio_p50": percentile(ratios, 50), "ratio_p90": percentile(ratios, 90),
                "ratio_p99": percentile(ratios, 99), "ratio_max": max(ratios, default=None),
                "unresolved": len(open_),
                "unresolved_ratio_to_bound_max": max(
                    (r["ratio"] for r in open_ if r["ratio"] is not None), default=None)}

    out = {"all": part(rows)}
    for L in sorted({r["stages"] for r in rows}):
        out[f"{L} stages"] = part([r for r in rows if r["stages"] == L])
    for key, test in (("all outputs saved", lambda r: not r["unsaved_outputs"]),
                      ("some outputs unsaved", lambda r: r["unsaved_outputs"]),
                      ("bandwidth < 1", lambda r: r["bandwidth"] < 1),
                      ("bandwidth >= 1", lambda r: r["bandwidth"] >= 1)):
        out[key] = part([r for r in rows if test(r)])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stages", type=int, nargs="+", default=[2, 3, 4, 5])
    ap.add_argument("--seeds", type=int, nargs="+", default=[20, 20, 6, 3],
                    help="seeds per length, in the order of --stages")
    ap.add_argument("--points", type=int, default=4)
    ap.add_argument("--limit", type=float, default=10.0,
                    help="exhaustive-offload's time limit per instance (seconds)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    if len(a.seeds) != len(a.stages):
        ap.error("--seeds takes one count per length of --stages")
    t0 = time.perf_counter()
    res = run(a.stages, a.seeds, a.points, a.limit)
    res["command"] = ("python benchmarks/offload_dp_gap_referee.py --stages "
                      + " ".join(map(str, a.stages)) + " --seeds "
                      + " ".join(map(str, a.seeds)) + f" --points {a.points} --limit {a.limit:g}"
                      + (f" --out {a.out}" if a.out else ""))
    res["seconds"] = round(time.perf_counter() - t0, 1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(json.dumps(res, indent=1) + "\n")
    print(json.dumps({"command": res["command"], "summary": res["summary"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
