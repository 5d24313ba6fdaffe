"""How well do profiled stage times predict whole training steps on a GPU?  An A/B of the
profiler's two ways of timing a stage on CUDA (see ``remat_theory.torch.profiling.profiler._Timer``):

* ``idle``: the stage is timed from an idle GPU (``queue_kernels=False``), so the time the
  CPU takes to issue its first kernels is counted;
* ``queued``: the stage's kernels are queued behind a GPU sleep first (the default), as
  they are in a step, where the CPU runs ahead of the GPU.

Each network is profiled twice each way (in the order idle, queued, idle, queued) in one
process; then schedules (store-all, the DP at 30/50/80% of store-all, recompute-all) are
executed, and their measured step time (median of 3 after a warm-up) is divided by the
makespan the simulator predicts from each profile.

    python benchmarks/gpu_timer_ab.py                      # cuda, large networks
    python benchmarks/gpu_timer_ab.py --device cpu --scale test --models mlp,rnn

Writes ``benchmarks/results/gpu_timer_ab.json`` (``--out``).  On the CPU both ways are the
same timer, so there it only checks that the script runs.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

import solvers
from remat_theory.model.simulator import simulate
from remat_theory.torch import split_stages
from remat_theory.lab.networks import build
from remat_theory.torch.run.executor import ScheduleExecutor
from remat_theory.torch.profiling.profiler import profile_details
from remat_theory.torch.plan.rounding import auto_unit, rounded_chain

VARIANTS = (("idle", False), ("queued", True), ("idle2", False), ("queued2", True))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--scale", default="large")
    ap.add_argument("--models", default="mlp,resnet,transformer,rnn")
    ap.add_argument("--out", default="benchmarks/results/gpu_timer_ab.json")
    args = ap.parse_args(argv)
    dev = torch.device(args.device)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    records, t_start = [], time.time()
    for name in args.models.split(","):
        net = build(name, args.scale).to(dev)
        stages = split_stages(net.model)
        x0, loss_fn = net.example_input, net.loss_fn
        chains = {}
        for variant, queued in VARIANTS:
            chains[variant] = profile_details(stages, x0, loss_fn, dev, repeats=3,
                                              queue_kernels=queued).chain
            print(f"{name} profile {variant}: ideal makespan {chains[variant].ideal_makespan():.5f} s",
                  flush=True)
        chain = chains["queued"]
        rounded, store_all = rounded_chain(chain, auto_unit(chain)), chain.store_all_memory()
        jobs = [("store-all", store_all)] + [("dp", int(f * store_all)) for f in (0.3, 0.5, 0.8)]
        jobs.append(("recompute-all", store_all))
        for sname, budget in jobs:
            sol = solvers.solve(rounded if solvers.get(sname).exact else chain, budget, sname)
            if sol.schedule is None:
                print(f"{name} {sname} at {budget / store_all:.0%}: {sol.status}", flush=True)
                continue
            times = []
            for _ in range(4):
                sync()
                t0 = time.perf_counter()
                ScheduleExecutor(stages, loss_fn, x0, output_saved=chain.output_saved).run(sol.schedule)
                sync()
                times.append(time.perf_counter() - t0)
            measured = statistics.median(times[1:])
            rec = {"model": name, "solver": sname, "budget_fraction": budget / store_all,
                   "measured": measured, "ops": len(sol.schedule)}
            for variant, c in chains.items():
                rec["pred_" + variant] = simulate(c, sol.schedule).makespan
                rec["ratio_" + variant] = measured / rec["pred_" + variant]
            records.append(rec)
            print(f"{name:12} {sname:14} {budget / store_all:4.0%} measured {measured:.5f} s  "
                  + "  ".join(f"{v} {rec['ratio_' + v]:.3f}" for v in chains), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(records, indent=1) + "\n")
    print(f"total {time.time() - t_start:.0f} s; measured / predicted: " + ", ".join(
        f"{v} {min(r['ratio_' + v] for r in records):.3f}-{max(r['ratio_' + v] for r in records):.3f}"
        for v, _ in VARIANTS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
