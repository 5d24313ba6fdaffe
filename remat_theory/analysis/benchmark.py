"""Benchmarks: how fast each solver is (``remat bench solvers``) and how far each strategy is
from the optimum (``remat bench quality``).  Figures, not tests: nothing here asserts a time.

Speed (:func:`bench_solvers`)
    Every measured solve runs in a fresh Python subprocess (``python -m
    remat_theory.analysis.benchmark``) so that its peak resident memory (``ru_maxrss`` of that process,
    interpreter and imports included; the RSS after imports is reported as ``base_rss``) and
    its time belong to that run alone.  Time is the solver's own wall time as the registry
    measures it (the simulator replay that checks the answer is not included); ``cpu_time``
    is the CPU seconds of the solve and its replay, the steadier figure on a shared machine.

    * ``dp``: stages x slots grid, budget halfway between the memory lower bound and
      store-all, on random chains (sizes 1..100 MiB) and homogeneous ones (activations 1 MiB,
      tapes 2 MiB): the Rotor paper's setting of a budget cut into ``slots`` units.
    * ``ilp``: random chains (sizes 1..10) at a middle budget (``budget_frac`` of the way from
      the smallest feasible budget to store-all), several seeds per length, HiGHS and CBC;
      the median time to proven optimality counts an unproven run as infinite.  Modes: the
      registry's default model (``exact``, optimal over all schedules) and its restricted
      ``fast`` mode (optimal in its own smaller class, said in ``optimal_for``).
    * ``exhaustive``: random chains of 2..8 stages (:data:`EXHAUSTIVE_STAGES`) at the
      smallest feasible budget and a middle one (or the given fractions; several seeds).
    * ``prove``: family chains (:data:`PROVE_FAMILIES`, 20 and 30 stages) at a budget
      ``budget_frac`` of the way from the smallest feasible budget to store-all (a tight 0.1
      by default): proven or not within its time limit, and the bound it reached.

Quality (:func:`bench_quality`)
    For each family, one chain, budgets from the smallest feasible (over all schedules) to
    store-all; every registered solver's makespan divided by the exact optimum (exhaustive
    search up to ``max_exhaustive_stages``, default its registered ``max_stages``; the ILP
    beyond, its status said when unproven).

This module sits on the solver floor (like the command line): it imports :mod:`solvers`.
"""
from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from remat_theory.analysis import families
from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError
from remat_theory.analysis.parallel import parallel_map
from remat_theory.analysis.progress import Progress
import solvers
from solvers import registry
from solvers.feasibility import smallest_feasible_budget

MIB = 2 ** 20

DP_STAGES = (10, 30, 100, 300, 1000)
DP_SLOTS = (100, 500, 1000, 2000)
DP_FAMILIES = ("random", "homogeneous")
ILP_STAGES = (5, 10, 20, 30, 45, 60)
ILP_BACKENDS = ("highs", "cbc")
# ILP formulations: "exact" is the registry default (optimal over all schedules); "fast" is
# its restricted mode (one weakly increasing forward run per phase: optimal only in that class).
ILP_MODES = {"exact": {}, "fast": {"passes": 1, "pairs": True}}
EXHAUSTIVE_STAGES = (2, 3, 4, 5, 6, 7, 8)
QUALITY_FAMILIES = ("random", "resnet", "transformer", "rnn", "homogeneous")
PROVE_FAMILIES = ("homogeneous", "rnn", "resnet", "transformer", "random")
PROVE_STAGES = (20, 30)

QUICK = {"dp_stages": (10, 30, 100), "dp_slots": (100, 500), "dp_families": ("random",),
         "ilp_stages": (5, 10), "ilp_seeds": 1, "ilp_time_limit": 30.0,
         "exhaustive_stages": (2, 3, 4, 5, 6)}


