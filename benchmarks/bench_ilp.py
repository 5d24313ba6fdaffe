"""Benchmarks of the ``ilp`` solver (measured figures, not tests).

The sweeps:

``speed``: time to prove optimality on random chains (``families.make("random", L, seed)``)
at a middle budget (halfway from the smallest budget to store-all) and a tight budget (10%
of the way), for HiGHS and CBC; the smallest budget is the weak DP's (``dp-weak``
``min_budget``, the smallest at which a weakly persistent schedule exists: exhaustive
search does not reach 20-30 stages).  Writes ``results/ilp_speed.json`` with medians,
every run, and the machine load.  ``--proven`` times the proven model (``passes=None``,
exact over all schedules) instead, on at most 7 stages, and checks every answer against
exhaustive search (``results/ilp_speed_proven.json``).  ``--exhaustive-up-to L`` also runs
exhaustive search (the optimum over all schedules, no modelling argument) on the chains of
up to L stages and records whether each answer equals it (``results/ilp_speed_vs_exhaustive.json``).

``lp``: the root LP relaxation of the fast, two-run and proven models against the ideal
makespan and the optimum: how much of the recomputation each relaxation sees before any
branching (``results/ilp_lp_bound.json``).

``normal-form``: the evidence of proofs/ilp.md section 5: random small chains drawn to
provoke multi-run phases (zero sizes, large overheads); at every exhaustive breakpoint
compares the restricted normal forms (one or two strictly / weakly increasing runs per
phase) with exhaustive search.  Writes
``results/ilp_normal_form.json`` with every mismatch found.

``monotone``: the same question for the fast mode's normal form (one weakly increasing run
per phase) and for two weakly increasing runs, asked of exhaustive searches restricted to
those classes instead of the MILP (the K-pass model with pairs equals the exhaustive search
restricted to "weak-runs<=K", proved and tested), which makes it about a hundred times
cheaper per instance and reaches 7 stages.  For each chain: the smallest feasible budget of
each class against the unrestricted one, and at every budget where the unrestricted
optimum changes (so every budget is covered), each class's optimum against it.  Tasks run
in parallel (one per worker, each with its own seed).  Writes ``results/ilp_monotone.json``
with counts and the mismatches found.

``phase-local``: does one phase on its own ever need more than K weakly increasing runs,
and does that carry over to whole schedules?  Draws a chain (as ``monotone`` does), a phase
p, a start state (any plain x_1..x_p and tapes t_1..t_p) and a budget; asks
:func:`remat_theory.analysis.phase_local.missed_outcome` for an outcome of the phase (live values,
memory and time after B_p) that no phase with at most K runs matches; for each chain where
one exists, compares the whole chain with exhaustive search at every breakpoint, as
``monotone`` does.  Writes ``results/ilp_phase_local.json``.

``walk``: random sweeps almost never meet a chain where one weakly increasing run per phase
misses the optimum (1 chain in 2,572), so they say little about the larger classes there.
This sweep starts from the known counterexamples (``proofs/certificates/ilp_weak_run_*.json``)
and walks among chains where the monotone class misses: each step changes one to three
values (times, sizes, overheads) by 1 or 2, or inserts or deletes a stage; a mutant where
the monotone class still misses becomes the current chain.  Every chain visited is compared
whole with exhaustive search, as ``monotone`` does, for the monotone class, two weakly
increasing runs per phase, and ``run+falls`` (one weakly increasing run, then only Fall
operations).  Writes ``results/ilp_walk.json``.

``relaxation``: the moment relaxation of proofs/ilp.md section 9 (a lower bound on every
schedule) against exhaustive search: random chains of 2-7 stages with overheads, every
budget where the exhaustive optimum changes; counts where the bound equals the optimum,
where it is below (the gaps the solver's proven model must close), and where it would be
above (a violation of Theorem 3: must be none).  Writes ``results/ilp_relaxation.json``.

Usage::

    python benchmarks/bench_ilp.py speed --lengths 10 20 30 --seeds 5 --pairs --time-limit 120
    python benchmarks/bench_ilp.py speed --proven --lengths 4 5 6 --seeds 3 --mip-solvers highs \
        --time-limit 300 --out benchmarks/results/ilp_speed_proven.json
    python benchmarks/bench_ilp.py speed --lengths 8 10 12 15 --seeds 3 --pairs --mip-solvers highs \
        --exhaustive-up-to 15 --exhaustive-time-limit 300 --out benchmarks/results/ilp_speed_vs_exhaustive.json
    python benchmarks/bench_ilp.py lp --lengths 5 6 7 8 --seeds 3
    python benchmarks/bench_ilp.py normal-form --minutes 10
    python benchmarks/bench_ilp.py monotone --minutes 30 --lengths 2 3 4 5 6 7
    python benchmarks/bench_ilp.py phase-local --minutes 20 --lengths 3 4 --runs 2
    python benchmarks/bench_ilp.py walk --minutes 20 --max-stages 6
    python benchmarks/bench_ilp.py relaxation --minutes 20 --seed 1
    python benchmarks/bench_ilp.py speed --certified --lengths 20 30 --seeds 3 --mip-solvers highs
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

import numpy as np

import solvers
import solvers.exhaustive as ex
from solvers import exhaustive_bounds
from remat_theory.model.chain import Chain
from remat_theory.analysis.families import make, with_unsaved_outputs
from remat_theory.model.simulator import State, state_memory

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


def random_instances(lengths, seeds: int, kinds, family: str = "random",
                     unsaved: float | None = None):
    """``(L, seed, chain, budgets, kind)`` for the benchmark chains
    (``families.make(family, L, seed)``, random by default) at the budgets of
    :func:`budgets_of` named in ``kinds``; ``unsaved``: that share of the stage outputs
    unsaved (``families.with_unsaved_outputs``, same seed), None for none."""
    for L in lengths:
        for seed in range(seeds):
            chain = make(family, L, seed)
            if unsaved is not None:
                chain = with_unsaved_outputs(chain, seed, unsaved)
            b = budgets_of(chain)
            for kind in kinds:
                yield L, seed, chain, b, kind


def speed(args) -> dict:
    if args.proven and args.certified:
        raise SystemExit("speed: --proven and --certified are two different modes; pick one")
    certify = None
    if args.certified:
        args.passes, certify = None, True
    elif args.proven:
        certify = False
    if args.proven:
        args.passes = None
        if max(args.lengths) > 7:
            raise SystemExit(f"speed --proven: --lengths up to 7 (exhaustive search checks "
                             f"every answer), got {max(args.lengths)}")
        args.exhaustive_up_to = max(args.exhaustive_up_to, 7)
    runs = []
    family = getattr(args, "family", "random")
    for L, seed, chain, b, kind in random_instances(args.lengths, args.seeds, args.budgets, family,
                                                    getattr(args, "unsaved_outputs", None)):
        for ms in args.mip_solvers:
            t0 = time.perf_counter()
            sol = solvers.solve(chain, b[kind], "ilp", passes=args.passes,
                                pairs=args.pairs, mip_solver=ms,
                                time_limit=args.time_limit, certify=certify)
            dt = time.perf_counter() - t0
            weak = solvers.solve(chain, b[kind], "dp-weak")
            row = {"family": family, "L": L, "seed": seed, "budget_kind": kind, "budget": b[kind],
                   "output_saved": list(chain.output_saved) if chain.has_unsaved_outputs else None,
                   "mip_solver": ms, "passes": args.passes, "pairs": args.pairs,
                   "optimal_for": sol.optimal_for, "status": sol.status,
                   "makespan": sol.makespan, "bound": sol.bound, "gap": sol.gap,
                   "dp_weak": weak.makespan, "seconds": round(dt, 3),
                   **(_exhaustive_check(chain, b[kind], sol, args.exhaustive_time_limit)
                      if L <= args.exhaustive_up_to else {}),
                   "variables": sol.info.get("variables"),
                   **({"certificate": sol.info.get("certificate"),
                       "relaxation": sol.info.get("relaxation"),
                       "fast_mode": sol.info.get("fast_mode")} if args.certified else {}),
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
                row = {
                    "L": L, "budget_kind": kind, "mip_solver": ms, "instances": len(rs),
                    "proven": len(proven),
                    "median_seconds": statistics.median(r["seconds"] for r in rs) if rs else None,
                    "max_seconds": max(r["seconds"] for r in rs) if rs else None}
                exact = [r for r in rs if r.get("exhaustive_status") == "optimal"]
                if L <= args.exhaustive_up_to and rs:
                    row.update({
                        "exhaustive_proven": len(exact),
                        "exhaustive_median_seconds":
                            statistics.median(r["exhaustive_seconds"] for r in rs),
                        "equal_to_optimum": sum(r["makespan"] is not None and abs(
                            r["makespan"] - r["exhaustive"]) <= 1e-9 * max(1.0, r["exhaustive"])
                            for r in exact)})
                summary.append(row)
    return {"command": " ".join(["python", "benchmarks/bench_ilp.py"] + sys.argv[1:]),
            "passes": args.passes, "pairs": args.pairs, "certified": args.certified,
            "time_limit": args.time_limit,
            "machine": machine(),
            "note": "median_seconds counts an unproven run at its time (about the time limit), "
                    "so it is a lower bound on the true median when some runs are unproven",
            "summary": summary, "runs": runs}


LP_CONFIGS = {"weak-runs<=1": (1, True), "weak-runs<=2": (2, True), "all": (None, False)}


def lp_bound(chain: Chain, budget: int, passes: int | None, pairs: bool) -> float:
    """The value of the LP relaxation of the ``passes``-pass model (every binary relaxed to
    [0, 1]) on the makespan: the bound a MILP solver starts branching from."""
    import pulp
    from solvers import ilp

    g = chain.size_gcd()
    model = ilp.build_model(chain.scaled_sizes(g), budget // g, passes, pairs=pairs)
    for v in model.prob.variables():
        v.cat = pulp.LpContinuous
    ilp.backends.silence_highs_banner()
    model.prob.solve(pulp.HiGHS(msg=False))
    if pulp.LpStatus[model.prob.status] != "Optimal":
        raise SystemExit(f"lp: the relaxation of {chain.name} at budget {budget} is "
                         f"{pulp.LpStatus[model.prob.status]}")
    return pulp.value(model.prob.objective) + model.constant


def lp(args) -> dict:
    """How much of the recomputation the root LP relaxation sees, per model: the LP value
    against the ideal makespan (no recomputation, a bound every model knows) and the optimum
    (exhaustive search up to --exhaustive-up-to stages, else the weak DP's value, an upper
    bound on it)."""
    runs = []
    for L, seed, chain, b, kind in random_instances(args.lengths, args.seeds, args.budgets):
        ideal = chain.ideal_makespan()
        if L <= args.exhaustive_up_to:
            ref = solvers.solve(chain, b[kind], "exhaustive", max_stages=L)
            reference, ref_kind = ref.makespan, "exhaustive"
        else:
            reference = solvers.solve(chain, b[kind], "dp-weak").makespan
            ref_kind = "dp-weak"
        row = {"L": L, "seed": seed, "budget_kind": kind, "budget": b[kind],
               "ideal": ideal, "reference": reference, "reference_from": ref_kind}
        for name, (passes, pairs) in LP_CONFIGS.items():
            v = lp_bound(chain, b[kind], passes, pairs)
            if name == "all" and v > reference + 1e-6 * max(1.0, reference):
                raise SystemExit(f"lp: the proven model's relaxation {v} is above "
                                 f"the optimum {reference} ({chain.name}, {kind})")
            row[f"lp_{name}"] = round(v, 4)
            row[f"closed_{name}"] = (round((v - ideal) / (reference - ideal), 4) + 0.0
                                     if reference > ideal else None)
        runs.append(row)
        print(json.dumps(row), flush=True)
    summary = {name: {"median_closed": statistics.median(
        r[f"closed_{name}"] for r in runs if r[f"closed_{name}"] is not None),
        "at_ideal": sum(abs(r[f"lp_{name}"] - r["ideal"]) <= 1e-6 * r["ideal"] for r in runs)}
        for name in LP_CONFIGS}
    return {"command": " ".join(["python", "benchmarks/bench_ilp.py"] + sys.argv[1:]),
            "machine": machine(),
            "note": "closed_X = (LP value - ideal) / (reference - ideal): the share of the "
                    "recomputation the root relaxation of model X sees; at_ideal: instances "
                    "whose relaxation is the ideal makespan itself",
            "instances": len(runs), "summary": summary, "runs": runs}


def _exhaustive_check(chain: Chain, budget: int, sol, time_limit: float | None) -> dict:
    """The optimum over all schedules (exhaustive search) beside an ilp answer.

    A proven answer of the proven model that differs from it, or any answer below it, is
    refused: the benchmark would otherwise time a wrong solver.  Within a time limit the
    search may stop unproven; it then gives its lower bound ("exhaustive_status":
    "time_limit")."""
    t0 = time.perf_counter()
    ex = solvers.solve(chain, budget, "exhaustive", max_stages=chain.length,
                       time_limit=time_limit)
    seconds = round(time.perf_counter() - t0, 3)
    best = ex.makespan if ex.status == "optimal" else ex.bound
    tol = 1e-9 * max(1.0, best or 0.0)
    exact_model = sol.optimal_for == "all"
    if ex.status == "optimal" and sol.status == "optimal" and exact_model \
            and abs(sol.makespan - best) > tol:
        raise SystemExit(f"speed: ilp says {sol.makespan} is optimal on {chain.name} at "
                         f"budget {budget}, exhaustive search finds {best}")
    if best is not None and sol.makespan is not None and sol.makespan < best - tol:
        raise SystemExit(f"speed: ilp's schedule ({sol.makespan}) on {chain.name} at budget "
                         f"{budget} is below exhaustive search's "
                         f"{'optimum' if ex.status == 'optimal' else 'bound'} {best}")
    return {"exhaustive": best, "exhaustive_status": ex.status, "exhaustive_seconds": seconds}


def min_budget(args) -> dict:
    """The proven model one below the smallest feasible budget (the slowest budgets: it must
    prove infeasibility, then find the smallest budget), on random chains and on the
    certificates of the fast mode's counterexamples, against exhaustive search."""
    from remat_theory.analysis.certificates import load
    from solvers.exhaustive import min_feasible_budget

    cases = [(f"random L={L} seed={s}", make("random", L, s))
             for L in args.lengths for s in range(args.seeds)]
    certified = [(f.name, load(f).chain) for f in sorted(CERTIFICATES.glob("ilp_*.json"))]
    cases += [(name, c) for name, c in certified if c.length <= max(args.lengths)]
    runs = []
    for name, chain in cases:
        lo = min_feasible_budget(chain)
        t0 = time.perf_counter()
        sol = solvers.solve(chain, lo - 1, "ilp", mip_solver=args.mip_solver,
                            time_limit=args.time_limit)
        row = {"chain": name, "L": chain.length, "budget": lo - 1, "exhaustive_min": lo,
               "min_budget": sol.min_budget, "found": sol.info.get("min_budget_found"),
               "seed_two_runs": sol.info.get("staged_min_budget"),
               "seconds": round(time.perf_counter() - t0, 3)}
        if sol.min_budget is not None and sol.min_budget != lo:
            raise SystemExit(f"min-budget: {name}: the ilp says {sol.min_budget}, "
                             f"exhaustive search {lo}")
        runs.append(row)
        print(json.dumps(row), flush=True)
    return {"command": " ".join(["python", "benchmarks/bench_ilp.py"] + sys.argv[1:]),
            "machine": machine(), "time_limit": args.time_limit, "runs": runs}


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


