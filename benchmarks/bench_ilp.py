"""Benchmarks of the ``ilp`` solver (measured figures, not tests).

Two sweeps:

``speed``: time to prove optimality on random chains (``families.make("random", L, seed)``)
at a middle budget (halfway from the smallest budget to store-all) and a tight budget (10%
of the way), for HiGHS and CBC; the smallest budget is the weak DP's (``dp-weak``
``min_budget``, the smallest at which a weakly persistent schedule exists: exhaustive
search does not scale to these sizes).  Writes ``results/ilp_speed.json`` with medians,
every run, and the machine load.

``normal-form``: the evidence of proofs/ilp.md section 5: random small chains drawn to
provoke multi-run phases (zero sizes, large overheads); at every exhaustive breakpoint
compares the restricted normal forms (one or two strictly / weakly increasing runs per
phase) with exhaustive search.  Writes
``results/ilp_normal_form.json`` with every mismatch found.

Usage::

    python benchmarks/bench_ilp.py speed --lengths 10 20 30 --seeds 5 --pairs --time-limit 120
    python benchmarks/bench_ilp.py normal-form --minutes 10
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import solvers
from remat_theory.chain import Chain
from remat_theory.families import make

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict:
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"cpus": os.cpu_count(), "load_average_1_5_15": load, "python": sys.version.split()[0],
            "platform": platform.platform()}


def budgets_of(chain: Chain) -> dict:
    lo = solvers.solve(chain, 0, "dp-weak").min_budget
    hi = chain.store_all_memory()
    return {"min": lo, "store_all": hi, "middle": lo + (hi - lo) // 2,
            "tight": lo + (hi - lo) // 10}


def speed(args) -> dict:
    runs = []
    for L in args.lengths:
        for seed in range(args.seeds):
            chain = make("random", L, seed)
            b = budgets_of(chain)
            for kind in args.budgets:
                for ms in args.mip_solvers:
                    t0 = time.perf_counter()
                    sol = solvers.solve(chain, b[kind], "ilp", passes=args.passes,
                                        pairs=args.pairs, mip_solver=ms,
                                        time_limit=args.time_limit)
                    dt = time.perf_counter() - t0
                    weak = solvers.solve(chain, b[kind], "dp-weak")
                    row = {"L": L, "seed": seed, "budget_kind": kind, "budget": b[kind],
                           "mip_solver": ms, "passes": args.passes, "pairs": args.pairs,
                           "optimal_for": sol.optimal_for, "status": sol.status,
                           "makespan": sol.makespan, "bound": sol.bound, "gap": sol.gap,
                           "dp_weak": weak.makespan, "seconds": round(dt, 3),
                           "variables": sol.info.get("variables"),
                           "load_1min": os.getloadavg()[0]}
                    runs.append(row)
                    print(json.dumps(row), flush=True)
    summary = []
    for L in args.lengths:
        for kind in args.budgets:
            for ms in args.mip_solvers:
                rs = [r for r in runs if r["L"] == L and r["budget_kind"] == kind
                      and r["mip_solver"] == ms]
                proven = [r for r in rs if r["status"] == "optimal"]
                summary.append({
                    "L": L, "budget_kind": kind, "mip_solver": ms, "instances": len(rs),
                    "proven": len(proven),
                    "median_seconds": statistics.median(r["seconds"] for r in rs) if rs else None,
                    "max_seconds": max(r["seconds"] for r in rs) if rs else None})
    return {"command": " ".join(["python", "benchmarks/bench_ilp.py"] + sys.argv[1:]),
            "passes": args.passes, "pairs": args.pairs, "time_limit": args.time_limit,
            "machine": machine(),
            "note": "median_seconds counts an unproven run at its time (about the time limit), "
                    "so it is a lower bound on the true median when some runs are unproven",
            "summary": summary, "runs": runs}


def _provocative_chain(L: int, r: random.Random) -> Chain:
    ms = r.choice([5, 10, 20])

    def size():
        return r.choice([0, 1, r.randint(1, ms), ms])

    x = [size() for _ in range(L + 1)]
    tp = [x[i + 1] + r.choice([0, r.randint(0, ms)]) for i in range(L)]
    fo = [r.choice([0, 0, r.randint(0, 2 * ms)]) for _ in range(L)]
    bo = [r.choice([0, 0, r.randint(0, 2 * ms)]) for _ in range(L + 1)]
    return Chain([float(r.randint(1, 10)) for _ in range(L)],
                 [float(r.randint(1, 10)) for _ in range(L + 1)], x, tp, fo, bo)


CONFIGS = {"runs<=1": {"passes": 1}, "weak-runs<=1": {"passes": 1, "pairs": True},
           "runs<=2": {"passes": 2}, "weak-runs<=2": {"passes": 2, "pairs": True}}


def normal_form(args) -> dict:
    from solvers.exhaustive import min_feasible_budget, search

    r = random.Random(args.seed)
    t0 = time.perf_counter()
    checked = {c: 0 for c in CONFIGS}
    worse = {c: [] for c in CONFIGS}
    chains = 0
    while time.perf_counter() - t0 < 60 * args.minutes:
        L = r.choice(args.lengths)
        chain = _provocative_chain(L, r)
        chains += 1
        lo, hi = min_feasible_budget(chain), chain.store_all_memory()
        prev = None
        for b in range(lo, hi + 1):
            _, best, _, _, _ = search(chain, b)
            if best == prev:
                continue
            prev = best
            for name, opts in CONFIGS.items():
                sol = solvers.solve(chain, b, "ilp", warm_start=False, **opts)
                checked[name] += 1
                if sol.makespan is None or sol.makespan > best * (1 + 1e-9):
                    worse[name].append({"chain": chain.to_dict(), "budget": b, "exhaustive": best,
                                        "ilp": sol.makespan, "status": sol.status,
                                        "schedule": None if sol.schedule is None else str(sol.schedule)})
                    print(f"{name}: {sol.makespan} > {best} (L={L}, budget {b})", flush=True)
                assert sol.makespan is None or sol.makespan >= best * (1 - 1e-9), "below the optimum"
    return {"command": " ".join(["python", "benchmarks/bench_ilp.py"] + sys.argv[1:]),
            "machine": machine(), "minutes": args.minutes, "chains": chains,
            "breakpoints_checked": checked,
            "mismatches": {k: len(v) for k, v in worse.items()},
            "examples": {k: v[:5] for k, v in worse.items()}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sp = sub.add_parser("speed")
    sp.add_argument("--lengths", type=int, nargs="+", default=[10, 20, 30])
    sp.add_argument("--seeds", type=int, default=5)
    sp.add_argument("--budgets", nargs="+", default=["middle", "tight"])
    sp.add_argument("--mip-solvers", nargs="+", default=["highs", "cbc"])
    sp.add_argument("--passes", type=int, default=1)
    sp.add_argument("--pairs", action="store_true",
                    help="weakly increasing runs (the fast mode of proofs/ilp.md section 5)")
    sp.add_argument("--time-limit", type=float, default=120.0)
    sp.add_argument("--out", default=str(RESULTS / "ilp_speed.json"))
    nf = sub.add_parser("normal-form")
    nf.add_argument("--minutes", type=float, default=10.0)
    nf.add_argument("--lengths", type=int, nargs="+", default=[2, 3, 4, 5, 6])
    nf.add_argument("--seed", type=int, default=0)
    nf.add_argument("--out", default=str(RESULTS / "ilp_normal_form.json"))
    args = ap.parse_args(argv)
    result = speed(args) if args.cmd == "speed" else normal_form(args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
