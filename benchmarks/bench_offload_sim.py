"""The two-stream simulator's cost in the schedule's length, before and after it was made
linear (measured figures, not tests).

``before`` is the first implementation, kept as the tests' oracle
(tests/_offload_sim_reference.py: immutable states stepped op by op, the times by value
copied as tuples at every op, the leaving bytes and each step's description found by a
scan of the chain); ``after`` is ``remat_theory.model.offload.simulate_offload``.  Both
run in this one process, interleaved (after, before, after, before, ...), and each figure
is the smallest CPU time (``time.process_time``: the steadier figure on a shared machine)
of the repeats; speed is reported as ratios.

1. ``replay``: each schedule of a homogeneous chain (fwd 1, bwd 2, x 3, tape 5, bandwidth
   5) replayed by ``simulate_offload``: ``save-on-cpu`` and ``offload-all`` (the
   baselines' schedules), ``chen-sqrt`` (a remat-only schedule, solved on the chain without
   bandwidth, replayed on the chain with it: the same path) at every length, ``dp-offload``
   (at a third of store-all's memory) where it solves in seconds (100 stages).  ``before``
   runs up to ``--before-max`` stages (quadratic: minutes beyond).  Per row: ops, seconds,
   ``speedup`` (before / after) and ``after_us_per_op``; ``per_op_vs_first``: after's time
   per op over its time per op at the smallest length (1 when linear).
2. ``solvers``: a solve with the reference stepping or replaying in place of the package's
   (``exhaustive-offload`` steps the engine per candidate and keys its dominance on
   ``OffloadState.times``, whose first version is patched in too; ``dp-offload`` and the
   baselines replay their answer, and the registry replays it): speedup of the whole
   solve.  "before" replays the baselines' answers with the reference but once, as the
   package now does (they replayed it twice, the registry again): the speedup shown is
   the replay's alone.

    python benchmarks/bench_offload_sim.py --lengths 100,1000,10000,100000 \\
        --out benchmarks/results/offload_sim_speed.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import solvers  # noqa: E402
import solvers.offload.exhaustive as offload_exhaustive  # noqa: E402
from remat_theory.model import fast_replay, offload  # noqa: E402
from remat_theory.model.chain import Chain  # noqa: E402
from remat_theory.model.simulator import check_budget, register_two_stream  # noqa: E402
from solvers.offload.baselines import offload_all_schedule  # noqa: E402

from _offload_sim_reference import (reference_simulate_offload, step as reference_step,  # noqa: E402
                                    times as reference_times)


def reference_result(chain, schedule, budget=None, allow_drop=False, check=None, profile=True):
    """The reference's answer as the package's result type (what the solvers read; it
    checks no deadline and always makes its profile)."""
    makespan, peak, rows = reference_simulate_offload(chain, schedule, budget, allow_drop)
    return offload.OffloadSimulationResult(makespan=makespan, peak_memory=peak,
                                           profile=tuple(rows), budget=check_budget(budget))


def chain_of(L: int, bandwidth: float | None = 5.0) -> Chain:
    c = Chain.homogeneous(L, fwd_time=1.0, bwd_time=2.0, x_size=3, tape_size=5)
    return c if bandwidth is None else c.replace(bandwidth=bandwidth)


def cpu(fn) -> tuple:
    t = time.process_time()
    out = fn()
    return time.process_time() - t, out


def interleaved(runs: dict, repeats: int, budget_s: float) -> dict:
    """The smallest CPU time of each run, taken in turn; fewer repeats once a round takes
    more than ``budget_s`` seconds."""
    best = {k: float("inf") for k in runs}
    outs = {}
    for r in range(repeats):
        spent = 0.0
        for k, fn in runs.items():
            t, outs[k] = cpu(fn)
            best[k] = min(best[k], t)
            spent += t
        if spent > budget_s:
            break
    return {"seconds": best, "outputs": outs, "repeats": r + 1}


def schedules(L: int):
    chain = chain_of(L)
    yield "save-on-cpu", offload_all_schedule(chain, 0)
    yield "offload-all", offload_all_schedule(chain, 1)
    plain = chain_of(L, None)
    yield "chen-sqrt (remat only)", solvers.solve(plain, plain.store_all_memory(),
                                                  "chen-sqrt").schedule
    if L <= 100:
        sol = solvers.solve(chain, chain.store_all_memory() // 3, "dp-offload")
        yield "dp-offload", sol.schedule


def replay_rows(lengths, before_max, repeats, budget_s):
    rows = []
    first_per_op = {}
    for L in lengths:
        chain = chain_of(L)
        for name, sched in schedules(L):
            runs = {"after": lambda: offload.simulate_offload(chain, sched)}
            if L <= before_max:
                runs["before"] = lambda: reference_result(chain, sched)
            m = interleaved(runs, repeats, budget_s)
            after = m["outputs"]["after"]
            if "before" in runs:  # the same answer (the tests check every row)
                b = m["outputs"]["before"]
                assert (after.makespan, after.peak_memory) == (b.makespan, b.peak_memory)
            n = len(sched)
            per_op = m["seconds"]["after"] / n
            first_per_op.setdefault(name, per_op)
            row = {"schedule": name, "L": L, "ops": n, "makespan": after.makespan,
                   "peak": after.peak_memory, "repeats": m["repeats"],
                   "after_s": round(m["seconds"]["after"], 4),
                   "before_s": round(m["seconds"]["before"], 4) if "before" in runs else None,
                   "speedup": (round(m["seconds"]["before"] / m["seconds"]["after"], 1)
                               if "before" in runs else None),
                   "after_us_per_op": round(per_op * 1e6, 2),
                   "per_op_vs_first": round(per_op / first_per_op[name], 2)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def solver_rows(repeats, budget_s):
    """Whole solves with the reference engine patched in, against the package's."""
    cases = []
    for L, frac in ((4, 0.7), (4, 0.85), (5, 0.7)):
        c = chain_of(L)
        cases.append(("exhaustive-offload", c, int(c.store_all_memory() * frac),
                      {"max_stages": 5}))
    for L in (40, 80):
        c = chain_of(L)
        cases.append(("dp-offload", c, c.store_all_memory() // 3, {}))
    for L in (300, 1000):
        c = chain_of(L)
        cases.append(("save-on-cpu", c, c.store_all_memory(), {}))
    rows = []
    new_times = offload.OffloadState.times
    for name, chain, budget, opts in cases:
        def new():
            return solvers.solve(chain, budget, name, **opts)

        def old():
            offload_exhaustive.step = reference_step
            offload.OffloadState.times = reference_times
            register_two_stream(reference_result)
            fast_replay.simulate_offload = reference_result
            try:
                return solvers.solve(chain, budget, name, **opts)
            finally:
                offload_exhaustive.step = offload.step
                offload.OffloadState.times = new_times
                register_two_stream(offload.simulate_offload)
                fast_replay.simulate_offload = offload.simulate_offload

        m = interleaved({"after": new, "before": old}, repeats, budget_s)
        a, b = m["outputs"]["after"], m["outputs"]["before"]
        assert (a.status, a.makespan, a.peak_memory) == (b.status, b.makespan, b.peak_memory)
        row = {"solver": name, "L": chain.length, "budget": budget, "status": a.status,
               "makespan": a.makespan, "repeats": m["repeats"],
               "after_s": round(m["seconds"]["after"], 4),
               "before_s": round(m["seconds"]["before"], 4),
               "speedup": round(m["seconds"]["before"] / m["seconds"]["after"], 2)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lengths", default="100,1000,10000,100000")
    p.add_argument("--before-max", type=int, default=1000,
                   help="longest chain the quadratic reference replays")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--round-budget", type=float, default=20.0,
                   help="no further repeat once a round took this many CPU seconds")
    p.add_argument("--parts", default="replay,solvers")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    parts = args.parts.split(",")
    lengths = [int(v) for v in args.lengths.split(",")]
    doc = {"command": "python benchmarks/bench_offload_sim.py " + " ".join(
               argv if argv is not None else sys.argv[1:]),
           "chain": "Chain.homogeneous(L, fwd_time=1.0, bwd_time=2.0, x_size=3, tape_size=5)"
                    ".replace(bandwidth=5.0)",
           "time": "CPU seconds (time.process_time), the smallest of the interleaved repeats",
           "python": platform.python_version(), "cpu_count": os.cpu_count(),
           "load_average_at_start": os.getloadavg()}
    if "replay" in parts:
        doc["replay"] = replay_rows(lengths, args.before_max, args.repeats, args.round_budget)
    if "solvers" in parts:
        doc["solvers"] = solver_rows(args.repeats, args.round_budget)
    doc["load_average_at_end"] = os.getloadavg()
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
