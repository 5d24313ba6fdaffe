"""How often ``ilp-offload -o proven=true`` proves the optimum over ALL schedules.

On the instances of ``benchmarks/offload_dp_gap.py`` (the ``random`` family, copy times of
0.3, 1 and 3 mean forwards, with and without unsaved outputs, budgets from the smallest
feasible one to store-all's peak), it runs ``ilp-offload -o proven=true`` with a time
limit and counts the answers that say ``all+offload`` with ``exhaustive-offload``'s
optimum (O.5; any disagreement is an error).  ``proven`` takes as many positions as the
length bound of the incumbent's makespan: O.14's before the normal form
(``length_bound(..., normal_form=False)``, recorded as ``n_before``: the MILP was refused
past ``max_proven_ops`` and HiGHS did not finish at 26+ positions in 5 minutes on two
stages, proofs/offload.md O.14), O.21's now (``n_after``).  The "before" column counts the
instances whose old bound fit the old guard (16), an upper bound on what the old solver
certified (both bounds are taken at the same incumbent, now the best of dp-offload,
save-on-cpu and offload-all; before, dp-offload's alone).

Usage (the results file is ``benchmarks/results/offload_ilp_certified.json``):

    python benchmarks/offload_ilp_certified.py --stages 2 --seeds 10 --points 5 \
        --time-limit 30 --max-proven-ops 24 --out benchmarks/results/offload_ilp_certified.json
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib
import sys
import time

from solvers import registry
from solvers.offload.ilp import offload_incumbent
from solvers.offload.ilp_bounds import length_bound
from remat_theory.model.errors import SolverLimitError

_GAP = pathlib.Path(__file__).with_name("offload_dp_gap.py")
_spec = importlib.util.spec_from_file_location("offload_dp_gap", _GAP)
_gap = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_gap)

OLD_GUARD = 16  # max_proven_ops before this change


def run(stages, seeds, points, ratios, time_limit, guard) -> dict:
    rows = []
    for keys, chain, b in _gap.instances(stages, seeds, points, ratios):
        rows.append(one(keys, chain, b, time_limit, guard))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return {"rows": rows, "summary": summarize(rows)}


def one(keys, chain, b, time_limit, guard) -> dict:
    ex = registry.solve(chain, b, "exhaustive-offload")
    inc = offload_incumbent(chain, b)
    row = {**keys, "optimum": ex.makespan, "optimum_ops": len(ex.schedule),
           "incumbent": inc[1] if inc else None,
           "n_before": length_bound(chain, inc[1], normal_form=False) if inc else None,
           "n_after": length_bound(chain, inc[1]) if inc else None}
    row["before_within_guard"] = row["n_before"] is not None and row["n_before"] <= OLD_GUARD
    t0 = time.perf_counter()
    try:
        sol = registry.solve(chain, b, "ilp-offload", proven=True, time_limit=time_limit,
                             max_proven_ops=guard)
    except SolverLimitError as e:
        row.update(status="refused", certified=False, seconds=0.0, why=str(e)[:120])
        return row
    row["seconds"] = round(time.perf_counter() - t0, 2)
    row["status"] = sol.status
    row["certified"] = sol.status == "optimal" and sol.optimal_for == "all+offload"
    if row["certified"] and abs(sol.makespan - ex.makespan) > 1e-9 * max(1.0, ex.makespan):
        raise AssertionError(f"ilp-offload proved {sol.makespan}, exhaustive-offload "
                             f"{ex.makespan}: {row}")
    row["bound"] = sol.bound
    return row


def summarize(rows) -> dict:
    def part(rs):
        cert = [r for r in rs if r["certified"]]
        return {"instances": len(rs),
                "certified_after": len(cert),
                "old_bound_within_guard_before": sum(r["before_within_guard"] for r in rs),
                "refused_after": sum(r["status"] == "refused" for r in rs),
                "time_limit_after": sum(r["status"] == "time_limit" for r in rs),
                "median_n_before": _median([r["n_before"] for r in rs]),
                "median_n_after": _median([r["n_after"] for r in rs]),
                "median_optimum_ops": _median([r["optimum_ops"] for r in rs]),
                "median_seconds_certified": _median([r["seconds"] for r in cert]),
                "max_seconds_certified": max([r["seconds"] for r in cert], default=None)}

    out = {"all": part(rows)}
    for ratio in sorted({r["ratio"] for r in rows}):
        out[f"ratio {ratio:g}"] = part([r for r in rows if r["ratio"] == ratio])
    for L in sorted({r["stages"] for r in rows}):
        out[f"{L} stages"] = part([r for r in rows if r["stages"] == L])
    return out


def _median(xs):
    xs = sorted(x for x in xs if x is not None)
    return xs[len(xs) // 2] if xs else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stages", type=int, nargs="+", default=[2])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--points", type=int, default=5)
    ap.add_argument("--ratios", default="0.3,1,3")
    ap.add_argument("--time-limit", type=float, default=30.0)
    ap.add_argument("--max-proven-ops", type=int, default=24)
    ap.add_argument("--out", default=None)
    ap.add_argument("--rows-from", default=None, metavar="JSONL",
                    help="summarize the rows a run printed on stderr (one JSON object a "
                         "line, e.g. an interrupted run's) instead of solving")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    if a.rows_from:
        with open(a.rows_from) as f:
            rows = [json.loads(line) for line in f if line.startswith("{")]
        res = {"rows": rows, "summary": summarize(rows)}
    else:
        res = run(a.stages, a.seeds, a.points, [float(x) for x in a.ratios.split(",")],
                  a.time_limit, a.max_proven_ops)
    res["command"] = ("python benchmarks/offload_ilp_certified.py --stages "
                      + " ".join(map(str, a.stages)) + f" --seeds {a.seeds} --points "
                      f"{a.points} --ratios {a.ratios} --time-limit {a.time_limit:g} "
                      f"--max-proven-ops {a.max_proven_ops}"
                      + (f" --out {a.out}" if a.out else ""))
    res["seconds"] = round(time.perf_counter() - t0, 1)
    res["note"] = ("one run on a shared 2-core machine (times are indicative); "
                   "'old_bound_within_guard_before' is an upper bound on what proven=true "
                   "certified before the normal form (O.14's bound at most 16 positions)")
    return _gap.write_results(res, a.out)


if __name__ == "__main__":
    sys.exit(main())