# --------------------------------------------------------------------------- chains
def bench_chain(family: str, length: int, seed: int = 0, *, big: bool = False) -> Chain:
    """The chain a benchmark runs on.

    ``big=True`` (the DP speed grid) gives byte-sized chains whose budget has to be cut into
    slots: random sizes 1..100 MiB, or homogeneous stages (1 MiB activations, 2 MiB tapes,
    forward 1, backward 2, loss 1).  Otherwise the family generator's own small integer
    sizes (so the exact solvers work on exact memory).
    """
    if big:
        if family == "homogeneous":
            return Chain.homogeneous(length, 1.0, 2.0, MIB, 2 * MIB, loss_time=1.0,
                                     name=f"homogeneous-{length}-MiB")
        if family == "random":
            return families.uniform_random(length, seed, max_size=100, unit=MIB)
        return families.make(family, length, seed, unit=MIB)
    return families.make(family, length, seed)


def budget_between(low: int, high: int, frac: float) -> int:
    return int(low + round((high - low) * frac))


# --------------------------------------------------------------------------- subprocess
def _child_main() -> None:
    """Subprocess entry: read one spec (JSON) on stdin, solve, print one JSON line."""
    import resource

    spec = json.loads(sys.stdin.read())
    import solvers  # imported before the baseline RSS is read

    chain = Chain.from_dict(spec["chain"])
    solvers.names()
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = {"ok": True}
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    rc0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
        sol = solvers.solve(chain, spec["budget"], spec["solver"], **spec.get("options", {}))
        out.update(status=sol.status, makespan=sol.makespan, bound=sol.bound,
                   optimal_for=sol.optimal_for,
                   min_budget=sol.min_budget, solve_time=sol.wall_time, gap=sol.gap,
                   message=sol.message, info={k: v for k, v in sol.info.items()
                                              if isinstance(v, (int, float, str, bool, type(None)))})
    except Exception as e:  # noqa: BLE001 - reported in the table, not raised
        out.update(ok=False, status="error", error=f"{type(e).__name__}: {e}")
    out["total_time"] = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    rc1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU seconds of the solve and its replay, external solver processes (CBC) included:
    # less sensitive than wall time to a loaded machine
    out["cpu_time"] = sum(getattr(b, f) - getattr(a, f) for a, b in ((ru0, ru1), (rc0, rc1))
                          for f in ("ru_utime", "ru_stime"))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # A solver may run an external program (CBC does): count its peak too.
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss is KiB on Linux, bytes on macOS
    out["peak_rss"] = max(peak, kids) * scale
    out["child_process_rss"] = kids * scale
    out["base_rss"] = base * scale
    sys.stdout.write(json.dumps(out) + "\n")


def backend_option(name: str = "ilp") -> str:
    """Name of the ILP's option choosing the MILP back end (HiGHS or CBC)."""
    import solvers

    opts = solvers.get(name).options
    for cand in ("mip_solver", "backend", "solver"):
        if cand in opts:
            return cand
    raise RematError(f"solver {name!r} has no option choosing the MILP back end (options: {opts})")


def measure(chain: Chain, budget: int, solver: str, options: dict | None = None,
            timeout: float = 600.0) -> dict:
    """Solve in a fresh subprocess; its solve time, status and peak RSS (bytes)."""
    spec = {"chain": chain.to_dict(), "budget": int(budget), "solver": solver,
            "options": options or {}}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "remat_theory.analysis.benchmark"],
                              input=json.dumps(spec), capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"ok": False, "status": "timeout", "error": f"killed after {timeout:g} s",
                "solve_time": None, "peak_rss": None, "wall": time.perf_counter() - t0}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or "").strip().splitlines()[-1:] or ["no output"]
        return {"ok": False, "status": "crash", "error": f"exit {proc.returncode}: {tail[0]}",
                "solve_time": None, "peak_rss": None, "wall": time.perf_counter() - t0}
    out = json.loads(lines[-1])
    out["wall"] = time.perf_counter() - t0
    return out


