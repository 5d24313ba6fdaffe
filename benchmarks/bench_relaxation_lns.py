"""Is the moment relaxation's optimum below the weak DP's makespan where no proof finishes,
or is its search the obstacle?  A large-neighbourhood search over the relaxation around a
schedule's point.

Where HiGHS and SCIP stop short of the weak DP's makespan on the moment relaxation
(``solvers/ilp/relaxation.py``; docs/ilp.md, "Proofs at depth"), either the relaxation has
0/1 points below that makespan (then no search over it can prove the schedule optimal, and
a stronger relaxation is needed) or it has none and the search is too slow.  This script
looks for such points near the schedule's own: it fixes every variable to the schedule's
point except those of a window of ``W`` consecutive phases and moments (the variables whose
last index lies in ``(a - W, a]``), solves that restricted MILP exactly with HiGHS, keeps
any better point, and slides the window from the first phase (the loss's) down by ``W/2``,
over the whole chain, twice.  A window that improves proves a relaxation point below the
makespan (the point is checked against every row); windows that all end optimal at the
makespan say the schedule's point is a local optimum of the relaxation for that
neighbourhood: evidence, not a proof, that the search is the obstacle.  A window covering
every phase is the whole relaxation (the test checks it finds the relaxation's optimum).

    python benchmarks/bench_relaxation_lns.py --random 60 --seeds 1 --budget 1 --window 16 \\
        --window-seconds 120 --out benchmarks/results/relaxation_lns.json

Budgets as ``bench_mip_solvers.py``'s (``--budget`` min, tight, ... or 0-4, the five of
``bench_prove_depth.py``; ``--net-budget`` 0-4).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import highspy
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import solvers  # noqa: E402
from bench_ilp import machine  # noqa: E402
from bench_mip_solvers import instance_arguments, instances  # noqa: E402
from solvers.bounds import lp_tree  # noqa: E402
from solvers.ilp import relaxation  # noqa: E402


def _milp(rows: lp_tree.LpRows) -> highspy.Highs:
    """The relaxation's rows as a silent single-threaded 0/1 program in HiGHS."""
    n = len(rows.names)
    h = lp_tree.highs_lp(rows)
    h.setOptionValue("mip_rel_gap", 0.0)
    h.changeColsIntegrality(n, np.arange(n, dtype=np.int32),
                            np.array([highspy.HighsVarType.kInteger] * n))
    return h


def lns(chain, budget: int, schedule, window: int, seconds: float, passes: int = 2) -> dict:
    """The search of the module docstring from ``schedule``'s point (valid at ``budget``):
    the best objective found (backward times included), the windows' log, and whether the
    best point satisfies every row of the relaxation."""
    rows = lp_tree.lp_rows(chain, budget)
    n = len(rows.names)
    cols = np.arange(n, dtype=np.int32)
    point = relaxation.relaxation_point(chain, schedule)
    best = np.array([point[nm] for nm in rows.names], dtype=float)
    start = float(rows.cost @ best) + rows.constant
    last = np.array([int(nm.rsplit("_", 1)[1]) for nm in rows.names])
    h = _milp(rows)
    h.setOptionValue("time_limit", float(seconds))
    log = []
    L = chain.length
    step = max(1, window // 2)
    for _ in range(passes):
        for a in range(L, -1, -step):
            inside = (last <= a) & (last > a - window)
            h.changeColsBounds(n, cols, np.where(inside, 0.0, best), np.where(inside, 1.0, best))
            h.setSolution(n, cols, best)
            t0 = time.perf_counter()
            h.run()
            entry = {"window": [a - window, a], "free": int(inside.sum()),
                     "status": h.modelStatusToString(h.getModelStatus()),
                     "seconds": round(time.perf_counter() - t0, 2)}
            if h.getInfo().primal_solution_status == 2:
                x = np.round(np.asarray(h.getSolution().col_value))
                if rows.cost @ x < rows.cost @ best - 1e-6:
                    best = x
                    entry["improved_to"] = float(rows.cost @ best) + rows.constant
            log.append(entry)
    model = relaxation.build_relaxation(chain.scaled_sizes(chain.size_gcd()),
                                        budget // chain.size_gcd())
    violated = relaxation.violated_rows(model, dict(zip(rows.names, best.tolist())))
    return {"start": start, "best": float(rows.cost @ best) + rows.constant,
            "rows_violated": len(violated), "windows": log,
            "all_windows_optimal": all(e["status"] == "Optimal" for e in log)}


def run(args) -> list:
    out = []
    for name, seed, chain, budget in instances(args):
        weak = solvers.solve(chain, budget, "dp-weak")
        t0 = time.perf_counter()
        res = lns(chain, budget, weak.schedule, args.window, args.window_seconds, args.passes)
        row = {"chain": name, "seed": seed, "budget": budget, "weak_dp": weak.makespan,
               "window": args.window, "window_seconds": args.window_seconds,
               "seconds": round(time.perf_counter() - t0, 1), **res}
        print(json.dumps({k: v for k, v in row.items() if k != "windows"}), flush=True)
        out.append(row)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    instance_arguments(ap, "min", "1")
    ap.add_argument("--window", type=int, default=8, help="phases per window")
    ap.add_argument("--window-seconds", type=float, default=60.0)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    rows = run(args)
    if args.out:
        cmd = " ".join(["python benchmarks/bench_relaxation_lns.py"] + sys.argv[1:])
        Path(args.out).write_text(json.dumps({"command": cmd, "machine": machine(),
                                              "runs": rows}, indent=1))


if __name__ == "__main__":
    main()
