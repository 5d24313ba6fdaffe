"""Where the class DP ``dp-offload`` is and is not optimal in the two-stream model.

On small random chains with a copy channel (the ``random`` family, 2-3 stages, some with
unsaved outputs), at budgets from the smallest feasible one (exact, O.3) to store-all's
peak and at several channel speeds, it compares ``dp-offload`` (the optimum of the class
``persistent+offload``, O.10) with ``exhaustive-offload`` (the optimum over every schedule,
O.5).  Where they differ, no optimal schedule is in the class, and the optimal schedule
found is described by the moves the class grammar has no word for (proofs/offload.md
O.11 (d)):

- ``eviction``: a value offloaded and never fetched back (recomputed instead, or not
  needed again); the class has one shape of it (O.18), so a gap with it uses another;
- ``early prefetch``: a prefetch issued two or more compute ops before the next one that
  reads the value (the class has one op ahead: its copy overlaps a child's last op);
- ``late offload``: an offload issued two or more compute ops after the last one that read
  or made the value (the class has one op late: its copy overlaps the child's first op);
- ``other``: none of these (the class's other limits: which values move, and when).

Reads are the referee's: a forward of stage i reads x_i (plain, or in t_i when x_i is
saved), B_i reads t_{i+1} and x_i when saved, the loss x_L; so the tape of an unsaved
output is read by its backward only.  The labels name moves of the extended class of
issue 30 (O.16, O.18); the figures before it (O.11 (d)) used coarser ones (any offload after a
non-reading op, any prefetch before one, any move of an unsaved output's tape).  Rerun
``--redescribe`` on a results file to relabel its rows without solving.

An instance may have several.  Usage (the results file it writes is
``benchmarks/results/offload_dp_gap.json``):

    python benchmarks/offload_dp_gap.py --stages 2 3 --seeds 10 --points 5 \
        --ratios 0.3,1,3 --out benchmarks/results/offload_dp_gap.json
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time

from remat_theory.analysis import families
from solvers import registry
from solvers.offload.exhaustive import min_feasible_budget


def with_channel(chain, ratio: float, unsaved_seed: int | None):
    """The chain with a bandwidth at which its mean tape copies in ``ratio`` times its mean
    forward; with ``unsaved_seed``, some outputs unsaved (drawn from it)."""
    L = chain.length
    fwd = max(sum(chain.fwd_time) / L, 1e-9)
    chain = chain.replace(bandwidth=sum(chain.tape_size) / L / (ratio * fwd))
    if unsaved_seed is not None:
        r = random.Random(unsaved_seed)
        chain = chain.replace(output_saved=[r.random() < 0.5 for _ in range(L)])
    return chain


def features(chain, schedule) -> list:
    """The moves of ``schedule`` the class grammar has no word for (module docstring)."""
    ops = list(schedule)
    out = set()
    for k, op in enumerate(ops):
        if op.kind == "Off":
            v = (op.target, op.index)
            if not any(o.kind == "Pre" and (o.target, o.index) == v for o in ops[k + 1:]):
                out.add("eviction")
            between = 0  # compute ops since the last one that read or made v
            for o in reversed(ops[:k]):
                if o.kind == "Pre" and (o.target, o.index) == v:
                    break
                if not o.is_transfer:
                    if v in _touches(chain, o):
                        break
                    between += 1
            if between >= 2:
                out.add("late offload")
        if op.kind == "Pre":
            ahead = 0  # compute ops before the next one that reads v
            for o in ops[k + 1:]:
                if not o.is_transfer:
                    if (op.target, op.index) in _touches(chain, o):
                        break
                    ahead += 1
            if ahead >= 2:
                out.add("early prefetch")
    return sorted(out) or ["other"]


def _touches(chain, op) -> set:
    """The values (target, index) compute op ``op`` reads or makes: a forward of stage i
    reads x_i (plain, or in t_i when x_i is saved) and makes x_{i+1} (Fn, Fck) or t_{i+1}
    and, when that output is unsaved, a plain x_{i+1} (Fall); B_i reads t_{i+1} and x_i
    when saved; the loss reads x_L."""
    def saved(i):
        return chain.saved(i)

    if op.kind == "Loss":
        i = chain.length
        return {("x", i)} | ({("t", i)} if saved(i) else set())
    i = op.index
    reads = {("x", i)} | ({("t", i)} if i >= 1 and saved(i) else set())
    if op.kind == "B":
        return ({("t", i + 1)} | reads) if saved(i) or i == 0 else {("t", i + 1)}
    if op.kind == "Fall":
        return reads | {("t", i + 1), ("x", i + 1)}
    return reads | {("x", i + 1)}


def instances(stages, seeds, points, ratios):
    """The grid both offload benchmarks measure: random chains of each length and seed, each
    copy-time ratio, every output saved or some unsaved, ``points`` budgets from the
    smallest feasible to store-all. Yields (row keys, chain, budget)."""
    for L in stages:
        for seed in range(seeds):
            base = families.make("random", L, seed)
            for ratio in ratios:
                for unsaved in (None, seed):
                    chain = with_channel(base, ratio, unsaved)
                    lo, hi = min_feasible_budget(chain), chain.store_all_memory()
                    budgets = sorted({lo + k * (hi - lo) // max(points - 1, 1)
                                      for k in range(points)})
                    for b in budgets:
                        yield ({"stages": L, "seed": seed, "ratio": ratio,
                                "unsaved_outputs": unsaved is not None, "budget": b,
                                "budget_frac": (b - lo) / (hi - lo) if hi > lo else 1.0},
                               chain, b)


def run(stages, seeds, points, ratios) -> dict:
    rows = []
    for keys, chain, b in instances(stages, seeds, points, ratios):
        ex = registry.solve(chain, b, "exhaustive-offload")
        dp = registry.solve(chain, b, "dp-offload")
        assert ex.status == "optimal", (chain, b, ex.status)
        row = {**keys, "optimum": ex.makespan,
               "dp_offload": dp.makespan if dp.schedule is not None else None}
        gap = row["dp_offload"] is None or dp.makespan > ex.makespan * (1 + 1e-9)
        row["dp_optimal"] = not gap
        if gap:
            row["optimal_schedule"] = str(ex.schedule)
            row["features"] = features(chain, ex.schedule)
        rows.append(row)
    return {"rows": rows, "summary": summarize(rows)}


def summarize(rows) -> dict:
    def part(rs):
        gaps = [r for r in rs if not r["dp_optimal"]]
        feats: dict = {}
        for r in gaps:
            for f in r["features"]:
                feats[f] = feats.get(f, 0) + 1
        ratios = [r["dp_offload"] / r["optimum"] for r in gaps
                  if r["dp_offload"] is not None and r["optimum"] > 0]
        return {"instances": len(rs), "dp_optimal": len(rs) - len(gaps),
                "dp_infeasible_where_a_schedule_fits": sum(r["dp_offload"] is None for r in gaps),
                "gap_features": feats,
                "worst_ratio": max(ratios, default=1.0)}

    out = {"all": part(rows)}
    for key, test in (("all outputs saved", lambda r: not r["unsaved_outputs"]),
                      ("some outputs unsaved", lambda r: r["unsaved_outputs"]),
                      ("smallest feasible budget", lambda r: r["budget_frac"] == 0),
                      ("middle budgets", lambda r: 0 < r["budget_frac"] < 1),
                      ("store-all budget", lambda r: r["budget_frac"] == 1)):
        out[key] = part([r for r in rows if test(r)])
    return out


def rebuild(row):
    """The chain of a results row (from its family seed, ratio and unsaved flag)."""
    return with_channel(families.make("random", row["stages"], row["seed"]), row["ratio"],
                        row["seed"] if row["unsaved_outputs"] else None)


def redescribe(path) -> int:
    from remat_theory.model.schedule import Schedule

    with open(path) as f:
        res = json.load(f)
    for r in res["rows"]:
        if not r["dp_optimal"]:
            r["features"] = features(rebuild(r), Schedule.parse(r["optimal_schedule"]))
    res["summary"] = summarize(res["rows"])
    with open(path, "w") as f:
        f.write(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res["summary"], indent=1))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stages", type=int, nargs="+", default=[2, 3])
    ap.add_argument("--seeds", type=int, default=12)
    ap.add_argument("--points", type=int, default=5)
    ap.add_argument("--ratios", default="0.3,1,3")
    ap.add_argument("--out", default=None)
    ap.add_argument("--redescribe", default=None, metavar="JSON",
                    help="recompute the features and summary of a results file from its "
                         "stored schedules (no solving), in place")
    a = ap.parse_args(argv)
    if a.redescribe:
        return redescribe(a.redescribe)
    t0 = time.perf_counter()
    res = run(a.stages, a.seeds, a.points, [float(x) for x in a.ratios.split(",")])
    res["command"] = ("python benchmarks/offload_dp_gap.py --stages "
                      + " ".join(map(str, a.stages)) + f" --seeds {a.seeds} --points "
                      f"{a.points} --ratios {a.ratios}"
                      + (f" --out {a.out}" if a.out else ""))
    res["seconds"] = round(time.perf_counter() - t0, 1)
    return write_results(res, a.out)


def write_results(res: dict, out: str | None) -> int:
    """Both offload sweeps' ending: the whole results file to ``out`` (when given), the
    command and summary to stdout."""
    if out:
        with open(out, "w") as f:
            f.write(json.dumps(res, indent=1) + "\n")
    print(json.dumps({"command": res["command"], "summary": res["summary"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