def _heavy_chain(L: int, r: random.Random) -> Chain:
    """Sizes on one of several scales with many zeros, tapes often equal to their output,
    overheads up to twice the scale in some chains and absent in others: the regions where
    the order of operations inside a phase matters most."""
    S = r.choice([5, 12, 30, 100])

    def size():
        return 0 if r.random() < 0.3 else r.randrange(S)

    x = [size() for _ in range(L + 1)]
    x[0] = r.randrange(S // 3 + 1)
    tp = [x[i + 1] + (r.randrange(S) if r.random() < 0.7 else 0) for i in range(L)]
    po, pb = r.random(), r.random()
    fo = [r.randrange(2 * S) if r.random() < po else 0 for _ in range(L)]
    bo = [r.randrange(2 * S) if r.random() < pb else 0 for _ in range(L + 1)]
    return Chain([float(r.randint(1, 9)) for _ in range(L)],
                 [float(r.randint(0, 9)) for _ in range(L + 1)], x, tp, fo, bo)


RUN_CLASSES = ("weak-runs<=1", "weak-runs<=2")


def chain_misses(chain: Chain, classes=RUN_CLASSES) -> tuple:
    """Compare each class with exhaustive search on ``chain`` at its smallest feasible budget
    and at every breakpoint of the unrestricted optimum (so at every budget).  Returns
    ``(breakpoints, {class: [miss, ...]})``."""
    from solvers.exhaustive import min_feasible_budget, search

    misses: dict = {c: [] for c in classes}
    lo = min_feasible_budget(chain)
    for c in classes:
        lo_c = min_feasible_budget(chain, schedule_class=c)
        if lo_c != lo:
            misses[c].append({"chain": chain.to_dict(), "budget": lo, "exhaustive": "feasible",
                              c: f"infeasible below {lo_c}"})
    full = search(chain, chain.store_all_memory())[1]
    b, prev, breakpoints = lo, None, 0
    while True:
        best = search(chain, b)[1]
        if best != prev:  # a breakpoint of the unrestricted optimum
            prev = best
            breakpoints += 1
            for c in classes:
                got = search(chain, b, schedule_class=c)[1]
                if got is None or got > best * (1 + 1e-9):
                    misses[c].append({"chain": chain.to_dict(), "budget": b,
                                      "exhaustive": best, c: got})
        if best == full:
            break
        b += 1
    return breakpoints, misses


def _without_fwd_overhead(chain: Chain) -> Chain:
    d = chain.to_dict()
    d["fwd_overhead"] = [0] * chain.length
    return Chain.from_dict(d)


def monotone_task(task: tuple) -> dict:
    """One worker's share of the ``monotone`` sweep: ``(seed, seconds, lengths[, no_fo])``;
    ``no_fo``: the chains' forward overheads are set to zero."""
    seed, seconds, lengths = task[:3]
    no_fo = bool(task[3]) if len(task) > 3 else False
    r = random.Random(seed)
    t0 = time.perf_counter()
    chains = instances = 0
    by_length: dict = {}
    misses: dict = {c: [] for c in RUN_CLASSES}
    missed_chains: dict = {c: 0 for c in RUN_CLASSES}
    while time.perf_counter() - t0 < seconds:
        L = r.choice(lengths)
        chain = _heavy_chain(L, r) if r.random() < 0.5 else _provocative_chain(L, r)
        if no_fo:
            chain = _without_fwd_overhead(chain)
        chains += 1
        row = by_length.setdefault(L, {"chains": 0, "breakpoints": 0,
                                       **{c: 0 for c in RUN_CLASSES}})
        row["chains"] += 1
        bps, found = chain_misses(chain)
        instances += bps
        row["breakpoints"] += bps
        for c, ms in found.items():
            misses[c] += ms
            row[c] += sum(1 for m in ms if m["exhaustive"] != "feasible")
            missed_chains[c] += bool(ms)
    return {"seed": seed, "chains": chains, "breakpoints": instances, "by_length": by_length,
            "missed_chains": missed_chains, "misses": misses}


def monotone(args) -> dict:
    from remat_theory.analysis.parallel import parallel_map

    workers = args.workers or os.cpu_count() or 1
    tasks = [(args.seed * 1000 + w, 60 * args.minutes, tuple(args.lengths), args.no_fwd_overhead)
             for w in range(workers)]
    t0 = time.perf_counter()
    parts = parallel_map(monotone_task, tasks, workers=workers, progress=False)
    by_length: dict = {}
    for part in parts:
        for L, row in part["by_length"].items():
            tot = by_length.setdefault(str(L), {k: 0 for k in row})
            for k, n in row.items():
                tot[k] += n
    return {"command": " ".join(["python", "benchmarks/bench_ilp.py"] + sys.argv[1:]),
            "machine": machine(), "minutes": args.minutes, "workers": workers,
            "wall_seconds": round(time.perf_counter() - t0, 1),
            "chains": sum(p["chains"] for p in parts),
            "breakpoints_checked": sum(p["breakpoints"] for p in parts),
            "by_length": dict(sorted(by_length.items(), key=lambda kv: int(kv[0]))),
            "note": "per length: chains, breakpoints, and for each class the breakpoints where "
                    "its optimum is above the unrestricted one (smallest-budget misses are "
                    "counted in missed_chains and listed in examples)",
            "missed_chains": {c: sum(p["missed_chains"][c] for p in parts) for c in RUN_CLASSES},
            "mismatches": {c: sum(len(p["misses"][c]) for p in parts) for c in RUN_CLASSES},
            "examples": {c: [m for p in parts for m in p["misses"][c]][:5] for c in RUN_CLASSES}}


def _random_start(chain: Chain, r: random.Random) -> State:
    """A start for one phase p < L: any set of plain x_1..x_p and tapes t_1..t_p (x_0 is
    always held; nothing of stage p+1 is live at the start of phase p)."""
    L = chain.length
    p = r.randrange(1, L)
    plain, tapes = 1, 0
    for j in range(1, p + 1):
        plain |= (r.random() < 0.3) << j
        tapes |= (r.random() < 0.3) << j
    return State(plain, tapes, p)


def phase_local_task(task: tuple) -> dict:
    """One worker's share of the ``phase-local`` sweep: ``(seed, seconds, lengths, runs[,
    no_fo[, max_starts]])``; ``no_fo``: the chains' forward overheads are set to zero;
    ``max_starts`` also stops it after that many phase starts (a cap that binds before the
    clock makes the task the same on every machine: the tests use it)."""
    from remat_theory.analysis.phase_local import missed_outcome

    seed, seconds, lengths, k = task[:4]
    no_fo = bool(task[4]) if len(task) > 4 else False
    max_starts = task[5] if len(task) > 5 else None
    cls = f"weak-runs<={k}"
    r = random.Random(seed)
    t0 = time.perf_counter()
    starts = local = chains = breakpoints = 0
    examples, global_misses = [], []
    while time.perf_counter() - t0 < seconds and (max_starts is None or starts < max_starts):
        L = r.choice(lengths)
        chain = _heavy_chain(L, r) if r.random() < 0.5 else _provocative_chain(L, r)
        if no_fo:
            chain = _without_fwd_overhead(chain)
        start = _random_start(chain, r)
        held = state_memory(chain, start)
        budget = held + r.randint(0, max(chain.tape_size) + max(chain.fwd_overhead))
        starts += 1
        o = missed_outcome(chain, start, budget, cls)
        if o is None:
            continue
        local += 1
        if len(examples) < 5:
            examples.append({"chain": chain.to_dict(), "start": start.describe(chain),
                             "start_state": list(start),
                             "budget": budget, "phase": str(o.ops), "memory_after": o.memory,
                             "time": o.time})
        # does the chain need more than k runs in some phase of a whole schedule?
        chains += 1
        bps, found = chain_misses(chain, (cls,))
        breakpoints += bps
        global_misses += found[cls]
    return {"starts": starts, "local_misses": local, "chains_checked": chains,
            "breakpoints": breakpoints, "examples": examples, "global_misses": global_misses}


def phase_local(args) -> dict:
    from remat_theory.analysis.parallel import parallel_map

    workers = args.workers or os.cpu_count() or 1
    tasks = [(args.seed * 1000 + w, 60 * args.minutes, tuple(args.lengths), args.runs,
              args.no_fwd_overhead) for w in range(workers)]
    t0 = time.perf_counter()
    parts = parallel_map(phase_local_task, tasks, workers=workers, progress=False)
    total = {k: sum(p[k] for p in parts)
             for k in ("starts", "local_misses", "chains_checked", "breakpoints")}
    return {"command": " ".join(["python", "benchmarks/bench_ilp.py"] + sys.argv[1:]),
            "machine": machine(), "minutes": args.minutes, "workers": workers,
            "wall_seconds": round(time.perf_counter() - t0, 1),
            "class": f"weak-runs<={args.runs}", **total,
            "global_misses": sum(len(p["global_misses"]) for p in parts),
            "note": "starts: random (chain, phase start, budget); local_misses: starts where "
                    "one phase alone reaches an outcome (live values, memory, time) that no "
                    "phase of the class matches; each such chain is then compared whole with "
                    "exhaustive search at every breakpoint (global_misses)",
            "local_examples": [e for p in parts for e in p["examples"]][:5],
            "global_examples": [m for p in parts for m in p["global_misses"]][:5]}


CERTIFICATES = Path(__file__).resolve().parent.parent / "proofs" / "certificates"
WALK_CLASSES = ("weak-runs<=1", "weak-runs<=2", "run+falls")
_VALUES = ("fwd_time", "bwd_time", "x_size", "tape_size", "fwd_overhead", "bwd_overhead")


# The region a walk stays in (chains where this class misses the optimum) -> the certificates
# it starts from.  "run+falls" is the deeper region: chains whose second run must recompute
# a plain value, where a third run would be needed first if two did not suffice.
WALK_REGIONS = {"weak-runs<=1": "ilp_weak_run_*.json", "run+falls": "ilp_fall_tail_refuted.json"}


def walk_seeds(region: str = "weak-runs<=1") -> list:
    """The chains of the certificates that refute ``region`` (a class of WALK_CLASSES)."""
    from remat_theory.analysis.certificates import load

    return [load(f).chain for f in sorted(CERTIFICATES.glob(WALK_REGIONS[region]))]


def mutate(chain: Chain, r: random.Random, max_stages: int) -> Chain:
    """A neighbour of ``chain``: one to three values moved by 1 or 2 (never below 0), or a
    stage inserted (random values) or deleted; tapes are raised to hold their output."""
    d = {k: list(getattr(chain, k)) for k in _VALUES}
    L = chain.length
    u = r.random()
    if u < 0.15 and L < max_stages:
        i = r.randint(0, L)  # the new stage i reads x_i and makes a new x_{i+1}
        xs = r.choice([0, 1, 2, r.randint(0, 10)])
        d["x_size"].insert(i + 1, xs)
        for k, v in (("fwd_time", float(r.randint(1, 5))), ("bwd_time", float(r.randint(1, 5))),
                     ("tape_size", xs + r.randint(0, 6)),
                     ("fwd_overhead", r.choice([0, 0, r.randint(0, 8)])),
                     ("bwd_overhead", r.choice([0, 0, r.randint(0, 8)]))):
            d[k].insert(i, v)
    elif u < 0.25 and L > 2:
        i = r.randrange(L)  # stage i goes; stage i+1 now reads x_i
        d["x_size"].pop(i + 1)
        for k in ("fwd_time", "bwd_time", "tape_size", "fwd_overhead", "bwd_overhead"):
            d[k].pop(i)
    else:
        for _ in range(r.randint(1, 3)):
            k = r.choice(_VALUES)
            i = r.randrange(len(d[k]))
            d[k][i] = max(0, d[k][i] + r.choice([-2, -1, 1, 2]))
    d["tape_size"] = [max(t, d["x_size"][i + 1]) for i, t in enumerate(d["tape_size"])]
    return Chain(d["fwd_time"], d["bwd_time"], d["x_size"], d["tape_size"],
                 d["fwd_overhead"], d["bwd_overhead"], name="walk")


def _lower_fwd_overhead(chain: Chain, r: random.Random) -> Chain:
    """``chain`` with one forward overhead lowered by 1 or 2, or to zero."""
    d = chain.to_dict()
    i = r.randrange(chain.length)
    d["fwd_overhead"][i] = max(0, d["fwd_overhead"][i] - r.choice([1, 2, d["fwd_overhead"][i]]))
    return Chain.from_dict(d)


def walk_task(task: tuple) -> dict:
    """One worker's share of the ``walk`` sweep:
    ``(seed, seconds, max_stages[, region[, lower_overhead[, max_visits]]])``.  With
    ``lower_overhead`` the walk never raises the total forward overhead and half of its
    steps lower one: does the region reach chains without forward overheads?
    ``max_visits`` also stops it after that many chains compared (a cap that binds before
    the clock makes the task the same on every machine: the tests use it)."""
    seed, seconds, max_stages = task[:3]
    region_class = task[3] if len(task) > 3 else "weak-runs<=1"
    lower = bool(task[4]) if len(task) > 4 else False
    max_visits = task[5] if len(task) > 5 else None
    r = random.Random(seed)
    seeds = [c for c in walk_seeds(region_class) if c.length <= max_stages]
    t0 = time.perf_counter()
    cur, chain = None, r.choice(seeds)
    visited = region = breakpoints = 0
    by_length: dict = {}
    missed = {c: 0 for c in WALK_CLASSES}
    examples: dict = {c: [] for c in WALK_CLASSES}
    least = None  # the region chain with the smallest total forward overhead
    while time.perf_counter() - t0 < seconds and (max_visits is None or visited < max_visits):
        if cur is not None:
            if lower and r.random() < 0.5:
                chain = _lower_fwd_overhead(cur, r)
            else:
                chain = mutate(cur, r, max_stages)
                if lower and sum(chain.fwd_overhead) > sum(cur.fwd_overhead):
                    continue
        bps, found = chain_misses(chain, WALK_CLASSES)
        visited += 1
        breakpoints += bps
        if found[region_class]:  # still among the chains where the region's class misses
            region += 1
            by_length[chain.length] = by_length.get(chain.length, 0) + 1
            cur = chain
            if least is None or sum(chain.fwd_overhead) < sum(least.fwd_overhead):
                least = chain
        elif cur is None or r.random() < 0.05:
            cur = r.choice(seeds)
        for c in WALK_CLASSES:
            if found[c]:
                missed[c] += 1
                if len(examples[c]) < 3:
                    examples[c].append(found[c][0])
    return {"visited": visited, "region": region, "breakpoints": breakpoints,
            "by_length": by_length, "missed": missed, "examples": examples,
            "least_fwd_overhead": None if least is None else least.to_dict()}


def walk(args) -> dict:
    from remat_theory.analysis.parallel import parallel_map

    smallest = min(c.length for c in walk_seeds(args.region))
    if args.max_stages < smallest:
        raise SystemExit(f"walk: --max-stages {args.max_stages} is below {smallest}, the "
                         f"length of the smallest certificate the walk starts from")
    workers = args.workers or os.cpu_count() or 1
    tasks = [(args.seed * 1000 + w, 60 * args.minutes, args.max_stages, args.region,
              args.lower_overhead) for w in range(workers)]
    t0 = time.perf_counter()
    parts = parallel_map(walk_task, tasks, workers=workers, progress=False)
    by_length: dict = {}
    for p in parts:
        for k, v in p["by_length"].items():
            by_length[k] = by_length.get(k, 0) + v
    return {"command": " ".join(["python", "benchmarks/bench_ilp.py"] + sys.argv[1:]),
            "machine": machine(), "minutes": args.minutes, "workers": workers,
            "wall_seconds": round(time.perf_counter() - t0, 1),
            "visited": sum(p["visited"] for p in parts),
            "region": sum(p["region"] for p in parts),
            "breakpoints": sum(p["breakpoints"] for p in parts),
            "region_by_length": dict(sorted(by_length.items())),
            "region_class": args.region,
            "lower_overhead": args.lower_overhead,
            "least_fwd_overhead": min((p["least_fwd_overhead"] for p in parts
                                       if p["least_fwd_overhead"] is not None),
                                      key=lambda d: sum(d["fwd_overhead"]), default=None),
            "missed_chains": {c: sum(p["missed"][c] for p in parts) for c in WALK_CLASSES},
            "note": "visited: chains compared whole with exhaustive search at every breakpoint; "
                    "region: those where region_class misses the optimum (the walk stays "
                    "among them); missed_chains: chains where each class misses the optimum "
                    "at some budget",
            "examples": {c: [e for p in parts for e in p["examples"][c]][:3]
                         for c in WALK_CLASSES}}


def _relaxation_chain(r: random.Random) -> Chain:
    L = r.randint(2, 7)

    def size():
        return r.choice([0, 1, 2, 3, 5, 8, 13])

    x = [size() for _ in range(L + 1)]
    return Chain([float(r.randint(0, 10)) for _ in range(L)],
                 [float(r.randint(0, 10)) for _ in range(L + 1)], x,
                 [x[i + 1] + size() for i in range(L)],
                 [r.choice([0, 0, 1, 3, 5]) for _ in range(L)],
                 [r.choice([0, 0, 1, 3]) for _ in range(L + 1)])


def relaxation(args) -> dict:
    from solvers.exhaustive import min_feasible_budget, search
    from solvers.ilp.relaxation import lower_bound

    r = random.Random(args.seed)
    chains = points = equal = above = 0
    below = []
    by_length: dict = {}
    t0 = time.perf_counter()
    max_chains = getattr(args, "max_chains", None)  # stops it before the clock if it binds
    while time.perf_counter() - t0 < 60 * args.minutes and (max_chains is None
                                                             or chains < max_chains):
        chain = _relaxation_chain(r)
        prev = None
        for b in range(min_feasible_budget(chain, max_stages=10), chain.store_all_memory() + 1):
            opt = search(chain, b)[1]
            if opt == prev:
                continue
            prev = opt
            lb = lower_bound(chain, b).value
            points += 1
            row = by_length.setdefault(chain.length, {"breakpoints": 0, "equal": 0})
            row["breakpoints"] += 1
            if lb > opt + 1e-9 * max(1.0, opt):
                above += 1
                print("VIOLATION", json.dumps(chain.to_dict()), b, lb, opt, flush=True)
            elif lb >= opt - 1e-9 * max(1.0, opt):
                equal += 1
                row["equal"] += 1
            elif len(below) < 50:
                below.append({"chain": chain.to_dict(), "budget": b, "bound": lb, "optimum": opt})
        chains += 1
    return {"command": " ".join(["python", "benchmarks/bench_ilp.py"] + sys.argv[1:]),
            "machine": machine(), "minutes": args.minutes, "seed": args.seed,
            "chains": chains, "breakpoints": points, "bound_equals_optimum": equal,
            "bound_below_optimum": points - equal - above, "bound_above_optimum": above,
            "by_length": by_length, "first_gaps": below}


def _rng_chain(rng, L: int, max_overhead: int = 40) -> Chain:
    """A chain drawn by numpy's default_rng, independently of ``families.make``: times in
    [0.5, 10), sizes 1..16, tapes at least the stage's output, overheads below
    ``max_overhead`` (up to 2.5 times the largest size: where the moment relaxation, which
    does not see overheads inside a phase, leaves gaps on about one pair in ten)."""
    x = rng.integers(1, 17, L + 1)
    return Chain(fwd_time=rng.uniform(0.5, 10, L).round(2).tolist(),
                 bwd_time=rng.uniform(0.5, 10, L + 1).round(2).tolist(),
                 x_size=x.tolist(), tape_size=(x[1:] + rng.integers(0, 17, L)).tolist(),
                 fwd_overhead=rng.integers(0, max_overhead, L).tolist(),
                 bwd_overhead=rng.integers(0, max_overhead, L + 1).tolist(), name=f"rng-{L}")


def small_dispatch(args) -> dict:
    """The default ilp on short random chains (numpy default_rng, :func:`_rng_chain`) at
    ``--points`` budgets spread over [smallest feasible (exhaustive search), store-all]:
    its time and which step proved each answer, checked against exhaustive search.
    ``--no-exhaustive-step`` switches the certified mode's exhaustive-search step off (the
    behaviour before it), under ``--time-limit``."""
    if args.no_exhaustive_step:
        ex.DEFAULT_MAX_STAGES = 0  # read by solvers.ilp.certify at call time
    rng = np.random.default_rng(args.seed)
    runs = []
    for n in range(args.chains):
        L = int(rng.choice(args.lengths))
        chain = _rng_chain(rng, L, args.max_overhead)
        lo, hi = ex.min_feasible_budget(chain, max_stages=L), chain.store_all_memory()
        pts = sorted({lo + (hi - lo) * k // (args.points - 1) for k in range(args.points)})
        for b in pts:
            t0 = time.perf_counter()
            sol = solvers.solve(chain, b, "ilp", time_limit=args.time_limit)
            dt = time.perf_counter() - t0
            t1 = time.perf_counter()
            e = solvers.solve(chain, b, "exhaustive", max_stages=L)
            de = time.perf_counter() - t1
            agree = (sol.status == "optimal" and e.status == "optimal"
                     and abs(sol.makespan - e.makespan) <= 1e-9 * max(1.0, e.makespan))
            if sol.status == "optimal" and not agree:
                raise SystemExit(f"small-dispatch: chain {n} budget {b}: ilp {sol.makespan} "
                                 f"!= exhaustive {e.makespan}")
            row = {"chain": n, "L": L, "budget": b, "min_budget": lo, "store_all": hi,
                   "status": sol.status, "makespan": sol.makespan, "bound": sol.bound,
                   "certificate": sol.info.get("certificate"), "seconds": round(dt, 3),
                   "exhaustive": e.makespan, "exhaustive_seconds": round(de, 3),
                   "equal": agree}
            runs.append(row)
            print(json.dumps(row), flush=True)
    secs = sorted(r["seconds"] for r in runs)
    cert = {}
    for r in runs:
        cert[str(r["certificate"])] = cert.get(str(r["certificate"]), 0) + 1
    summary = {"pairs": len(runs), "proven": sum(r["status"] == "optimal" for r in runs),
               "equal_to_exhaustive": sum(r["equal"] for r in runs),
               "median_seconds": statistics.median(secs), "max_seconds": secs[-1],
               "over_5_seconds": sum(s > 5 for s in secs), "certificates": cert,
               "exhaustive_max_seconds": max(r["exhaustive_seconds"] for r in runs)}
    return {"command": " ".join(["python", "benchmarks/bench_ilp.py"] + sys.argv[1:]),
            "exhaustive_step": not args.no_exhaustive_step, "time_limit": args.time_limit,
            "machine": machine(), "summary": summary, "runs": runs}


def exhaustive_bound(args) -> dict:
    """Exhaustive search on the benchmark's random chains (``families.make``) at the
    budgets of :func:`budgets_of`, with its A* bound (``--simple-bound``: the bound before
    the memory term of proofs/exhaustive.md, for the before/after figures): time, states
    pushed, and the optimum or the bound reached under ``--time-limit``."""
    runs = []
    for L, seed, chain, b, kind in random_instances(args.lengths, args.seeds, args.budgets):
        pushed = [0]
        full = ex.Heuristic

        def counted(chain, budget, _full=full):
            inner = ((lambda s: exhaustive_bounds.heuristic_simple(chain, s)) if args.simple_bound
                     else _full(chain, budget))

            def h(state):
                pushed[0] += 1
                return inner(state)
            return h
        ex.Heuristic = counted
        try:
            t0 = time.perf_counter()
            _, makespan, _, bound, proven, stopped = ex.run_search(
                chain, b[kind], False, args.time_limit, "all", ex.DEFAULT_MAX_STATES)
            dt = time.perf_counter() - t0
        finally:
            ex.Heuristic = full
        row = {"L": L, "seed": seed, "budget_kind": kind, "budget": b[kind],
               "bound_kind": "simple" if args.simple_bound else "memory",
               "proven": makespan is not None, "makespan": makespan, "bound": bound,
               "stopped_by": stopped, "states_pushed": pushed[0], "seconds": round(dt, 2),
               "load_1min": os.getloadavg()[0]}
        runs.append(row)
        print(json.dumps(row), flush=True)
    return {"command": " ".join(["python", "benchmarks/bench_ilp.py"] + sys.argv[1:]),
            "time_limit": args.time_limit, "machine": machine(), "runs": runs}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sp = sub.add_parser("speed")
    sp.add_argument("--lengths", type=int, nargs="+", default=[10, 20, 30])
    sp.add_argument("--seeds", type=int, default=5)
    sp.add_argument("--budgets", nargs="+", default=["middle", "tight"])
    sp.add_argument("--mip-solvers", nargs="+", default=["highs", "cbc"])
    sp.add_argument("--passes", type=int, default=1)
    sp.add_argument("--proven", action="store_true",
                    help="the proven model (passes=None, exact over all schedules) instead of "
                         "--passes; each answer is also checked against exhaustive search")
    sp.add_argument("--family", default="random",
                    help="chain family of remat_theory.analysis.families (default random)")
    sp.add_argument("--certified", action="store_true",
                    help="the default exact mode: the weak DP's or the fast mode's schedule "
                         "proven optimal over all schedules by the moment relaxation, the "
                         "proven model only where the relaxation leaves a gap (proofs/ilp.md "
                         "section 9)")
    sp.add_argument("--pairs", action="store_true",
                    help="weakly increasing runs (the fast mode of proofs/ilp.md section 5)")
    sp.add_argument("--time-limit", type=float, default=120.0)
    sp.add_argument("--exhaustive-up-to", type=int, default=0, metavar="L",
                    help="also run exhaustive search (the optimum over all schedules) on chains "
                         "of up to L stages (--proven: at least 7), and refuse an answer it "
                         "contradicts")
    sp.add_argument("--exhaustive-time-limit", type=float, default=None,
                    help="seconds per exhaustive search (default: none)")
    sp.add_argument("--unsaved-outputs", type=float, default=None, metavar="SHARE",
                    help="make that share of the stage outputs unsaved (output_saved false; "
                         "families.with_unsaved_outputs); default: every output saved")
    sp.add_argument("--out", default=str(RESULTS / "ilp_speed.json"))
    lpp = sub.add_parser("lp")
    lpp.add_argument("--lengths", type=int, nargs="+", default=[5, 6, 7])
    lpp.add_argument("--seeds", type=int, default=3)
    lpp.add_argument("--budgets", nargs="+", default=["middle", "tight"])
    lpp.add_argument("--exhaustive-up-to", type=int, default=9)
    lpp.add_argument("--out", default=str(RESULTS / "ilp_lp_bound.json"))
    nf = sub.add_parser("normal-form")
    nf.add_argument("--minutes", type=float, default=10.0)
    nf.add_argument("--lengths", type=int, nargs="+", default=[2, 3, 4, 5, 6])
    nf.add_argument("--seed", type=int, default=0)
    nf.add_argument("--out", default=str(RESULTS / "ilp_normal_form.json"))
    mo = sub.add_parser("monotone")
    mo.add_argument("--minutes", type=float, default=10.0)
    mo.add_argument("--lengths", type=int, nargs="+", default=[2, 3, 4, 5, 6, 7])
    mo.add_argument("--seed", type=int, default=0)
    mo.add_argument("--workers", type=int, default=None)
    mo.add_argument("--no-fwd-overhead", action="store_true",
                    help="set every forward overhead to zero (the known misses all need one)")
    mo.add_argument("--out", default=str(RESULTS / "ilp_monotone.json"))
    pl = sub.add_parser("phase-local")
    pl.add_argument("--minutes", type=float, default=10.0)
    pl.add_argument("--lengths", type=int, nargs="+", default=[3, 4])
    pl.add_argument("--runs", type=int, default=2)
    pl.add_argument("--seed", type=int, default=0)
    pl.add_argument("--workers", type=int, default=None)
    pl.add_argument("--no-fwd-overhead", action="store_true",
                    help="set every forward overhead to zero")
    pl.add_argument("--out", default=str(RESULTS / "ilp_phase_local.json"))
    wk = sub.add_parser("walk")
    wk.add_argument("--minutes", type=float, default=10.0)
    wk.add_argument("--max-stages", type=int, default=6)
    wk.add_argument("--seed", type=int, default=0)
    wk.add_argument("--workers", type=int, default=None)
    wk.add_argument("--region", choices=sorted(WALK_REGIONS), default="weak-runs<=1",
                    help="stay among chains where this class misses the optimum")
    wk.add_argument("--lower-overhead", action="store_true",
                    help="never raise the total forward overhead, and often lower one")
    wk.add_argument("--out", default=str(RESULTS / "ilp_walk.json"))
    mb = sub.add_parser("min-budget")
    mb.add_argument("--lengths", type=int, nargs="+", default=[4, 5])
    mb.add_argument("--seeds", type=int, default=3)
    mb.add_argument("--mip-solver", default="highs")
    mb.add_argument("--time-limit", type=float, default=60.0)
    mb.add_argument("--out", default=str(RESULTS / "ilp_min_budget.json"))
    rx = sub.add_parser("relaxation")
    rx.add_argument("--minutes", type=float, default=10.0)
    rx.add_argument("--seed", type=int, default=1)
    rx.add_argument("--max-chains", type=int, default=None,
                    help="also stop after this many chains (the same sweep on every machine)")
    rx.add_argument("--out", default=str(RESULTS / "ilp_relaxation.json"))
    sd = sub.add_parser("small-dispatch")
    sd.add_argument("--chains", type=int, default=40)
    sd.add_argument("--lengths", type=int, nargs="+", default=[5, 6])
    sd.add_argument("--points", type=int, default=6)
    sd.add_argument("--seed", type=int, default=0)
    sd.add_argument("--max-overhead", type=int, default=40)
    sd.add_argument("--time-limit", type=float, default=None)
    sd.add_argument("--no-exhaustive-step", action="store_true",
                    help="the certified mode without its exhaustive-search step (before)")
    sd.add_argument("--out", default=str(RESULTS / "ilp_small_dispatch.json"))
    eb = sub.add_parser("exhaustive-bound")
    eb.add_argument("--lengths", type=int, nargs="+", default=[12, 15])
    eb.add_argument("--seeds", type=int, default=3)
    eb.add_argument("--budgets", nargs="+", default=["tight"])
    eb.add_argument("--time-limit", type=float, default=300.0)
    eb.add_argument("--simple-bound", action="store_true",
                    help="the A* bound without its memory term (before)")
    eb.add_argument("--out", default=str(RESULTS / "exhaustive_bound.json"))
    args = ap.parse_args(argv)
    result = {"exhaustive-bound": exhaustive_bound, "small-dispatch": small_dispatch, "speed": speed, "lp": lp, "min-budget": min_budget, "normal-form": normal_form, "monotone": monotone,
              "phase-local": phase_local, "walk": walk, "relaxation": relaxation}[args.cmd](args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
