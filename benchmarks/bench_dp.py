"""Speed and memory of the persistent DP (``solvers/dp.py``), and the persistence gap.

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_dp.py            # speed cases -> results/dp_speed.json
    .venv/bin/python benchmarks/bench_dp.py --quick    # only the L=300 case
    .venv/bin/python benchmarks/bench_dp.py --gap      # persistence gap on small chains (stdout)
    .venv/bin/python benchmarks/bench_dp.py scale      # long chains, time limits, dp-weak
                                                       #   -> results/dp_speed_scale.json
    .venv/bin/python benchmarks/bench_dp.py scale --only homogeneous-1000-1000slots

``scale`` measures, each in a fresh process: ``dp`` on long homogeneous chains (the min-plus
steps it did, CPU time, steps per CPU second, peak RSS), beside a numpy microbenchmark of
the same operation on this machine (a block of rows added and reduced by a minimum over
the rows, the block in cache), so that the distance to numpy's limit is a ratio; how far
past its ``time_limit`` a solve returns (the limit must hold within 10% + 2 s); and
``dp-weak`` on growing chains (its work grows as L^4; see proofs/weak_persistence.md).

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
SCALE_RESULTS = ROOT / "benchmarks" / "results" / "dp_speed_scale.json"

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


# ---------------------------------------------------------------------- scale
SCALE_CASES = {
    # name: (solver, family, L, slots, time_limit)
    "homogeneous-1000-1000slots": ("dp", "homogeneous", 1000, 1000, None),
    "random-1000-1000slots": ("dp", "random", 1000, 1000, None),
    "homogeneous-2000-500slots": ("dp", "homogeneous", 2000, 500, None),
    "limit-dp-homogeneous-1000-1000slots-20s": ("dp", "homogeneous", 1000, 1000, 20.0),
    "limit-dp-homogeneous-5000-10slots-10s": ("dp", "homogeneous", 5000, 10, 10.0),
    "limit-dp-random-5000-exact-10s": ("dp", "random", 5000, None, 10.0),
    "limit-dp-weak-homogeneous-5000-10slots-10s": ("dp-weak", "homogeneous", 5000, 10, 10.0),
    "dp-weak-random-40-500slots": ("dp-weak", "random", 40, 500, None),
    "dp-weak-random-60-500slots": ("dp-weak", "random", 60, 500, None),
    "dp-weak-random-80-500slots": ("dp-weak", "random", 80, 500, None),
    "dp-weak-random-300-500slots-60s": ("dp-weak", "random", 300, 500, 60.0),
    "dp-weak-random-300-87slots-60s": ("dp-weak", "random", 300, 87, 60.0),
}


def numpy_min_plus_rate(rows: int = 256, width: int = 500, seconds: float = 2.0) -> dict:
    """Min-plus steps per CPU second numpy reaches on this machine for the DP's inner
    operation: a (rows x width) float32 block added to another and reduced by a minimum over
    the rows (one step = one add and one minimum), the block in cache ("hot") and a new
    block each time, read from memory ("cold")."""
    import numpy as np

    rng = np.random.default_rng(0)
    right = rng.random((rows, width), dtype=np.float32)
    lefts = [rng.random((rows, width), dtype=np.float32) for _ in range(64)]  # 32 MiB
    tmp = np.empty((rows, width), dtype=np.float32)
    out = {}
    for mode in ("hot", "cold"):
        n = 0
        c0 = time.process_time()
        while time.process_time() - c0 < seconds:
            left = lefts[0] if mode == "hot" else lefts[n % len(lefts)]
            np.add(left, right, out=tmp)
            tmp.min(axis=0)
            n += 1
        out[f"{mode}_steps_per_s"] = n * rows * width / (time.process_time() - c0)
    out["block"] = [rows, width]
    return out


def dp_steps(chain, budget: int, slots) -> int:
    """Min-plus steps of the ``dp`` table: for every segment (s, t) and every memory value of
    its window [mm, sat) (module docstring of solvers/dp.py), one step per split k."""
    import numpy as np

    from solvers.dp import UnitChain
    from solvers.dp import skewed_min_memory, skewed_saturation

    if slots is None:
        uc, g = UnitChain.exact(chain)
        units = budget // g
    else:
        uc, units = UnitChain.rounded(chain, budget, slots), slots
    g = uc.size_gcd()
    ucd = uc.divided(g)
    M = min((units - int(uc.x[0])) // g, max(0, ucd.store_all_units() - int(ucd.x[0])))
    W = M + 1
    mm, sat = skewed_min_memory(ucd), skewed_saturation(ucd)
    L = ucd.L
    total = 0
    n = np.arange(L + 1)
    for s in range(L + 1):
        a = np.minimum(mm[s, :L + 1 - s], W)
        b = np.maximum(a, np.minimum(sat[s, :L + 1 - s], W))
        total += int(((b - a) * n[:L + 1 - s]).sum())
    return total


def run_scale_case(name: str) -> dict:
    import solvers
    from remat_theory.model.errors import SolverError

    solver, family, L, slots, limit = SCALE_CASES[name]
    chain = _chain(family, L, 0)
    budget = (chain.memory_lower_bound() + chain.store_all_memory()) // 2
    opts = {}
    if slots is not None:
        opts["slots"] = slots
    if limit is not None:
        opts["time_limit"] = limit
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        sol = solvers.get(solver).func(chain, budget, **opts)
        status, refused = sol.status, None
    except SolverError as e:
        sol, status, refused = None, "refused", str(e)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    res = {"case": name, "solver": solver, "family": family, "stages": L, "slots": slots,
           "time_limit": limit, "budget": budget, "status": status,
           "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "peak_rss_mib": round(rss / 1024, 1),
           "load_average_1min": round(os.getloadavg()[0], 2)}
    if refused:
        res["message"] = refused
    if sol is not None:
        res.update(makespan=sol.makespan, bound=sol.bound, message=sol.message)
        if sol.schedule is not None:
            solvers.verify_solution(chain, sol, budget)
    if limit is not None:
        res["within_limit"] = wall <= 1.1 * limit + 2.0
    if solver == "dp" and status in ("optimal", "feasible"):
        steps = dp_steps(chain, budget, slots)
        res.update(min_plus_steps=steps, steps_per_cpu_s=round(steps / cpu))
    return res


def _write_scale(rate: dict, new_cases: list, only) -> None:
    """Merge ``new_cases`` into results/dp_speed_scale.json (written after every case, so
    that a long run interrupted keeps what it measured)."""
    old = json.loads(SCALE_RESULTS.read_text()) if SCALE_RESULTS.exists() else {}
    cases = {c["case"]: c for c in old.get("cases", [])}
    for c in new_cases:
        cases[c["case"]] = {**c, "numpy_min_plus_of_this_run": rate}
    SCALE_RESULTS.write_text(json.dumps({
        "command": "benchmarks/bench_dp.py scale (cases run with --only are merged into the "
                   "file; each case records its own numpy rate)",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform()},
        "note": "CPU time is the steadier figure: the machine is shared (load average beside "
                "each case); steps_per_cpu_s counts one step per split and memory value of "
                "each segment's window, fraction_of_numpy_* divides it by the numpy rate of "
                "the same operation measured in the same run (numpy_min_plus_of_this_run)",
        "numpy_min_plus": rate,
        "cases": [cases[n] for n in SCALE_CASES if n in cases],
    }, indent=1) + "\n")


def scale(names, only=None) -> dict:
    rate = numpy_min_plus_rate()
    print(json.dumps({"numpy": rate}), flush=True)
    out = []
    for name in names:
        proc = subprocess.run([sys.executable, __file__, "--scale-case", name], capture_output=True,
                              text=True, cwd=ROOT)
        if proc.returncode:
            raise SystemExit(f"case {name} failed:\n{proc.stderr}")
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        if "steps_per_cpu_s" in res:
            res["fraction_of_numpy_hot"] = round(res["steps_per_cpu_s"] / rate["hot_steps_per_s"], 3)
            res["fraction_of_numpy_cold"] = round(res["steps_per_cpu_s"] / rate["cold_steps_per_s"], 3)
        print(json.dumps(res), flush=True)
        out.append(res)
        _write_scale(rate, [res], only)
    return {"numpy_min_plus": rate, "cases": out}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("command", nargs="?", choices=["speed", "scale"], default="speed",
                    help="speed (default): the cases of results/dp_speed.json; scale: long "
                         "chains, time limits and dp-weak -> results/dp_speed_scale.json")
    ap.add_argument("--only", action="append", choices=sorted(SCALE_CASES),
                    help="with scale: run only these cases (merged into the results file)")
    ap.add_argument("--case", choices=sorted(CASES), help=argparse.SUPPRESS)
    ap.add_argument("--scale-case", choices=sorted(SCALE_CASES), help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="only the L=300 case")
    ap.add_argument("--gap", action="store_true", help="measure the persistence gap instead")
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--max-stages", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.case:
        print(json.dumps(run_case(args.case)))
        return 0
    if args.scale_case:
        print(json.dumps(run_scale_case(args.scale_case)))
        return 0
    if args.command == "scale":
        scale(args.only or list(SCALE_CASES), args.only)
        print(f"wrote {SCALE_RESULTS.relative_to(ROOT)}")
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
