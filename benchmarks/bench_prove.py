"""Proofs where the certified ILP stops: ``ilp`` (before) against ``prove`` (after) on the
chains of ``bench_ilp.py speed`` at their tight budget (10% of the way from the smallest
feasible budget to store-all), the same time limit each, in one run.

    python benchmarks/bench_prove.py --family random --lengths 30 --seeds 3 \
        --time-limit 120 --out benchmarks/results/prove_random_L30.json

Each row: the status, makespan and bound of every solver, what proved it
(``info["certificate"]``) and its seconds; the 1-minute load average at the end of the row
(the machine is shared: compare the solvers within one row, not across runs).
``--cuts`` runs ``prove`` with extra relaxation rows (``solvers/ilp/cuts.py``), and
``--revolve`` checks Revolve's closed form (proofs/homogeneous.md, Theorem 7.1) for global
optimality on the tape-dominated homogeneous chains of ``--lengths`` with ``--slots`` (c)
free slots: bounded search cut off at the formula's makespan runs dry exactly when no
schedule at all is faster.  ``--cuts-lp`` only compares the relaxation's LP optimum and
its MIP bound after ``--time-limit`` seconds without and with the rows (the before/after of
the cuts).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import pulp  # noqa: E402

import solvers  # noqa: E402
from bench_ilp import budgets_of, machine  # noqa: E402
from remat_theory.analysis.families import make  # noqa: E402
from solvers.ilp import backends, cuts, relaxation  # noqa: E402


def _row(sol, seconds) -> dict:
    return {"status": sol.status, "optimal_for": sol.optimal_for, "makespan": sol.makespan,
            "bound": sol.bound, "certificate": sol.info.get("certificate"),
            "relaxation": sol.info.get("relaxation"),
            "bounded_search": sol.info.get("bounded_search"), "seconds": round(seconds, 2)}


def compare(args) -> list:
    rows = []
    for L in args.lengths:
        for seed in range(args.seeds):
            chain = make(args.family, L, seed)
            b = budgets_of(chain)
            budget = b[args.budget]
            row = {"family": args.family, "L": L, "seed": seed, "budget_kind": args.budget,
                   "budget": budget}
            for name in args.solvers:
                opts = {"time_limit": args.time_limit}
                if name == "prove" and args.cuts:
                    opts["cuts"] = args.cuts
                if name == "prove" and args.no_relaxation:
                    opts["relaxation"] = False
                if name == "prove" and args.max_states:
                    opts["max_states"] = args.max_states
                if name == "prove" and getattr(args, "cap", False):
                    opts["cap"] = True
                t0 = time.perf_counter()
                sol = solvers.solve(chain, budget, name, **opts)
                row[name] = _row(sol, time.perf_counter() - t0)
            row["load_1min"] = os.getloadavg()[0]
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def _lp_and_mip(chain, budget, families, seconds, start_schedule):
    g = chain.size_gcd()
    sc = chain.scaled_sizes(g)
    out = {}
    for relaxed in (True, False):
        model = relaxation.build_relaxation(sc, budget // g)
        if families:
            cuts.add_cuts(model, budget // g, families)
        if relaxed:
            for v in model.prob.variables():
                v.cat = pulp.LpContinuous
        start = None
        if not relaxed:
            start = relaxation.relaxation_point(chain, start_schedule)
            if families:
                start = cuts.cut_point(chain, start_schedule, start)
        t0 = time.perf_counter()
        res = backends.run_model(model, "highs", seconds, start, 1,
                                 max(1.0, chain.ideal_makespan()))
        key = "lp" if relaxed else "mip_bound"
        val = res.objective if relaxed else res.bound
        out[key] = None if val is None else round(val, 3)  # run_model adds the constant
        if not relaxed:
            out["mip_seconds"] = round(time.perf_counter() - t0, 2)
            out["mip_proven"] = res.proven
    return out


def cuts_lp(args) -> list:
    rows = []
    fams = tuple(f for f in args.cuts.split(",") if f) or cuts.FAMILIES
    for L in args.lengths:
        for seed in range(args.seeds):
            chain = make(args.family, L, seed)
            budget = budgets_of(chain)[args.budget]
            weak = solvers.solve(chain, budget, "dp-weak")
            row = {"family": args.family, "L": L, "seed": seed, "budget": budget,
                   "dp_weak": weak.makespan, "families": list(fams),
                   "without": _lp_and_mip(chain, budget, (), args.time_limit, weak.schedule),
                   "with": _lp_and_mip(chain, budget, fams, args.time_limit, weak.schedule),
                   "load_1min": os.getloadavg()[0]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def _beta(c: int, r: int) -> int:
    from math import comb
    return comb(c + r, c) if c >= 0 and r >= 0 else 0


def revolve_advances(l: int, c: int) -> int:
    """Griewank-Walther: fewest advances to reverse l steps with c checkpoints."""
    r = 0
    while _beta(c, r) < l:
        r += 1
    return r * l - _beta(c + 1, r - 1)


def revolve(args) -> list:
    from remat_theory.model.chain import Chain
    from solvers.prove import bounded_search
    rows = []
    for L in args.lengths:
        for c in args.slots:
            T = c + 1  # the tape condition T >= c + 1 of Theorem 7.1
            chain = Chain.homogeneous(L, 1.0, 2.0, 1, T, 0.0)
            budget = T + 3 + c
            formula = L * 3.0 + revolve_advances(L, c)
            t0 = time.perf_counter()
            found, value, bound, stopped, pops = bounded_search(
                chain, budget, formula - 1e-9, time_limit=args.time_limit)
            row = {"L": L, "c": c, "tape": T, "budget": budget, "formula": formula,
                   "faster_schedule": value, "proven_no_faster": found is None and stopped is None,
                   "stopped_by": stopped, "bound": bound, "expanded": pops,
                   "seconds": round(time.perf_counter() - t0, 2),
                   "load_1min": os.getloadavg()[0]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", default="random")
    ap.add_argument("--lengths", nargs="+", type=int, default=[30])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--budget", default="tight")
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--solvers", nargs="+", default=["ilp", "prove"])
    ap.add_argument("--cuts", default="")
    ap.add_argument("--no-relaxation", action="store_true",
                    help="prove with -o relaxation=false: bounded search alone")
    ap.add_argument("--max-states", type=int, default=None)
    ap.add_argument("--cap", action="store_true",
                    help="prove with -o cap=true: the relaxation's objective a row capped "
                         "below the weak DP's makespan")
    ap.add_argument("--cuts-lp", action="store_true")
    ap.add_argument("--revolve", action="store_true")
    ap.add_argument("--slots", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    rows = cuts_lp(args) if args.cuts_lp else revolve(args) if args.revolve else compare(args)
    result = {"command": " ".join(["python", "benchmarks/bench_prove.py"] + sys.argv[1:]),
              "time_limit": args.time_limit, "machine": machine(), "runs": rows}
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
