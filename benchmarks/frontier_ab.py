"""A longer A/B at one point of the frontier: Hugging Face's every-layer checkpointing against
remat's drop-in at the DP's schedule with no more memory, many interleaved rounds.

The frontier (``bash benchmarks/frontier_cpu.sh``) runs 30-40 methods for 5 rounds on a
shared machine; where it finds remat slower than HF at HF's memory, this asks whether that
is the noise: plain, plain again, HF (every layer) and remat at every DP breakpoint whose
measured peak is at most HF's, ``--rounds`` interleaved rounds, per-round ratios to HF
(median and quartiles), on both clocks the frontier times by (the timing thread's CPU time
and the wall clock).  Two points separate the causes: the drop-in running the baseline's own
schedule (the executor's and the captured stages' cost, same schedule) and the DP at the
budget of that schedule's level (what the DP prefers at that memory by the chain's times).
``--baseline hf_checkpointing:K`` (``hf``: K = 1): HF's schedule on the chain is
``hf_schedule_tree`` (each K-th layer's stage one checkpoint), its level ``hf_schedule_peaks``;
it also counts the aten calls of one step of HF and of the drop-in on HF's schedule
(deterministic, unlike the times).  ``--baseline checkpoint_sequential:K``: solver
``periodic``, segments K, and the DP at the chain's predicted peak of that schedule.  Each row
also gives its CPU time over plain's (median of per-round ratios).  Usage:
    python benchmarks/frontier_ab.py --network gpt2 [--rounds 21] [--threads 1]
Writes benchmarks/results/frontier_ab_<network>[_<baseline>].json (no suffix for HF every
layer)."""
from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
from pathlib import Path

import dataclasses

import torch

import solvers
from remat_theory.model.simulator import simulate
from remat_theory.lab.frontier_methods import (Method, Point, checkpoint_sequential_method,
                                               drop_in, drop_in_states, hf_methods,
                                               hf_schedule_peaks, hf_schedule_tree, plain_method,
                                               remat_breakpoints, remat_method)
from remat_theory.lab.frontier import measure
from remat_theory.lab.frontier_networks import build_workload
from remat_theory.torch.modules.checkpointed import (Budget, CheckpointedSequential,
                                                     CheckpointOptions)
from remat_theory.torch.plan.keys import Plan
from remat_theory.torch.plan.levels import dropin_peak
from remat_theory.torch.plan.nested_form import checkpoint_state_bytes, nested_schedule
from remat_theory.torch.profiling.profiler import profile_details

RESULTS = Path(__file__).resolve().parent / "results"


def dropin_on_schedule(w, chain, tree, sched, prof, states, sizes):
    """A drop-in made to run ``sched`` (the nested schedule of ``tree``) on ``chain``, whatever
    its own solver would choose: its first plan replaced by that schedule, with the peak
    the drop-in predicts for it.  Returns (drop-in, simulation, predicted peak)."""
    sim = simulate(chain, sched)
    ck = CheckpointedSequential(w.stages, Budget.activations(chain.store_all_memory() - 1), "periodic",
                                example_input=w.example_input, loss_fn=w.loss_fn,
                                solver_options={"segments": 2},
                                options=CheckpointOptions(chain=chain, **sizes))
    key = ck.plan.key  # the example input's plan, replaced below (its strategy follows)
    peak = dropin_peak(w.stages, sim, checkpoint_state_bytes(tree, states["draws"],
                                                             states["state_bytes"]),
                       sched, prof.input_grad_bytes, prof.loss_bytes) + states["carried"]
    ck.plans[key] = Plan(key, chain, ck.plan.budget, dataclasses.replace(
        ck.solution, schedule=sched, makespan=sim.makespan, peak_memory=sim.peak_memory),
        sched, tree, peak)
    return ck, sim, peak


