"""What the captured stages cost with nothing recomputed: the original model's training step
against the same step through the stages the drop-in runs (store-all: plain autograd over
the captured stages, the drop-in's path at budget 1.0), and the forward alone (no grad),
interleaved rounds in one process, one torch thread, per-round ratios of the timing thread's
CPU time (median and quartiles); then one step of each under torch.profiler: the aten
calls the stages run that the original model does not (what a seam adds).

Every eager remat point pays this cost on top of its recomputation, so it is where remat's
time goes at HF's or checkpoint_sequential's memory when the schedules recompute alike.
Usage:
    python benchmarks/frontier_capture_cost.py [--rounds 31] [NETWORK ...]   (default gpt2)
Prints one line per network."""
from __future__ import annotations

import argparse
import collections
import random
import statistics
import sys
import time

import torch

from remat_theory.lab.frontier_networks import build_workload


def _quartiles(v: list) -> tuple:
    q = statistics.quantiles(v, n=4)
    return q[0], statistics.median(v), q[2]


def run(name: str, rounds: int, scale: str) -> str:
    w = build_workload(name, scale)
    x = w.example_input
    params = [p for p in w.model.parameters() if p.requires_grad]

    def stages_out():
        y = x
        for s in w.stages:
            y = s(y)
        return y

    def plain():
        w.loss_fn(w.call(w.model)).backward()

    def stages():
        w.loss_fn(stages_out()).backward()

    def plain_fwd():
        with torch.no_grad():
            w.call(w.model)

    def stages_fwd():
        with torch.no_grad():
            stages_out()

    fns = {"plain": plain, "stages": stages, "plain_fwd": plain_fwd, "stages_fwd": stages_fwd}
    for f in fns.values():
        f()
    times = {k: [] for k in fns}
    rng = random.Random(0)
    for _ in range(rounds):
        order = list(fns)
        rng.shuffle(order)
        for k in order:
            for p in params:
                p.grad = None
            c = time.thread_time()
            fns[k]()
            times[k].append(time.thread_time() - c)
    step = _quartiles([a / b for a, b in zip(times["stages"], times["plain"])])
    fwd = _quartiles([a / b for a, b in zip(times["stages_fwd"], times["plain_fwd"])])
    calls = {}
    for k in ("plain", "stages"):
        for p in params:  # both from no gradient: no accumulation add_ in one count only
            p.grad = None
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            fns[k]()
        calls[k] = collections.Counter({e.key: e.count for e in prof.key_averages()
                                        if e.key.startswith("aten::")})
    extra = calls["stages"] - calls["plain"]
    top = ", ".join(f"{k.removeprefix('aten::')} +{v}" for k, v in extra.most_common(8))
    return (f"{name}: {len(w.stages)} stages; stages/original, thread CPU, {rounds} rounds: "
            f"step {step[1]:.3f} [{step[0]:.3f}, {step[2]:.3f}], forward {fwd[1]:.3f} "
            f"[{fwd[0]:.3f}, {fwd[2]:.3f}]; plain step "
            f"{statistics.median(times['plain']) * 1e3:.1f} ms; aten calls per step "
            f"{sum(calls['plain'].values())} -> {sum(calls['stages'].values())} ({top})")


def main(argv) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("networks", nargs="*", default=["gpt2"])
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--scale", default="small")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    for n in args.networks:
        print(run(n, args.rounds, args.scale), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
