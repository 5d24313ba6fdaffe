"""The DPs' two kernels side by side (option ``kernel``, solvers/dp_kernel.py).

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_dp_kernel.py            # -> results/dp_kernel.json
    .venv/bin/python benchmarks/bench_dp_kernel.py --only dp-weak-homogeneous-300-budget60

Every case runs twice in one invocation, ``kernel=numba`` and ``kernel=numpy``, each in a
fresh process (so that its peak resident memory, RSS, is its own), and records CPU time
(user + system of that process: the steadier figure on a shared machine), wall time, the
load average, peak RSS and the answer; the ratio numpy / numba of CPU times is the speed-up.
The numba process first solves a 4-stage chain, so that loading the compiled kernels from
numba's on-disk cache (or compiling them, on a machine's first run) is timed apart
(``numba_warmup_s``), not inside the case.

Cases (issue 40): ``dp`` on the random 1000-stage chain at 1000 slots (unit sizes with no
common factor), the budget halfway between the smallest and store-all; ``dp-weak`` on the
homogeneous 300-stage chain (unit sizes and times) at budget 60, exact memory.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "benchmarks" / "results" / "dp_kernel.json"

CASES = {
    # name: (solver, family, stages, budget ("mid": halfway from the lower bound to
    # store-all), slots)
    "dp-random-1000-1000slots": ("dp", "random", 1000, "mid", 1000),
    "dp-weak-homogeneous-300-budget60": ("dp-weak", "homogeneous", 300, 60, None),
}
KERNELS = ("numba", "numpy")


def run_case(name: str, kernel: str) -> dict:
    """Solve one case in this process; return its measurements."""
    import solvers
    from remat_theory.analysis import families

    solver, family, L, budget, slots = CASES[name]
    warm = None
    if kernel == "numba":
        c0 = time.process_time()
        small = families.make("random", 4, 0)
        solvers.get(solver).func(small, small.store_all_memory() // 2 + 1, kernel="numba")
        warm = round(time.process_time() - c0, 3)
    chain = families.make(family, L, 0)
    if budget == "mid":
        budget = (chain.memory_lower_bound() + chain.store_all_memory()) // 2
    opts = {"kernel": kernel}
    if slots is not None:
        opts["slots"] = slots
    t0, c0 = time.perf_counter(), time.process_time()
    sol = solvers.get(solver).func(chain, budget, **opts)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    solvers.verify_solution(chain, sol, budget)  # replayed by the simulator, untimed
    return {"case": name, "kernel": kernel, "solver": solver, "family": family, "stages": L,
            "budget": budget, "slots": slots, "status": sol.status, "makespan": sol.makespan,
            "schedule_ops": len(sol.schedule) if sol.schedule is not None else None,
            "cpu_s": round(cpu, 2), "wall_s": round(wall, 2),
            "peak_rss_mib": round(rss / 1024, 1), "numba_warmup_s": warm,
            "load_average_1min": round(os.getloadavg()[0], 2),
            "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def _write(results: dict, names) -> None:
    old = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    cases = {(c["case"], c["kernel"]): c for c in old.get("cases", [])}
    cases.update(results)
    ratios = {}
    for name in CASES:
        a, b = cases.get((name, "numpy")), cases.get((name, "numba"))
        if a and b:
            ratios[name] = {"cpu_numpy_over_numba": round(a["cpu_s"] / b["cpu_s"], 2),
                            "wall_numpy_over_numba": round(a["wall_s"] / b["wall_s"], 2),
                            "same_makespan": a["makespan"] == b["makespan"]}
    RESULTS.write_text(json.dumps({
        "command": "benchmarks/bench_dp_kernel.py" + "".join(f" --only {n}" for n in names or ()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform()},
        "note": "each case and kernel in a fresh process; CPU time is the steadier figure "
                "(the machine is shared: load average beside each); peak_rss_mib is the "
                "process's peak resident memory",
        "cases": [cases[k] for k in sorted(cases)],
        "speedup": ratios,
    }, indent=1) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", choices=sorted(CASES))
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--kernel", choices=KERNELS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.case:
        print(json.dumps(run_case(args.case, args.kernel)))
        return 0
    names = args.only or list(CASES)
    results = {}
    for name in names:
        for kernel in KERNELS:
            proc = subprocess.run([sys.executable, __file__, "--case", name, "--kernel", kernel],
                                  capture_output=True, text=True, cwd=ROOT)
            if proc.returncode:
                raise SystemExit(f"case {name} ({kernel}) failed:\n{proc.stderr}")
            res = json.loads(proc.stdout.strip().splitlines()[-1])
            print(json.dumps(res), flush=True)
            results[(name, kernel)] = res
            _write(results, args.only)
    print(f"wrote {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