# --------------------------------------------------------------------------- tables
def format_table(head: list, rows: list) -> str:
    """Fixed-width table; the first column left-aligned, the others right-aligned."""
    cells = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(head)]

    def line(vals):
        return "  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(vals, widths)))

    return "\n".join([line(head), "  ".join("-" * w for w in widths)] + [line(r) for r in cells])


def _s(x, digits=3) -> str:
    if x is None:
        return "-"
    if x == math.inf:
        return "inf"
    return f"{x:.{digits}g}"


def _mib(x) -> str:
    return "-" if x is None else f"{x / MIB:.0f}"


def machine_info() -> dict:
    """What the figures were measured on (and how loaded it was at the time)."""
    info = {"platform": platform.platform(), "python": platform.python_version(),
            "cpus": os.cpu_count(), "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    try:
        info["load_average"] = list(os.getloadavg())
    except OSError:
        pass
    return info


def write_json(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1) + "\n")


# --------------------------------------------------------------------------- solvers
def bench_dp(stages=DP_STAGES, slots=DP_SLOTS, fams=DP_FAMILIES, budget_frac: float = 0.5,
             timeout: float = 600.0, progress: bool = True, solver: str = "dp") -> list:
    """DP time and peak RSS over a stages x slots grid (one subprocess per run)."""
    rows = []
    grid = [(f, L, S) for f in fams for L in stages for S in slots]
    with Progress(len(grid), f"bench {solver}", enabled=None if progress else False) as bar:
        for fam, L, S in grid:
            chain = bench_chain(fam, L, seed=L, big=True)
            lb, top = chain.memory_lower_bound(), chain.store_all_memory()
            budget = budget_between(lb, top, budget_frac)
            r = measure(chain, budget, solver, {"slots": S}, timeout)
            rows.append({**r, "solver": solver, "family": fam, "stages": L, "slots": S,
                         "budget": budget, "budget_frac": budget_frac})
            bar.update()
    return rows


def bench_ilp(stages=ILP_STAGES, backends=ILP_BACKENDS, seeds: int = 3, budget_frac: float = 0.5,
              time_limit: float = 300.0, progress: bool = True, modes=("exact",)) -> list:
    """ILP time to proven optimality on random chains, per backend and formulation (one
    subprocess per run)."""
    for mode in modes:
        if mode not in ILP_MODES:
            raise RematError(f"ILP mode {mode!r} is not one of {', '.join(ILP_MODES)}")
    rows = []
    grid = [(L, seed, mode, be) for L in stages for seed in range(seeds) for mode in modes
            for be in backends]
    with Progress(len(grid), "bench ilp", enabled=None if progress else False) as bar:
        cache: dict = {}
        for L, seed, mode, be in grid:
            chain = bench_chain("random", L, seed)
            if (L, seed) not in cache:
                cache[(L, seed)] = smallest_feasible_budget(chain)
            m, src = cache[(L, seed)]
            budget = budget_between(m, chain.store_all_memory(), budget_frac)
            opts = {backend_option(): be, "time_limit": time_limit, **ILP_MODES[mode]}
            r = measure(chain, budget, "ilp", opts, timeout=time_limit * 2 + 120)
            rows.append({**r, "solver": "ilp", "backend": be, "mode": mode, "family": "random",
                         "stages": L,
                         "seed": seed, "budget": budget, "budget_frac": budget_frac,
                         "min_budget": m, "min_budget_from": src, "time_limit": time_limit})
            bar.update()
    return rows


