"""The moment relaxation's bound with and without the ``fall_peak`` rows (proofs/ilp.md
section 12) on the instances the proof benchmark left unproven (docs/ilp.md, "Proofs at
depth"): the random 30- and 60-stage chains at their smallest and 25% budgets, the network
chains of 32 and 48 stages at 25%, and the two tight random 30-stage chains of
``bench_prove.py`` (10% of the way from the smallest budget to store-all).

Each instance: the weak DP's schedule (the MIP start and the makespan to reach), then
``relaxation.lower_bound`` with the given extra rows under ``--time-limit`` (the share
``prove`` gives the relaxation beyond 20 stages is 0.8 of its limit: 120 s of 150).

    python benchmarks/bench_relaxation_depth.py --rows none --time-limit 120 --out A.json
    python benchmarks/bench_relaxation_depth.py --rows fall_peak --time-limit 120 --out B.json
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import solvers  # noqa: E402
from bench_ilp import budgets_of  # noqa: E402
from bench_prove_depth import budgets, net_chain  # noqa: E402
from remat_theory.analysis.families import make  # noqa: E402
from solvers.ilp import relaxation  # noqa: E402

NAMES = ("random30-smallest", "random30-25%", "random60-smallest", "random60-25%",
         "net32-25%", "net48-25%", "random30-tight-s0", "random30-tight-s1")


def instance(name):
    """``(chain, budget)`` of a named instance (module docstring), or of
    ``random<L>-s<seed>-b<budget>``: ``families.make("random", L, seed)`` at that budget."""
    m = re.fullmatch(r"random(\d+)-s(\d+)-b(\d+)", name)
    if m:
        return make("random", int(m[1]), int(m[2])), int(m[3])
    if name not in NAMES:
        raise SystemExit(f"unknown instance {name!r}: {', '.join(NAMES)} or random<L>-s<S>-b<B>")
    if name.startswith("random30-tight"):
        chain = make("random", 30, int(name[-1]))
        return chain, budgets_of(chain)["tight"]
    k = 0 if name.endswith("smallest") else 1
    if name.startswith("random"):
        chain = make("random", int(name[6:8]), 0)
    else:
        chain = net_chain(int(name[3:5]) - 2)
    return chain, budgets(chain)[k]


def gaps(lengths, seeds: int, time_limit: float) -> list:
    """On ``families.make("random", L, seed)`` at the smallest budget, 10% and 25% of the way
    to store-all: the weak DP's makespan, the plain relaxation's bound and the bound with
    ``fall_peak`` (each from the DP's schedule, ``time_limit`` s), and bounded search's
    answer (``prove -o relaxation=false``, the oracle; ``time_limit`` s)."""
    out = []
    for L in lengths:
        for seed in range(seeds):
            chain = make("random", L, seed)
            lo = solvers.solve(chain, 0, "dp-weak").min_budget
            hi = chain.store_all_memory()
            for b in sorted({lo, lo + (hi - lo) // 10, lo + (hi - lo) // 4}):
                dp = solvers.solve(chain, b, "dp-weak")
                row = {"L": L, "seed": seed, "budget": b, "smallest": lo,
                       "dp_weak": dp.makespan}
                for key, fams in (("plain", ()), ("fall_peak", ("fall_peak",))):
                    t0 = time.perf_counter()
                    lb = relaxation.lower_bound(chain, b, schedule=dp.schedule,
                                                time_limit=time_limit, cuts=fams)
                    row[key] = {"bound": lb.value, "solved": lb.proven_optimal,
                                "seconds": round(time.perf_counter() - t0, 1)}
                s = solvers.solve(chain, b, "prove", time_limit=time_limit, relaxation=False)
                row["bounded_search"] = {"status": s.status, "makespan": s.makespan,
                                         "bound": s.bound}
                print(json.dumps(row), flush=True)
                out.append(row)
    return out


def dp_check(lengths, seeds: int, time_limit: float) -> list:
    """Is the weak DP's schedule optimal at the smallest budgets?  Bounded search (``prove -o
    relaxation=false``) at the smallest feasible budget, one above and 10% of the way."""
    out = []
    for L in lengths:
        for seed in range(seeds):
            chain = make("random", L, seed)
            lo = solvers.solve(chain, 0, "dp-weak").min_budget
            for b in sorted({lo, lo + 1, lo + (chain.store_all_memory() - lo) // 10}):
                dp = solvers.solve(chain, b, "dp-weak").makespan
                s = solvers.solve(chain, b, "prove", time_limit=time_limit, relaxation=False)
                row = {"L": L, "seed": seed, "budget": b, "smallest": lo, "dp_weak": dp,
                       "status": s.status, "makespan": s.makespan, "bound": s.bound}
                print(json.dumps(row), flush=True)
                out.append(row)
    return out


def lp_root(chain, budget, fams) -> float:
    """The relaxation's LP optimum (every variable continuous in [0, 1]), with ``fams``."""
    import pulp

    from solvers.ilp import backends, cuts
    g = chain.size_gcd()
    model = relaxation.build_relaxation(chain.scaled_sizes(g), budget // g)
    if fams:
        cuts.add_cuts(model, budget // g, fams)
    for v in model.prob.variables():
        v.cat = pulp.LpContinuous
    res = backends.run_model(model, "highs", None, None, 1, max(1.0, chain.ideal_makespan()))
    return res.objective


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="none", help="none, or comma-separated cut families")
    ap.add_argument("--only", nargs="*", default=list(NAMES))
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--sweep", type=float, default=None, metavar="MINUTES",
                    help="instead: the validity sweep on small chains (sweep())")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lp", action="store_true",
                    help="instead of the MIP: the root LP's optimum (every binary relaxed)")
    ap.add_argument("--gaps", type=int, nargs="*", default=None, metavar="L",
                    help="instead: gaps() on random chains of these lengths")
    ap.add_argument("--dp-check", type=int, nargs="*", default=None, metavar="L",
                    help="instead: dp_check() on random chains of these lengths")
    ap.add_argument("--seeds", type=int, default=3)
    a = ap.parse_args(argv)
    if a.gaps is not None or a.dp_check is not None:
        fn, lengths = (gaps, a.gaps) if a.gaps is not None else (dp_check, a.dp_check)
        res = {"command": " ".join(["python", "benchmarks/bench_relaxation_depth.py"]
                                   + sys.argv[1:]), "runs": fn(lengths, a.seeds, a.time_limit)}
        if a.out:
            Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
        return
    if a.sweep is not None:
        res = sweep(a.sweep, a.seed)
        res["command"] = " ".join(["python", "benchmarks/bench_relaxation_depth.py"]
                                  + sys.argv[1:])
        print(json.dumps(res, indent=1))
        if a.out:
            Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
        return
    fams = () if a.rows == "none" else tuple(a.rows.split(","))
    runs = []
    for name in a.only:
        chain, b = instance(name)
        dp = solvers.solve(chain, b, "dp-weak")
        if a.lp:
            row = {"instance": name, "stages": chain.length, "budget": b, "rows": a.rows,
                   "dp_weak": dp.makespan, "lp_root": lp_root(chain, b, fams)}
            print(json.dumps(row), flush=True)
            runs.append(row)
            continue
        t0 = time.perf_counter()
        lb = relaxation.lower_bound(chain, b, schedule=dp.schedule, time_limit=a.time_limit,
                                    cuts=fams)
        row = {"instance": name, "stages": chain.length, "budget": b, "rows": a.rows,
               "dp_weak": dp.makespan, "bound": lb.value, "solved": lb.proven_optimal,
               "proved": lb.value is not None and lb.value >= dp.makespan - 1e-6,
               "status": lb.status_text, "seconds": round(time.perf_counter() - t0, 1),
               "load_1min": os.getloadavg()[0]}
        print(json.dumps(row), flush=True)
        runs.append(row)
    if a.out:
        Path(a.out).write_text(json.dumps(
            {"command": " ".join(["python", "benchmarks/bench_relaxation_depth.py"] + sys.argv[1:]),
             "cpus": os.cpu_count(), "runs": runs}, indent=1) + "\n")



