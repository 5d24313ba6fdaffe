"""The two-run question (issue 40, item 2): do two weakly increasing runs of forward
operations per phase always contain an optimal schedule?

Earlier walks (``bench_ilp.py walk``) moved only the six classic fields.  This walk stays
among the chains where **one** run misses the optimum (the region a counterexample to two
runs would have to be near: its second run must be needed) and moves *every* optional field
as well: ``fall_time``, ``fall_overhead`` and ``output_saved``, so recording costs and
unsaved outputs, which the one-run refutations of claim 4 needed, are explored together.
Each chain visited is compared whole (``bench_ilp.chain_misses``: exhaustive search against
exhaustive search restricted to the class, at the smallest feasible budget and at every
breakpoint of the unrestricted optimum, so at every budget).

    python benchmarks/bench_two_runs.py --minutes 20 --max-stages 6 --seed 7 \
        --out benchmarks/results/two_runs_walk_fields.json

A chain where two runs miss is written to ``--out`` under ``"two_run_misses"`` (chain,
budget, both values): that would refute the conjecture.  proofs/two_runs.md reports what
ran.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_ilp import CERTIFICATES, chain_misses, machine, mutate  # noqa: E402
from remat_theory.model.chain import Chain  # noqa: E402

CLASSES = ("weak-runs<=1", "weak-runs<=2")
STARTS = ("ilp_weak_run_*.json", "ilp_one_run_fall_overhead.json", "ilp_fall_tail_refuted.json")


def starts() -> list:
    """The chains of the certificates where one run (or a run plus Falls) misses."""
    from remat_theory.analysis.certificates import load
    out = []
    for pattern in STARTS:
        out += [load(f).chain for f in sorted(CERTIFICATES.glob(pattern))]
    return out


def mutate_fields(chain: Chain, r: random.Random, max_stages: int) -> Chain:
    """A neighbour of ``chain``: :func:`bench_ilp.mutate` (classic fields, stages inserted or
    deleted), then with probability 1/2 one recording cost moved by 1 or 2 or one output's
    ``output_saved`` flipped."""
    d = chain.to_dict()
    fall_t = list(chain.fall_time)
    fall_o = list(chain.fall_overhead)
    saved = [chain.saved(i + 1) for i in range(chain.length)]
    new = mutate(chain, r, max_stages)
    if new.length != chain.length:  # a stage went or came: keep the optional fields simple
        return new
    d = new.to_dict()
    d["fall_time"], d["fall_overhead"], d["output_saved"] = fall_t, fall_o, saved
    if r.random() < 0.5:
        i = r.randrange(chain.length)
        k = r.choice(("fall_time", "fall_overhead", "output_saved"))
        if k == "output_saved":
            d[k][i] = not d[k][i]
        else:
            d[k][i] = max(0, d[k][i] + r.choice([-2, -1, 1, 2]))
    return Chain.from_dict(d)


def run(seed: int, seconds: float, max_stages: int, max_visits: int | None = None) -> dict:
    r = random.Random(seed)
    seeds = [c for c in starts() if c.length <= max_stages]
    t0 = time.perf_counter()
    cur, chain = None, r.choice(seeds)
    visited = region = breakpoints = 0
    by_length: dict = {}
    fields_seen = {"fall_costs": 0, "unsaved_outputs": 0}
    two_run_misses = []
    while time.perf_counter() - t0 < seconds and (max_visits is None or visited < max_visits):
        if cur is not None:
            chain = mutate_fields(cur, r, max_stages)
        bps, found = chain_misses(chain, CLASSES)
        visited += 1
        breakpoints += bps
        if found["weak-runs<=2"]:
            two_run_misses += found["weak-runs<=2"][:1]
        if found["weak-runs<=1"]:
            region += 1
            by_length[chain.length] = by_length.get(chain.length, 0) + 1
            fields_seen["fall_costs"] += bool(chain.has_fall_costs)
            fields_seen["unsaved_outputs"] += bool(chain.has_unsaved_outputs)
            cur = chain
        elif cur is None or r.random() < 0.05:
            cur = r.choice(seeds)
    return {"visited": visited, "region": region, "breakpoints": breakpoints,
            "region_by_length": dict(sorted(by_length.items())),
            "region_with": fields_seen, "two_run_misses": two_run_misses}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--max-stages", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--search", action="store_true",
                    help="the local search of remat_theory.analysis.two_runs_search (drawn "
                         "and skewed chains, times up to --max-time) instead of the walk")
    ap.add_argument("--min-stages", type=int, default=3)
    ap.add_argument("--max-time", type=int, default=40)
    ap.add_argument("--max-size", type=int, default=12)
    ap.add_argument("--steps", type=int, default=40, help="--search: moves per restart")
    ap.add_argument("--from-certificates", action="store_true",
                    help="--search: start the first restarts from the one-run refutations")
    ap.add_argument("--runs", type=int, default=2,
                    help="--search: the class compared is weak-runs<=RUNS (guide: RUNS-1)")
    ap.add_argument("--all-saved", action="store_true",
                    help="--search: every output saved (no unsaved outputs drawn or moved)")
    ap.add_argument("--start", nargs="*", default=[],
                    help="--search: certificate files whose chains start the first restarts")
    ap.add_argument("--family", choices=("any", "saved", "no-fall-costs", "classic"),
                    help="draw the counterexample's family (two_runs_search.family_sweep) "
                         "with --max-stages stages, smallest budgets only")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    if a.family:
        from remat_theory.analysis.two_runs_search import family_sweep
        res = family_sweep(a.seed, 60 * a.minutes, a.max_stages, a.family, a.runs)
    elif a.search:
        from remat_theory.analysis.two_runs_search import TwoRunsConfig, walk
        from remat_theory.analysis.certificates import load
        cfg = TwoRunsConfig(min_stages=a.min_stages, max_stages=a.max_stages,
                            max_time=a.max_time, max_size=a.max_size, runs=a.runs,
                            all_saved=a.all_saved)
        first = ([c for c in starts() if c.length <= a.max_stages] * 3
                 if a.from_certificates else [])
        first += [load(f).chain for f in a.start] * 5
        res = walk(cfg, a.seed, 60 * a.minutes, a.steps, starts=first)
    else:
        res = run(a.seed, 60 * a.minutes, a.max_stages)
    res.update(command=" ".join(["python", "benchmarks/bench_two_runs.py"] + sys.argv[1:]),
               machine=machine(), wall_seconds=round(time.perf_counter() - t0, 1),
               note=("family: chains drawn from the counterexample's family, smallest "
                     "feasible budgets only; guide_misses: where weak-runs<=RUNS-1 misses; "
                     "misses: where weak-runs<=RUNS misses" if a.family else
                     "search: drawn and skewed chains walked by local search; one_run_misses: "
                     "chains where weak-runs<=RUNS-1 misses; two_run_misses: chains where "
                     "weak-runs<=RUNS misses" if a.search else None) or "visited: chains compared whole with exhaustive search at every "
                    "breakpoint; region: those where one weakly increasing run per phase "
                    "misses (the walk stays among them); region_with: how many of those have "
                    "recording costs / unsaved outputs; two_run_misses: counterexamples to "
                    "the two-run conjecture (none is none found)")
    text = json.dumps(res, indent=1)
    if a.out:
        Path(a.out).write_text(text + "\n")
    print(json.dumps({k: v for k, v in res.items() if k != "machine"}))


if __name__ == "__main__":
    main()
