"""Rerun, with a longer limit, the instances of ``offload_exact_depth.py``'s results that its
limit left unproven (issue 41: proofs within 10 minutes each).  Each unproven row's chain is
rebuilt from its seed (the same ``chain_of``) and given ``exhaustive-offload`` (exact over
every schedule) for ``--limit`` seconds; an answer is replayed by the registry's referee.

    python -m benchmarks.offload_exact_depth_rerun --stages 8 6 --limit 170 \\
        --out benchmarks/results/offload_exact_depth_rerun.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from benchmarks.offload_dp_gap_referee import chain_of
from benchmarks.offload_exact_depth import _row
from solvers import registry


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", default="benchmarks/results/offload_exact_depth.json")
    ap.add_argument("--stages", type=int, nargs="+", default=[6, 8])
    ap.add_argument("--limit", type=float, default=180.0)
    ap.add_argument("--max-states", type=int, default=None,
                    help="exhaustive-offload's state cap (default: its own, 1,000,000)")
    ap.add_argument("--only", nargs="*", default=None,
                    help="rows to rerun as STAGES:SEED:BUDGET (default: every unproven one)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    base = json.load(open(a.results))
    rows = []
    for r in base["rows"]:
        if r["proved"] or r["stages"] not in a.stages:
            continue
        if a.only is not None and f"{r['stages']}:{r['seed']}:{r['budget']}" not in a.only:
            continue
        chain = chain_of(r["stages"], r["seed"], r["unsaved_outputs"])
        t = time.perf_counter()
        caps = {} if a.max_states is None else {"max_states": a.max_states}
        ex = registry.solve(chain, r["budget"], "exhaustive-offload", max_stages=r["stages"],
                            time_limit=a.limit, **caps)
        row = {k: r[k] for k in ("stages", "seed", "budget", "budget_frac", "dp_offload")}
        row["exhaustive"] = _row(ex, time.perf_counter() - t)
        row["proved"] = ex.status == "optimal" and ex.optimal_for == "all+offload"
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    total = {L: sum(1 for r in base["rows"] if r["stages"] == L) for L in a.stages}
    before = {L: sum(r["proved"] for r in base["rows"] if r["stages"] == L) for L in a.stages}
    now = {L: before[L] + sum(r["proved"] for r in rows if r["stages"] == L) for L in a.stages}
    res = {"rows": rows, "limit": a.limit,
           "summary": {f"{L} stages": {"instances": total[L], "proved_at_first_limit": before[L],
                                       "proved_with_rerun": now[L]} for L in a.stages},
           "command": "python benchmarks/offload_exact_depth_rerun.py --stages "
                      + " ".join(map(str, a.stages)) + f" --limit {a.limit:g}"
                      + (f" --max-states {a.max_states}" if a.max_states else "")
                      + (" --only " + " ".join(a.only) if a.only else "")
                      + (f" --out {a.out}" if a.out else "")}
    if a.out:
        with open(a.out, "w") as f:
            f.write(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res["summary"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