def bench_exhaustive(stages=EXHAUSTIVE_STAGES, timeout: float = 600.0, progress: bool = True,
                     fracs=(0.0, 0.5), seeds: int = 1) -> list:
    """Exhaustive search's time on random chains (seed ``L + k`` for the k-th chain of L
    stages) at budgets ``fracs`` of the way from the smallest feasible one to store-all."""
    rows = []
    grid = [(L, k, frac) for L in stages for k in range(seeds) for frac in fracs]
    with Progress(len(grid), "bench exhaustive", enabled=None if progress else False) as bar:
        for L, k, frac in grid:
            chain = bench_chain("random", L, seed=L + k)
            m, src = smallest_feasible_budget(chain, max_exhaustive_stages=max(stages))
            budget = budget_between(m, chain.store_all_memory(), frac)
            r = measure(chain, budget, "exhaustive", {"max_stages": L}, timeout)
            rows.append({**r, "solver": "exhaustive", "family": "random", "stages": L,
                         "seed": L + k, "budget": budget, "budget_frac": frac, "min_budget": m})
            bar.update()
    return rows


def bench_prove(fams=PROVE_FAMILIES, stages=PROVE_STAGES, seeds: int = 1,
                budget_frac: float = 0.1, time_limit: float = 300.0,
                progress: bool = True) -> list:
    """``prove`` on family chains at a tight budget: its status, makespan and the bound it
    reached within ``time_limit`` (one subprocess per run; the smallest feasible budget
    from :func:`solvers.feasibility.smallest_feasible_budget`)."""
    rows = []
    grid = [(f, L, sd) for f in fams for L in stages for sd in range(seeds)]
    with Progress(len(grid), "bench prove", enabled=None if progress else False) as bar:
        for fam, L, sd in grid:
            chain = bench_chain(fam, L, sd)
            m, src = smallest_feasible_budget(chain)
            budget = budget_between(m, chain.store_all_memory(), budget_frac)
            r = measure(chain, budget, "prove", {"time_limit": time_limit},
                        timeout=time_limit * 2 + 120)
            rows.append({**r, "solver": "prove", "family": fam, "stages": L, "seed": sd,
                         "budget": budget, "budget_frac": budget_frac, "min_budget": m,
                         "min_budget_from": src, "time_limit": time_limit})
            bar.update()
    return rows


def ilp_medians(rows: list) -> list:
    """Median time to proven optimality per (backend, mode, stages); unproven runs count as
    infinite (so the median is finite only when at least half the runs were proven)."""
    out = []
    keys = sorted({(r["backend"], r.get("mode", "exact"), r["stages"]) for r in rows})
    for be, mode, L in keys:
        rs = [r for r in rows if r["backend"] == be and r.get("mode", "exact") == mode
              and r["stages"] == L]
        times = [r["solve_time"] if r.get("status") == "optimal" else math.inf for r in rs]
        out.append({"backend": be, "mode": mode, "stages": L, "runs": len(rs),
                    "optimal_for": sorted({str(r.get("optimal_for")) for r in rs}),
                    "proven": sum(1 for r in rs if r.get("status") == "optimal"),
                    "median_time": statistics.median(times) if times else None,
                    "max_time": max(times) if times else None,
                    "median_rss": statistics.median([r["peak_rss"] for r in rs if r.get("peak_rss")] or [0])})
    return out


def table_dp(rows) -> str:
    return format_table(
        ["family", "stages", "slots", "budget (MiB)", "status", "time (s)", "cpu (s)",
         "peak RSS (MiB)", "base RSS (MiB)"],
        [[r["family"], r["stages"], r["slots"], _mib(r["budget"]), r.get("status"),
          _s(r.get("solve_time")), _s(r.get("cpu_time")), _mib(r.get("peak_rss")),
          _mib(r.get("base_rss"))] for r in rows])


def table_ilp(rows) -> str:
    per_run = format_table(
        ["backend", "mode", "stages", "seed", "budget", "status", "optimal for", "time (s)",
         "cpu (s)", "gap", "peak RSS (MiB)"],
        [[r["backend"], r.get("mode", "exact"), r["stages"], r["seed"], r["budget"],
          r.get("status"), r.get("optimal_for", "-"), _s(r.get("solve_time")),
          _s(r.get("cpu_time")), _s(r.get("gap")), _mib(r.get("peak_rss"))] for r in rows])
    med = format_table(
        ["backend", "mode", "stages", "runs", "proven", "median time to optimality (s)", "max (s)"],
        [[m["backend"], m["mode"], m["stages"], m["runs"], m["proven"], _s(m["median_time"]),
          _s(m["max_time"])] for m in ilp_medians(rows)])
    return per_run + "\n\n" + med


