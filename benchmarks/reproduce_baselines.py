"""Reproduce the published numbers of the classical strategies in this package's model.

    .venv/bin/python benchmarks/reproduce_baselines.py [--sections revolve,gruslys,chen,quality]
                                                       [--out benchmarks/results] [--no-dp]

Each section prints its figures and writes ``baselines_<section>.json`` under ``--out``:

revolve
    Griewank-Walther's closed form t(l, c) against the advances (``Fck``/``Fn`` ops) of the
    schedules this package builds, for every l <= 200, c <= 10, and t(1000, 50) = 1948.
gruslys
    Gruslys et al. 2016: "for sequences of length 1000, 95% of memory saved for one third
    more time".  A homogeneous chain of 1000 stages (forward 1, backward 2, hidden state 1
    byte, tape alpha bytes, free loss) at 5% of the store-all memory: the overhead
    (makespan / store-all makespan - 1) of their three DPs and of the persistent DP ``dp``
    (exact integer memory; slow at this size, skip with --no-dp).
chen
    Chen et al. 2016: sqrt(n) segments hold about 2 sqrt(n) activations and cost one extra
    forward pass; a homogeneous chain of 1000 stages, activations and tapes of 1 byte.
quality
    Every baseline against the exact optimum: exhaustive search on random chains of 3-6
    stages (all budgets from the smallest feasible one to store-all, in steps), and the
    persistent DP on 30-stage family chains.  Ratio = makespan / optimum; any ratio below 1
    against a bound it must respect is reported as a violation.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import solvers  # noqa: E402
from remat_theory import Chain  # noqa: E402
from remat_theory.analysis import families  # noqa: E402
from remat_theory.model.schedule import FALL, FCK, FN  # noqa: E402
from solvers.chen import sqrt_checkpoints  # noqa: E402
from solvers.exhaustive import min_feasible_budget  # noqa: E402
from solvers.revolve import revolve_advances, revolve_schedule  # noqa: E402

BASELINES = ("store-all", "recompute-all", "periodic", "chen-sqrt", "chen-greedy", "revolve",
             "gruslys", "dtr")


def _write(out: Path, name: str, data: dict) -> None:
    data = {"command": " ".join(["python", "benchmarks/reproduce_baselines.py"] + sys.argv[1:]),
            "python": platform.python_version(), **data}
    path = out / f"baselines_{name}.json"
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(f"  -> {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


def revolve_section(out: Path) -> None:
    print("== Revolve: advances of our schedules vs Griewank-Walther t(l, c)")
    t0 = time.perf_counter()
    mismatches = []
    checked = 0
    for c in range(1, 11):
        for l in range(1, 201):
            s = revolve_schedule(Chain.homogeneous(l), c)
            adv = s.count(FCK) + s.count(FN)
            checked += 1
            if adv != revolve_advances(l, c) or s.count(FALL) != l:
                mismatches.append([l, c, adv, revolve_advances(l, c)])
    big = revolve_schedule(Chain.homogeneous(1000), 50)
    big_adv = big.count(FCK) + big.count(FN)
    print(f"  l <= 200, c <= 10: {checked} pairs, {len(mismatches)} mismatches")
    print(f"  l = 1000, c = 50: {big_adv} advances (closed form {revolve_advances(1000, 50)}), "
          f"{big.count(FALL)} recording forwards")
    _write(out, "revolve", {
        "what": "advances (Fck+Fn ops) of revolve schedules vs t(l,c) = r l - beta(c+1, r-1)",
        "pairs_checked": checked, "mismatches": mismatches,
        "l1000_c50_advances": big_adv, "l1000_c50_closed_form": revolve_advances(1000, 50),
        "l1000_c50_recording_forwards": big.count(FALL),
        "seconds": round(time.perf_counter() - t0, 2)})


def gruslys_section(out: Path, run_dp: bool) -> None:
    print("== Gruslys et al.: L = 1000 homogeneous, budget 5% of store-all")
    rows = []
    for alpha in (2, 4, 8):
        chain = Chain.homogeneous(1000, 1.0, 2.0, 1, alpha)
        store_all = chain.store_all_memory()
        budget = int(0.05 * store_all)
        ideal = chain.ideal_makespan()
        row = {"alpha": alpha, "store_all_memory": store_all, "budget": budget,
               "store_all_makespan": ideal}
        for variant in ("hidden", "internal", "mixed"):
            t0 = time.perf_counter()
            sol = solvers.solve(chain, budget, "gruslys", variant=variant)
            row[f"gruslys_{variant}"] = None if sol.makespan is None else {
                "makespan": sol.makespan, "overhead": sol.makespan / ideal - 1,
                "peak": sol.peak_memory, "seconds": round(time.perf_counter() - t0, 2)}
        if run_dp and alpha == 4:
            t0 = time.perf_counter()
            sol = solvers.solve(chain, budget, "dp")
            row["dp"] = {"makespan": sol.makespan, "overhead": sol.makespan / ideal - 1,
                         "peak": sol.peak_memory, "status": sol.status,
                         "optimal_for": sol.optimal_for,
                         "seconds": round(time.perf_counter() - t0, 1)}
        rows.append(row)
        parts = [f"{k[8:]} {v['overhead']:.3f}" for k, v in row.items()
                 if k.startswith("gruslys_") and v]
        if "dp" in row:
            parts.append(f"dp {row['dp']['overhead']:.3f} ({row['dp']['seconds']} s)")
        print(f"  alpha {alpha}: budget {budget} of {store_all}; overhead vs store-all time: "
              + ", ".join(parts))
    _write(out, "gruslys", {
        "what": "overhead = makespan / store-all makespan - 1 at 5% of the store-all memory "
                "(forward 1, backward 2, x 1 byte, tape alpha bytes)",
        "claim": "about one third (Gruslys et al. 2016, abstract)", "rows": rows})


def chen_section(out: Path) -> None:
    print("== Chen et al.: sqrt(n) segments on 1000 homogeneous stages")
    n = 1000
    chain = Chain.homogeneous(n, 1.0, 2.0, 1, 1)
    cps = sqrt_checkpoints(n)
    sol = solvers.solve(chain, chain.store_all_memory(), "chen-sqrt")
    extra = sol.schedule.forward_count() - n
    # the segments it cut are Chen's, and each forward it adds costs 1 (closed form)
    assert list(sol.info["checkpoints"]) == list(cps)
    assert sol.makespan == 3 * n + extra, (sol.makespan, extra)
    print(f"  {len(cps) + 1} segments: peak {sol.peak_memory} activations "
          f"(2 sqrt(n) = {2 * math.sqrt(n):.1f}; store-all {chain.store_all_memory()}), "
          f"{extra} extra forwards = {extra / n:.3f} forward passes")
    _write(out, "chen", {
        "what": "chen-sqrt on Chain.homogeneous(1000, fwd 1, bwd 2, x 1, tape 1)",
        "segments": len(cps) + 1, "peak_memory": sol.peak_memory,
        "two_sqrt_n": 2 * math.sqrt(n), "store_all_memory": chain.store_all_memory(),
        "extra_forwards": extra, "extra_forward_passes": extra / n,
        "makespan": sol.makespan, "store_all_makespan": chain.ideal_makespan()})


def _summary(ratios: list) -> dict:
    if not ratios:
        return {"instances": 0}
    return {"instances": len(ratios), "mean_ratio": statistics.fmean(ratios),
            "max_ratio": max(ratios), "optimal_fraction": sum(r < 1 + 1e-9 for r in ratios) / len(ratios)}


def quality_section(out: Path) -> None:
    print("== Quality: baselines vs exhaustive search (3-6 stages) and vs dp (30 stages)")
    t0 = time.perf_counter()
    small = {name: [] for name in BASELINES}
    feasible = {name: 0 for name in BASELINES}
    violations = []
    instances = 0
    for L in range(3, 7):
        for seed in range(6):
            chain = families.make("random", L, 100 * L + seed, max_size=6, max_time=6)
            lo, hi = min_feasible_budget(chain), chain.store_all_memory()
            for budget in sorted({lo + (hi - lo) * k // 5 for k in range(6)}):
                instances += 1
                opt = {d: solvers.solve(chain, budget, "exhaustive", allow_drop=d) for d in (False, True)}
                for name in BASELINES:
                    sol = solvers.solve(chain, budget, name)
                    if sol.schedule is None:
                        continue
                    feasible[name] += 1
                    ref = opt[bool(sol.info.get("allow_drop", False))].makespan
                    ratio = sol.makespan / ref if ref else 1.0
                    small[name].append(ratio)
                    if ratio < 1 - 1e-9:
                        violations.append([chain.name, budget, name, sol.makespan, ref])
    big = {name: [] for name in BASELINES}
    big_instances = 0
    if "dp" in solvers.names():
        for fam in ("random", "resnet", "transformer", "rnn"):
            chain = families.make(fam, 30, 7)
            lo, hi = chain.memory_lower_bound(), chain.store_all_memory()
            for budget in sorted({lo + (hi - lo) * k // 6 for k in range(1, 7)}):
                dp = solvers.solve(chain, budget, "dp")
                if dp.schedule is None:
                    continue
                big_instances += 1
                for name in BASELINES:
                    sol = solvers.solve(chain, budget, name)
                    if sol.schedule is not None:
                        big[name].append(sol.makespan / dp.makespan)
    table = {}
    print(f"  {instances} small instances (ratio to the exhaustive optimum; dtr: to the optimum "
          f"with Drop), {big_instances} 30-stage instances (ratio to dp, an upper bound on the optimum)")
    print(f"  {'solver':<14}{'feasible':>9}{'mean':>8}{'max':>8}{'opt%':>7}   {'mean/dp':>8}{'max/dp':>8}")
    for name in BASELINES:
        s, b = _summary(small[name]), _summary(big[name])
        table[name] = {"small": dict(s, feasible=feasible[name]), "family30_vs_dp": b}
        fmt = lambda d, k, f: format(d[k], f) if k in d else "-"
        print(f"  {name:<14}{feasible[name]:>9}{fmt(s, 'mean_ratio', '8.3f')}{fmt(s, 'max_ratio', '8.3f')}"
              f"{format(100 * s['optimal_fraction'], '6.0f') + '%' if s['instances'] else '      -'}   "
              f"{fmt(b, 'mean_ratio', '8.3f')}{fmt(b, 'max_ratio', '8.3f')}")
    print(f"  violations (a baseline below the exact optimum): {len(violations)}")
    _write(out, "quality", {
        "what": "makespan / exact optimum per baseline",
        "small_instances": instances, "family30_instances": big_instances,
        "table": table, "violations": violations,
        "seconds": round(time.perf_counter() - t0, 1)})


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sections", default="revolve,gruslys,chen,quality")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--no-dp", action="store_true", help="skip the slow exact dp on 1000 stages")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for section in args.sections.split(","):
        if section == "revolve":
            revolve_section(out)
        elif section == "gruslys":
            gruslys_section(out, not args.no_dp)
        elif section == "chen":
            chen_section(out)
        elif section == "quality":
            quality_section(out)
        else:
            p.error(f"unknown section {section!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