def _sweep_chain(r):
    """A small chain with overheads, recording costs and unsaved outputs, drawn by ``r``."""
    from remat_theory.model.chain import Chain
    L = r.randint(2, 7)

    def size():
        return r.choice([0, 1, 2, 3, 5, 8, 13])

    x = [max(1, size()) for _ in range(L + 1)]
    fwd = [float(r.randint(0, 10)) for _ in range(L)]
    kw = {}
    if r.random() < 0.5:
        kw["fall_time"] = [t + r.choice([0, 0, 1, 3]) for t in fwd]
        kw["fall_overhead"] = [r.choice([0, 0, 1, 3, 5]) for _ in range(L)]
    if r.random() < 0.5:
        kw["output_saved"] = [r.random() < 0.5 for _ in range(L)]
    return Chain(fwd, [float(r.randint(0, 10)) for _ in range(L + 1)], x,
                 [x[i + 1] + size() for i in range(L)],
                 [r.choice([0, 0, 1, 3, 5]) for _ in range(L)],
                 [r.choice([0, 0, 1, 3]) for _ in range(L + 1)], **kw)


def sweep(minutes: float, seed: int) -> dict:
    """Theorem 5 checked against the oracle: on random small chains at every budget where the
    optimum changes, the exhaustive optimum's schedule is a point of the relaxation with the
    ``fall_peak`` rows (no violated row, objective at most its makespan), and the bound is
    never above the exhaustive optimum; counts where it rises above the plain bound."""
    import random

    from solvers.exhaustive import min_feasible_budget, search
    from solvers.ilp import cuts

    r = random.Random(seed)
    t0 = time.perf_counter()
    out = {"chains": 0, "breakpoints": 0, "violated_point": 0, "above_optimum": 0,
           "raised": 0, "closed_gap": 0, "plain_below_optimum": 0, "first_raised": []}
    while time.perf_counter() - t0 < 60 * minutes:
        chain = _sweep_chain(r)
        out["chains"] += 1
        prev = None
        for b in range(min_feasible_budget(chain, max_stages=10), chain.store_all_memory() + 1):
            sched, opt = search(chain, b)[:2]
            if opt == prev:
                continue
            prev = opt
            out["breakpoints"] += 1
            g = chain.size_gcd()
            model = relaxation.build_relaxation(chain.scaled_sizes(g), b // g)
            cuts.add_cuts(model, b // g, ("fall_peak",))
            pt = cuts.cut_point(chain, sched, relaxation.relaxation_point(chain, sched))
            obj = sum(model.prob.objective.get(v, 0) * pt[v.name] for v in
                      model.prob.objective) + math.fsum(chain.bwd_time)
            if relaxation.violated_rows(model, pt) or obj > opt + 1e-9 * max(1.0, opt):
                out["violated_point"] += 1
                print("VIOLATED POINT", json.dumps(chain.to_dict()), b, str(sched), flush=True)
            plain = relaxation.lower_bound(chain, b).value
            lb = relaxation.lower_bound(chain, b, cuts=("fall_peak",)).value
            tol = 1e-9 * max(1.0, opt)
            if lb > opt + tol:
                out["above_optimum"] += 1
                print("ABOVE", json.dumps(chain.to_dict()), b, lb, opt, flush=True)
            if plain < opt - tol:
                out["plain_below_optimum"] += 1
                if lb > plain + tol:
                    out["raised"] += 1
                    if lb >= opt - tol:
                        out["closed_gap"] += 1
                    if len(out["first_raised"]) < 10:
                        out["first_raised"].append({"chain": chain.to_dict(), "budget": b,
                                                    "plain": plain, "fall_peak": lb,
                                                    "optimum": opt})
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


if __name__ == "__main__":
    main()
