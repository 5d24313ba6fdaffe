"""Exhaustive search on the ILP benchmark's random chains at tight budgets, before and after
its pruning (proofs/exhaustive.md, Lemma 3 and "The incumbent"), in one run.

For each chain (``families.make("random", L, seed)``) and budget (``tight``: 10% of the way
from the weak DP's smallest feasible budget to store-all, as ``bench_ilp.py``), every mode
runs the same search code with one difference:

- ``original``: the search as it was before this work: the A* bound alone, one term per
  backward, the 0/1 knapsack for terms of at most 12 stages only (their LP above);
- ``before``: today's A* bound (also the 0/1 knapsack for the terms of small capacity, and
  the two-window terms of Lemma 2') without the pruning (no dominance rules, no incumbent);
- ``dominance``: with the dominance rules of Lemma 3;
- ``incumbent``: with the weak DP's schedule as the incumbent;
- ``after``: both, as ``remat solve --solver exhaustive`` runs chains of more than 10
  stages (the time includes the weak DP's).

The move filter of rule 3 (no operation over the budget is proposed), which changes no
state, is on in every mode.  Each row: proven or not, the optimum or the lower bound reached under ``--time-limit``,
states expanded and kept, wall and CPU seconds (CPU: the steadier figure on a shared
machine), the 1-minute load average at the start.

    python benchmarks/bench_exhaustive.py --lengths 12 15 --seeds 3 --time-limit 120 \\
        --modes before after --out benchmarks/results/exhaustive_speed.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import solvers
import solvers.exhaustive as ex
from remat_theory.analysis.families import make

RESULTS = Path(__file__).resolve().parent / "results"
MODES = {"original": (False, False), "before": (False, False), "dominance": (True, False),
         "incumbent": (False, True), "after": (True, True)}


def tight_budget(chain) -> int:
    """10% of the way from the weak DP's smallest feasible budget to store-all."""
    lo = solvers.solve(chain, 0, "dp-weak").min_budget
    return lo + (chain.store_all_memory() - lo) // 10


def run(chain, budget: int, mode: str, time_limit: float) -> dict:
    """One search of ``chain`` at ``budget`` in ``mode`` (see the module docstring)."""
    dominance, with_incumbent = MODES[mode]
    stats: dict = {}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    wall, cpu = time.perf_counter(), time.process_time()
    incumbent = (ex.weak_incumbent(chain, budget, "all", time_limit) if with_incumbent
                 else None)
    left = max(time_limit - (time.perf_counter() - wall), 1e-9)
    bound_options = ex.Heuristic.exact_steps, ex.Heuristic.pairs
    if mode == "original":
        ex.Heuristic.exact_steps, ex.Heuristic.pairs = -1, False
    try:
        _, makespan, _, bound, proven, stopped = ex.run_search(
            chain, budget, False, left, "all", ex.DEFAULT_MAX_STATES, incumbent, stats,
            dominance)
    finally:
        ex.Heuristic.exact_steps, ex.Heuristic.pairs = bound_options
    return {"mode": mode, "proven": bool(proven and makespan is not None),
            "makespan": makespan, "bound": bound, "stopped_by": stopped,
            "expanded": stats.get("expanded", 0), "kept": stats.get("kept", 0),
            "seconds": round(time.perf_counter() - wall, 2),
            "cpu_seconds": round(time.process_time() - cpu, 2), "load_1min": load}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[12, 15])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--modes", nargs="+", choices=sorted(MODES), default=["before", "after"])
    ap.add_argument("--out", default=str(RESULTS / "exhaustive_speed.json"))
    args = ap.parse_args(argv)
    runs = []
    for L in args.lengths:
        for seed in range(args.seeds):
            chain = make("random", L, seed)
            budget = tight_budget(chain)
            for mode in args.modes:
                row = {"L": L, "seed": seed, "budget": budget,
                       **run(chain, budget, mode, args.time_limit)}
                runs.append(row)
                print(json.dumps(row), flush=True)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    result = {"command": " ".join(["python", "benchmarks/bench_exhaustive.py"] + sys.argv[1:]),
              "time_limit": args.time_limit,
              "machine": {"cpus": os.cpu_count(), "load_average_1_5_15_at_end": load,
                          "python": sys.version.split()[0], "platform": platform.platform()},
              "runs": runs}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
