"""Speed and memory of the persistent DP (``solvers/dp.py``), and the persistence gap.

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_dp.py            # speed cases -> results/dp_speed.json
    .venv/bin/python benchmarks/bench_dp.py --quick    # only the L=300 case
    .venv/bin/python benchmarks/bench_dp.py --gap      # persistence gap on small chains (stdout)

Each speed case runs in a fresh process so that its peak resident memory (RSS) is its own.
Wall time depends on the load of the machine (recorded as the load average next to each
figure); CPU time (user + system of the case's process) is the steadier number.

Reference (issue 3): the published C implementation of the Rotor DP took 13.7 s and 4.4 GB
for L = 300 stages at 500 slots on this machine class.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "benchmarks" / "results" / "dp_speed.json"

CASES = {
    # name: (family, L, seed, slots)
    "random-300-500slots": ("random", 300, 0, 500),
    "homogeneous-1000-1000slots": ("homogeneous", 1000, 0, 1000),
}


def _chain(family: str, L: int, seed: int):
    from remat_theory.analysis import families
    return families.make(family, L, seed)


def run_case(name: str) -> dict:
    """Solve one case in this process and return its measurements."""
    import solvers

    family, L, seed, slots = CASES[name]
    chain = _chain(family, L, seed)
    budget = (chain.memory_lower_bound() + chain.store_all_memory()) // 2
    t0, c0 = time.perf_counter(), time.process_time()
    sol = solvers.get("dp").func(chain, budget, slots=slots)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    solvers.verify_solution(chain, sol, budget)  # replay, outside the timed part
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {
        "case": name, "family": family, "stages": L, "seed": seed, "slots": slots,
        "budget": budget, "status": sol.status, "makespan": sol.makespan,
        "ideal_makespan": chain.ideal_makespan(), "peak_memory": sol.peak_memory,
        "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "peak_rss_mib": round(rss / 1024, 1),
        "load_average_1min": round(os.getloadavg()[0], 2),
    }


def speed(names) -> list:
    out = []
    for name in names:
        proc = subprocess.run([sys.executable, __file__, "--case", name], capture_output=True,
                              text=True, cwd=ROOT)
        if proc.returncode:
            raise SystemExit(f"case {name} failed:\n{proc.stderr}")
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        print(json.dumps(res))
        out.append(res)
    return out


def gap(trials: int, max_stages: int, seed: int) -> dict:
    """Fraction of (chain, budget) pairs where the unrestricted optimum (exhaustive search)
    is strictly shorter than the persistent DP, and than the weak DP; largest ratios."""
    import solvers
    from remat_theory import Chain
    from solvers.exhaustive import min_feasible_budget

    rng = random.Random(seed)
    n = p_gap = w_gap = pw_gap = 0
    worst_p = worst_w = (1.0, None)
    for _ in range(trials):
        L = rng.randint(2, max_stages)
        x = [rng.randint(1, 10) for _ in range(L + 1)]
        tape = [x[i + 1] + rng.randint(0, 10) for i in range(L)]
        ov = rng.random() < 0.5
        fo = [rng.randint(0, 5) if ov else 0 for _ in range(L)]
        bo = [rng.randint(0, 5) if ov else 0 for _ in range(L + 1)]
        chain = Chain([float(rng.randint(1, 10)) for _ in range(L)],
                      [float(rng.randint(1, 10)) for _ in range(L + 1)], x, tape, fo, bo)
        lo, hi = min_feasible_budget(chain), chain.store_all_memory()
        for budget in sorted({lo, lo + 1, lo + (hi - lo) // 4, lo + (hi - lo) // 2, hi - 1}):
            if budget < lo:
                continue
            opt = solvers.solve(chain, budget, "exhaustive").makespan
            d = solvers.solve(chain, budget, "dp")
            w = solvers.solve(chain, budget, "dp-weak").makespan
            if d.schedule is None:
                continue
            n += 1
            p_gap += d.makespan > opt + 1e-9
            w_gap += w > opt + 1e-9
            pw_gap += d.makespan > w + 1e-9
            if d.makespan / opt > worst_p[0]:
                worst_p = (d.makespan / opt, {"chain": chain.to_dict(), "budget": budget,
                                              "dp": d.makespan, "opt": opt})
            if w / opt > worst_w[0]:
                worst_w = (w / opt, {"chain": chain.to_dict(), "budget": budget,
                                     "dp_weak": w, "opt": opt})
    return {
        "command": f"benchmarks/bench_dp.py --gap --trials {trials} --max-stages {max_stages} --seed {seed}",
        "instances": n,
        "dp_worse_than_opt": p_gap, "dp_weak_worse_than_opt": w_gap,
        "dp_worse_than_dp_weak": pw_gap,
        "largest_dp_ratio": worst_p[0], "largest_dp_ratio_instance": worst_p[1],
        "largest_dp_weak_ratio": worst_w[0], "largest_dp_weak_ratio_instance": worst_w[1],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", choices=sorted(CASES), help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="only the L=300 case")
    ap.add_argument("--gap", action="store_true", help="measure the persistence gap instead")
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--max-stages", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.case:
        print(json.dumps(run_case(args.case)))
        return 0
    if args.gap:
        print(json.dumps(gap(args.trials, args.max_stages, args.seed), indent=1))
        return 0
    names = ["random-300-500slots"] if args.quick else list(CASES)
    results = speed(names)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "command": "benchmarks/bench_dp.py" + (" --quick" if args.quick else ""),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform()},
        "reference": "published C implementation: L=300, 500 slots: 13.7 s, 4.4 GB",
        "cases": results,
    }, indent=1) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