def table_exhaustive(rows) -> str:
    return format_table(
        ["stages", "seed", "budget", "budget frac", "status", "time (s)", "cpu (s)",
         "peak RSS (MiB)"],
        [[r["stages"], r.get("seed", r["stages"]), r["budget"], r["budget_frac"], r.get("status"),
          _s(r.get("solve_time")), _s(r.get("cpu_time")), _mib(r.get("peak_rss"))]
         for r in rows])


def table_prove(rows) -> str:
    return format_table(
        ["family", "stages", "seed", "budget", "status", "makespan", "bound", "time (s)",
         "cpu (s)"],
        [[r["family"], r["stages"], r["seed"], r["budget"], r.get("status"),
          _s(r.get("makespan")), _s(r.get("bound")), _s(r.get("solve_time")),
          _s(r.get("cpu_time"))] for r in rows])


# --------------------------------------------------------------------------- quality
def _quality_task(item: tuple) -> dict:
    """One (family, budget) cell of the quality table: every solver at that budget."""
    import solvers

    fam, L, seed, budget, frac, names, time_limit, max_ex = item
    chain = bench_chain(fam, L, seed)
    res = {}
    for name in names:
        info = solvers.get(name)
        if name == "exhaustive" and L > max_ex:
            continue
        opts = {"time_limit": time_limit} if time_limit and "time_limit" in info.options else {}
        try:
            sol = solvers.solve(chain, budget, name, **opts)
            res[name] = {"status": sol.status, "makespan": sol.makespan, "bound": sol.bound,
                         "optimal_for": sol.optimal_for, "time": sol.wall_time}
        except Exception as e:  # noqa: BLE001 - a failing solver is reported in the table
            res[name] = {"status": "error", "makespan": None, "bound": None,
                         "optimal_for": None, "time": None, "error": f"{type(e).__name__}: {e}"}
    ref, ref_from, ref_status = None, None, None
    for cand in ("exhaustive", "ilp"):
        r = res.get(cand)
        if r and r["makespan"] is not None and r["optimal_for"] == "all":
            ref, ref_from, ref_status = r["makespan"], cand, r["status"]
            if r["status"] == "optimal":
                break
    for r in res.values():
        r["ratio"] = (r["makespan"] / ref) if (ref and r["makespan"] is not None) else None
    return {"family": fam, "stages": L, "seed": seed, "chain": chain.name, "budget": budget,
            "budget_frac": frac, "reference": ref, "reference_from": ref_from,
            "reference_status": ref_status, "results": res}


def bench_quality(fams=QUALITY_FAMILIES, stages: int = 7, seed: int = 0, budgets: int = 7,
                  solver_names=None, time_limit: float | None = 60.0,
                  max_exhaustive_stages: int | None = None, workers=None, scheduler=None,
                  progress: bool = True, seeds: int = 1) -> list:
    """Makespan ratio to the exact optimum of every solver, per family and budget, on the
    chains of seeds ``seed .. seed + seeds - 1`` (a family whose chain does not depend on
    the seed, such as homogeneous, gets one chain).  ``max_exhaustive_stages`` default:
    exhaustive search's registered ``max_stages`` (its limit in a sweep)."""
    import solvers

    if max_exhaustive_stages is None:
        max_exhaustive_stages = registry.get("exhaustive").max_stages
    names = tuple(solver_names) if solver_names else tuple(solvers.names())
    for n in names:
        solvers.get(n)
    if budgets < 2:
        raise RematError(f"budgets = {budgets} must be >= 2 (smallest feasible and store-all)")
    fracs = [0.0, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0] if budgets == 8 else \
        [round(j / (budgets - 1), 4) for j in range(budgets)]
    items = []
    chains_seen = set()
    for fam in fams:
        for sd in range(seed, seed + seeds):
            chain = bench_chain(fam, stages, sd)
            if chain in chains_seen:
                continue
            chains_seen.add(chain)
            m, _ = smallest_feasible_budget(chain, max_exhaustive_stages)
            top = chain.store_all_memory()
            seen = set()
            for f in fracs:
                b = budget_between(m, top, f)
                if b in seen:
                    continue
                seen.add(b)
                items.append((fam, stages, sd, b, f, names, time_limit, max_exhaustive_stages))
    return parallel_map(_quality_task, items, workers=workers, scheduler=scheduler,
                        progress=progress, desc="bench quality")


