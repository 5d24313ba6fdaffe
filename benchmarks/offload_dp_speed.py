"""dp-offload's CPU time on long chains: the ``transformer`` and ``random`` families at 60
stages (bandwidth: one tape's worth of bytes per forward second on average), a third of
store-all's memory, 500 slots.  CPU seconds of one process (``time.process_time``), so a
comparison between two versions is a ratio taken by running this file under each, one
after the other on the same machine.

    python benchmarks/offload_dp_speed.py                       # the default kernel
    python benchmarks/offload_dp_speed.py --compare             # both kernels, side by side
    python benchmarks/offload_dp_speed.py --compare --stages 200 --slots 40

``--compare`` runs every case with ``kernel=numba`` and ``kernel=numpy`` (option
``kernel``, solvers/offload/dp_split.py), each in a fresh process (its peak resident
memory its own), and writes ``benchmarks/results/offload_dp_kernel.json`` (the cases of
earlier runs with other sizes kept); the numba process first solves a 4-stage chain so that
loading (or compiling) the compiled code is timed apart.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "benchmarks" / "results" / "offload_dp_kernel.json"
FAMILIES = ("transformer", "random")


def _chain(name, L):
    from remat_theory.analysis import families

    chain = families.make(name, L, 0)
    return chain.replace(bandwidth=sum(chain.tape_size) / sum(chain.fwd_time))


def run_case(name: str, L: int, slots: int, kernel: str | None) -> dict:
    from solvers import registry

    opts = {} if kernel is None else {"kernel": kernel}
    warm = None
    if kernel == "numba":
        c0 = time.process_time()
        small = _chain("random", 4)
        registry.solve(small, small.store_all_memory() // 2, "dp-offload", slots=20, **opts)
        warm = round(time.process_time() - c0, 3)
    chain = _chain(name, L)
    budget = chain.store_all_memory() // 3
    t, w = time.process_time(), time.perf_counter()
    sol = registry.solve(chain, budget, "dp-offload", slots=slots, **opts)
    return {"family": name, "stages": L, "slots": slots, "budget": budget,
            "kernel": kernel or "default", "status": sol.status, "makespan": sol.makespan,
            "schedule_ops": len(sol.schedule) if sol.schedule is not None else None,
            "cpu_seconds": round(time.process_time() - t, 2),
            "wall_seconds": round(time.perf_counter() - w, 2),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "numba_warmup_s": warm, "load_average_1min": round(os.getloadavg()[0], 2),
            "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def _write(rows: list) -> None:
    old = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    key = ("family", "stages", "slots", "kernel")
    cases = {tuple(c[k] for k in key): c for c in old.get("cases", [])}
    cases.update((tuple(c[k] for k in key), c) for c in rows)
    ratios = {}
    for (fam, L, slots, kern), c in sorted(cases.items()):
        other = cases.get((fam, L, slots, "numpy"))
        if kern == "numba" and other:
            ratios[f"{fam}-{L}-{slots}slots"] = {
                "cpu_numpy_over_numba": round(other["cpu_seconds"] / c["cpu_seconds"], 2),
                "same_makespan": other["makespan"] == c["makespan"]}
    RESULTS.write_text(json.dumps({
        "command": "benchmarks/offload_dp_speed.py --compare [--stages L --slots S]",
        "note": "each case and kernel in a fresh process; CPU time is the steadier figure "
                "(shared machine: load average beside each)",
        "cases": [cases[k] for k in sorted(cases)], "speedup": ratios}, indent=1) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compare", action="store_true")
    ap.add_argument("--stages", type=int, default=60)
    ap.add_argument("--slots", type=int, default=500)
    ap.add_argument("--family", action="append", choices=FAMILIES)
    ap.add_argument("--kernel", choices=("numba", "numpy"), help=argparse.SUPPRESS)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    names = args.family or list(FAMILIES)
    if args.one:
        print(json.dumps(run_case(names[0], args.stages, args.slots, args.kernel)))
        return 0
    if not args.compare:
        for name in names:
            print(json.dumps(run_case(name, args.stages, args.slots, None)), flush=True)
        return 0
    rows = []
    for name in names:
        for kernel in ("numba", "numpy"):
            proc = subprocess.run([sys.executable, __file__, "--one", "--family", name,
                                   "--stages", str(args.stages), "--slots", str(args.slots),
                                   "--kernel", kernel], capture_output=True, text=True,
                                  cwd=ROOT)
            if proc.returncode:
                raise SystemExit(f"{name} ({kernel}) failed:\n{proc.stderr}")
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
            _write(rows)
    print(f"wrote {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
