"""The phase-block Lagrangian bound (solvers/bounds/phase_lagrange.py,
proofs/phase_lagrange.md) at tight budgets of deep random chains: the bound it reaches in
``--time-limit`` seconds of subgradient ascent, against the weak DP's makespan (the
schedule to prove) and the ideal makespan.

Instances: ``families.make("random", L, seed)`` at the budgets of ``bench_prove_depth.py``
(``smallest``: the weak DP's smallest feasible budget; ``25%``: a quarter of the way to
store-all) and of ``bench_ilp.py`` (``tight``: 10% of the way).

    python benchmarks/bench_phase_lagrange.py --random 30 60 --seeds 1 \
        --budgets smallest 25% --time-limit 60 --out benchmarks/results/phase_lagrange.json
    python benchmarks/bench_phase_lagrange.py --random 30 --seeds 2 --budgets tight \
        --time-limit 60 --out benchmarks/results/phase_lagrange_tight30.json

``--window W`` then runs the windows' bound (W phases a window, exact MILPs joined by
prices, solvers/bounds/window_lagrange.py) from the phase blocks' prices for
``--window-seconds``.  ``--relaxation S`` also solves the moment relaxation (solvers/ilp/relaxation.py) from the
weak DP's schedule for at most S seconds and records its bound and whether it finished.
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

import solvers  # noqa: E402
from remat_theory.analysis.families import make  # noqa: E402
from solvers.bounds.phase_lagrange import lagrangian_bound  # noqa: E402

FRACTIONS = {"smallest": (0, 1), "tight": (1, 10), "25%": (1, 4)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--random", type=int, nargs="*", default=[30, 60])
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--budgets", nargs="+", default=["smallest", "25%"],
                    choices=sorted(FRACTIONS))
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--one-sided", action="store_true",
                    help="each block checks its end moment's peak only (default: both)")
    ap.add_argument("--window", type=int, default=None, metavar="W",
                    help="then the windows' bound (solvers/bounds/window_lagrange.py), W "
                         "phases a window, from the phase blocks' prices, --window-seconds")
    ap.add_argument("--window-seconds", type=float, default=60.0)
    ap.add_argument("--relaxation", type=float, default=None, metavar="S",
                    help="also the moment relaxation's bound, S seconds at most")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    rows = []
    t_all = time.perf_counter()
    for L in a.random:
        for seed in range(a.seeds):
            chain = make("random", L, seed)
            lo = solvers.solve(chain, 0, "dp-weak").min_budget
            hi = chain.store_all_memory()
            for name in a.budgets:
                num, den = FRACTIONS[name]
                b = lo + (hi - lo) * num // den
                weak = solvers.solve(chain, b, "dp-weak")
                res = lagrangian_bound(chain, b, upper=weak.makespan, iterations=10 ** 9,
                                       time_limit=a.time_limit,
                                       both=not a.one_sided)
                row = {"chain": f"random {L}", "seed": seed, "budget_kind": name, "budget": b,
                       "weak_dp": weak.makespan, "ideal": chain.ideal_makespan(),
                       "bound": round(res["bound"] - res["margin"], 3), "iterations": res["iterations"],
                       "seconds": round(res["seconds"], 1),
                       "gap": round((weak.makespan - res["bound"] + res["margin"]) / weak.makespan, 4),
                       "load_1min": os.getloadavg()[0]}
                if a.window is not None:
                    from solvers.bounds.window_lagrange import window_bound
                    w = window_bound(chain, b, width=a.window, upper=weak.makespan,
                                     schedule=weak.schedule, mu=res["mu"],
                                     time_limit=a.window_seconds,
                                     seconds_each=max(1.0, a.window_seconds / 4))
                    wb = w["bound"] - res["margin"]
                    row.update(window=a.window, window_bound=round(wb, 3),
                               window_iterations=w["iterations"],
                               window_seconds=round(w["seconds"], 1),
                               window_steps=[round(v, 2) for v in w["history"]],
                               window_gap=round((weak.makespan - wb) / weak.makespan, 4))
                if a.relaxation is not None:
                    from solvers.ilp.relaxation import lower_bound
                    t0 = time.perf_counter()
                    lb = lower_bound(chain, b, schedule=weak.schedule, time_limit=a.relaxation)
                    row.update(relaxation_bound=lb.value, relaxation_solved=lb.proven_optimal,
                               relaxation_seconds=round(time.perf_counter() - t0, 1))
                print(json.dumps(row), flush=True)
                rows.append(row)
    out = {"command": " ".join(["python", "benchmarks/bench_phase_lagrange.py"] + sys.argv[1:]),
           "cpus": os.cpu_count(), "wall_seconds": round(time.perf_counter() - t_all, 1),
           "runs": rows}
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