def table_quality(rows: list, names) -> str:
    """One row per (family, budget): each solver's makespan / optimum ('inf' infeasible)."""
    head = ["family", "budget", "frac", "optimum"] + list(names)
    body = []
    for r in rows:
        ref = r["reference"]
        mark = "" if r["reference_status"] == "optimal" else "*"
        cells = [r["family"], r["budget"], f"{r['budget_frac']:.2f}",
                 ("-" if ref is None else f"{ref:.6g}{mark}")]
        for n in names:
            x = r["results"].get(n)
            if x is None:
                cells.append("skip")
            elif x["status"] == "error":
                cells.append("ERROR")
            elif x["makespan"] is None:
                cells.append("inf" if x["status"] == "infeasible" else x["status"])
            else:
                mark = "~" if x["status"] == "time_limit" else ""
                cells.append((f"{x['ratio']:.4f}" if x["ratio"] is not None
                              else f"{x['makespan']:.6g}") + mark)
        body.append(cells)
    return format_table(head, body)


def table_quality_by_fraction(rows: list, names) -> str:
    """Aggregate over chains: one row per (family, budget fraction); each cell is the mean
    and the max ratio over the chains where the solver found a schedule, then how many
    chains it found none on (``-k``), '~' when some run stopped at its time limit."""
    head = ["family", "frac", "chains"] + list(names)
    keys = []
    for r in rows:
        k = (r["family"], r["budget_frac"])
        if k not in keys:
            keys.append(k)
    body = []
    for fam, frac in keys:
        rs = [r for r in rows if r["family"] == fam and r["budget_frac"] == frac]
        cells = [fam, f"{frac:.2f}", str(len(rs))]
        for n in names:
            xs = [r["results"][n] for r in rs if n in r["results"]]
            ratios = [x["ratio"] for x in xs if x.get("ratio") is not None]
            none = sum(1 for x in xs if x["makespan"] is None)
            tl = any(x["status"] == "time_limit" for x in xs)
            if not xs:
                cells.append("skip")
                continue
            cell = f"{statistics.fmean(ratios):.3f}/{max(ratios):.3f}" if ratios else "inf"
            if ratios and none:
                cell += f" -{none}"
            cells.append(cell + ("~" if tl else ""))
        body.append(cells)
    return format_table(head, body)


def quality_summary(rows: list, names) -> list:
    """Per solver: cells where it found a schedule, max and mean ratio to the optimum."""
    out = []
    for n in names:
        ratios = [r["results"][n]["ratio"] for r in rows if n in r["results"]
                  and r["results"][n].get("ratio") is not None]
        infeasible = sum(1 for r in rows if n in r["results"] and r["results"][n]["makespan"] is None)
        out.append({"solver": n, "cells": sum(1 for r in rows if n in r["results"]),
                    "no_schedule": infeasible,
                    "time_limited": sum(1 for r in rows if n in r["results"]
                                        and r["results"][n]["status"] == "time_limit"), "max_ratio": max(ratios) if ratios else None,
                    "mean_ratio": statistics.fmean(ratios) if ratios else None})
    return out


if __name__ == "__main__":
    _child_main()