def main(argv) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--network", required=True)
    ap.add_argument("--scale", default="small")
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--baseline", default="hf",
                    help="hf (every layer), hf_checkpointing:K or checkpoint_sequential:K")
    ap.add_argument("--profile-clock", default="process", choices=("process", "wall"),
                    help="the clock of the chain's stage times (the frontier's: process)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    w = build_workload(args.network, args.scale)
    prof = profile_details(w.stages, w.example_input, w.loss_fn, repeats=3,
                           clock=args.profile_clock)
    chain = prof.chain
    sizes = dict(loss_bytes=prof.loss_bytes, input_grad_bytes=prof.input_grad_bytes)
    states = drop_in_states(w.stages, w.example_input)
    methods = [Method(Point("plain", "plain", 1), plain_method(w)),
               Method(Point("plain:2", "plain", 2), plain_method(w))]
    if args.baseline == "hf":
        args.baseline = "hf_checkpointing:1"
    if args.baseline.startswith("hf_checkpointing"):
        k = int(args.baseline.split(":")[1])
        hf = hf_methods(w)[k - 1]
        methods.append(hf)
        # (i) the drop-in running HF's own schedule on the chain (every k-th layer's stage
        # one checkpoint, the rest kept): the executor's and the stages' cost, same schedule
        tree = hf_schedule_tree(w.stages, k)
        if tree is None:
            raise SystemExit(f"--baseline {args.baseline}: the stages of {args.network!r} are not "
                             f"the layers of a transformers model (HF's schedule is defined on "
                             f"those); use --baseline checkpoint_sequential:K")
        sched = nested_schedule(tree, chain.length)
        ck, sim, peak = dropin_on_schedule(w, chain, tree, sched, prof, states, sizes)
        same = Point(f"remat_same_schedule:hf{k}", "remat", int(sim.peak_memory))
        same.predicted_peak, same.predicted_time = peak, sim.makespan
        methods.append(Method(same, remat_method(w, ck)))
        # (ii) the DP at the level of HF's schedule: the least budget it sees that schedule fit
        level = hf_schedule_peaks(chain, w.stages, [k], loss_bytes=prof.loss_bytes, **states)[0]
        dp_at = Point(f"remat_at_hf_level:{level}", "remat", int(level))
        ck2 = drop_in(w, int(level), "dp", chain, dp_at, sizes=sizes)
        if ck2 is not None:
            methods.append(Method(dp_at, remat_method(w, ck2)))
        store = simulate(chain, solvers.solve(chain, chain.store_all_memory(), "store-all").schedule)
        print(f"chain: store-all predicted {store.makespan:.4f} s; HF every-{k} schedule "
              f"predicted peak {peak} B, time {sim.makespan:.4f} s "
              f"({sim.makespan / store.makespan:.3f} x store-all); DP at its level {level} B: "
              f"{None if ck2 is None else (ck2.plan.predicted_peak, round(ck2.solution.makespan, 4), round(ck2.solution.makespan / store.makespan, 3))}")
    else:
        k = int(args.baseline.split(":")[1])
        hf = Method(Point(args.baseline, "checkpoint_sequential", k),
                     checkpoint_sequential_method(w, torch.nn.Sequential(*w.stages), k))
        methods.append(hf)
        per = solvers.solve(chain, chain.store_all_memory(), "periodic", segments=k)
        same = Point(f"remat_same_schedule:{k}", "remat", int(chain.store_all_memory()))
        ck = CheckpointedSequential(w.stages, Budget.activations(chain.store_all_memory() - 1), "periodic",
                                    example_input=w.example_input, loss_fn=w.loss_fn,
                                    solver_options={"segments": k},
                                    options=CheckpointOptions(chain=chain, **sizes))
        same.predicted_peak, same.predicted_time = ck.plan.predicted_peak, ck.solution.makespan
        methods.append(Method(same, remat_method(w, ck)))
        dp_at = Point(f"remat_at_its_prediction:{per.peak_memory}", "remat", int(per.peak_memory))
        ck = drop_in(w, int(per.peak_memory), "dp", chain, dp_at, sizes=sizes)
        if ck is not None:
            methods.append(Method(dp_at, remat_method(w, ck)))
        print(f"chain's prediction for checkpoint_sequential:{k}: peak {per.peak_memory} B, "
              f"time {per.makespan:.4f}; dp at that budget: "
              f"{None if ck is None else (ck.plan.predicted_peak, round(ck.solution.makespan, 4))}")
    for b in remat_breakpoints(chain, w.stages, max_points=10**6, **sizes, **states):
        pt = Point(f"remat:{b / chain.store_all_memory():.4f}", "remat", int(b))
        ck = drop_in(w, int(b), "dp", chain, pt, sizes=sizes)
        if ck is not None:
            methods.append(Method(pt, remat_method(w, ck)))
    params = [p for p in w.model.parameters() if p.requires_grad]
    ops = {}
    if args.baseline.startswith("hf_checkpointing"):
        # the aten calls of one step of HF and of the drop-in on HF's own schedule
        # (deterministic, unlike the times): what the drop-in runs that HF does not
        for m in (hf, methods[3]):
            ps = m.params or params
            m.run()
            for p in ps:
                p.grad = None
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as pr:
                m.run()
            for p in ps:
                p.grad = None
            ops[m.point.method] = collections.Counter(
                {e.key: e.count for e in pr.key_averages() if e.key.startswith("aten::")})
        a, b = ops[hf.point.method], ops[methods[3].point.method]
        more, fewer = b - a, a - b
        print(f"aten calls per step: {hf.point.method} {sum(a.values())}, "
              f"{methods[3].point.method} {sum(b.values())}; the drop-in's extra: "
              + ", ".join(f"{k.removeprefix('aten::')} +{v}" for k, v in more.most_common(12))
              + "; HF's extra: "
              + ", ".join(f"{k.removeprefix('aten::')} +{v}" for k, v in fewer.most_common(12)))
        ops = {"hf_calls": sum(a.values()), "same_schedule_calls": sum(b.values()),
               "drop_in_extra": dict(more.most_common()), "hf_extra": dict(fewer.most_common())}
    # peaks first (one step each), then keep the remat points at no more than HF's memory
    measure(methods, params, torch.device("cpu"), repeats=1)
    hf_peak = hf.point.peak
    peaks = [{"method": m.point.method, "peak": m.point.peak,
              "predicted_peak": m.point.predicted_peak, "predicted_time": m.point.predicted_time}
             for m in methods]
    for r in peaks:
        print(f"  measured {r['method']:34s} {r['peak']} B (predicted {r['predicted_peak']})")
    keep = methods[:3] + [m for m in methods[3:] if m.point.peak is not None and (
        m.point.peak <= hf_peak or not m.point.method.startswith("remat:"))]
    for m in keep:
        m.point.times, m.point.cpu_times = [], []
    measure(keep, params, torch.device("cpu"), repeats=args.rounds, seed=1)
    rows = []
    for m in keep:
        row = {"method": m.point.method, "peak": m.point.peak,
               "predicted_peak": m.point.predicted_peak, "predicted_time": m.point.predicted_time,
               "grads_equal": m.point.grads_equal}
        text = f"{m.point.method:34s} {m.point.peak / 2**20:8.2f} MiB"
        for clock, key in (("thread_cpu", "cpu_times"), ("wall", "times")):
            r = [a / b for a, b in zip(getattr(m.point, key), getattr(hf.point, key))]
            q = statistics.quantiles(r, n=4)
            row[clock] = {"ratio_to_baseline": statistics.median(r), "q25": q[0], "q75": q[2]}
            text += f"  {clock} / {args.baseline}: {statistics.median(r):.3f} [{q[0]:.3f}, {q[2]:.3f}]"
        r = [a / b for a, b in zip(m.point.cpu_times, methods[0].point.cpu_times)]
        row["thread_cpu_over_plain"] = statistics.median(r)
        text += f"  cpu / plain {statistics.median(r):.3f}"
        rows.append(row)
        print(text + f"  grads equal {m.point.grads_equal}")
    out = {"network": args.network, "scale": args.scale, "rounds": args.rounds,
           "baseline": args.baseline,
           "threads": args.threads, "torch": torch.__version__, "rows": rows,
           "every_peak": peaks, "aten_calls": ops,
           "command": "python benchmarks/frontier_ab.py " + " ".join(argv)}
    RESULTS.mkdir(exist_ok=True)
    tag = "" if args.baseline == "hf_checkpointing:1" else "_" + args.baseline.replace(":", "")
    tag += "" if args.profile_clock == "process" else "_" + args.profile_clock + "_profile"
    (RESULTS / f"frontier_ab_{args.network}{tag}.json").write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
