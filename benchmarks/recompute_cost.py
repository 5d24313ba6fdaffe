"""Where a recomputation's time goes: the chain's per-operation times against whole steps.

One process, one thread, ``--rounds`` interleaved rounds (the first dropped), the timing
thread's CPU time, every figure a per-round ratio to that round's plain step (median and
quartiles).  Each round runs, forward and backward timed apart:
  plain      the eager model, ``loss_fn(model(x)).backward()``
  hf         Hugging Face's every-layer checkpointing (non-reentrant), a copy of the model
  drop_sa    the drop-in at store-all (the DP at 10 x store-all memory)
  drop_hf    the drop-in running HF's own schedule on the chain (``hf_schedule_tree``)
  remat:R    the drop-in (DP) at its lowest breakpoint and its middle one (R: the budget
             over store-all), against the chain's predicted time over store-all
  ex_sa      the executor running the store-all schedule op by op (no timer inside)
  profile    one round of the profiler's own timing (``measure_times``, repeats 1): its
             Fck (``fwd_time``), Fall and B+Loss sums and the executor's own Fck and
             (hooked) Fall, so the chain's store-all prediction
             (sum Fall + B + Loss) and its HF prediction (that + the layers' Fck) are taken
             in the same round as the steps they predict.
Usage: python benchmarks/recompute_cost.py --network llama [--rounds 41]
Writes benchmarks/results/recompute_cost_<network>.json."""
from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from remat_theory.model.schedule import Schedule
from remat_theory.model.simulator import simulate
from remat_theory.torch.run.executor import ScheduleExecutor
from remat_theory.lab.frontier_methods import (Point, drop_in, drop_in_states, hf_methods,
                                               hf_schedule_tree, remat_breakpoints)
from remat_theory.lab.frontier_networks import build_workload
from remat_theory.torch.plan.nested_form import nested_schedule
from remat_theory.torch.profiling.profiler import measure_times, profile_details, stage_parameters

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frontier_ab import dropin_on_schedule  # noqa: E402  (the sibling benchmark)

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--network", required=True)
    ap.add_argument("--rounds", type=int, default=41)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    w = build_workload(args.network, "small")
    prof = profile_details(w.stages, w.example_input, w.loss_fn, repeats=3, clock="process")
    ch, L = prof.chain, prof.chain.length
    sizes = dict(loss_bytes=prof.loss_bytes, input_grad_bytes=prof.input_grad_bytes)
    states = drop_in_states(w.stages, w.example_input)
    tree = hf_schedule_tree(w.stages, 1)
    hfs = nested_schedule(tree, L)
    sa = Schedule([f"Fall{i}" for i in range(L)] + ["Loss"]
                  + [f"B{i}" for i in reversed(range(L))])
    ck, sim, _ = dropin_on_schedule(w, ch, tree, hfs, prof, states, sizes)
    cksa = drop_in(w, 10 * ch.store_all_memory(), "dp", ch, Point("sa", "remat", 0), sizes=sizes)
    store_t = simulate(ch, sa).makespan
    # remat's own points: the DP at its lowest breakpoint and at the middle one
    bps = remat_breakpoints(ch, w.stages, max_points=10**6, **sizes, **states)
    points = {}
    for b in sorted({bps[0], bps[len(bps) // 2]}):
        pt = Point(f"remat:{b}", "remat", int(b))
        c = drop_in(w, int(b), "dp", ch, pt, sizes=sizes)
        if c is not None:
            points[f"remat:{b / ch.store_all_memory():.4f}"] = (c, pt.predicted_time / store_t)
    hfm = hf_methods(w)[0]
    hfmodel = hfm.step.__defaults__[0]
    recomputed = [int(str(o)[3:]) for o in hfs if str(o).startswith("Fck")]

    def split(fwd):
        def go():
            c = time.thread_time()
            loss = w.loss_fn(fwd())
            c1 = time.thread_time()
            loss.backward()
            return c1 - c, time.thread_time() - c1
        return go

    def ex_sa():
        c = time.thread_time()
        ScheduleExecutor(w.stages, w.loss_fn, w.example_input).run(sa)
        return time.thread_time() - c, 0.0

    sp = stage_parameters(w.stages)
    profs = []

    def profile_round():
        profs.append(measure_times(w.stages, w.loss_fn, w.example_input, sp,
                                    torch.device("cpu"), 1, 0, "process", True))
        return 0.0, 0.0

    others = w.other_inputs  # the example's masks: the drop-in takes them with every call
    methods = {"plain": split(lambda: w.call(w.model)), "hf": split(lambda: w.call(hfmodel)),
               "drop_sa": split(lambda: cksa(w.example_input, **others)),
               "drop_hf": split(lambda: ck(w.example_input, **others)), "ex_sa": ex_sa,
               "profile": profile_round}
    for name, (c, _) in points.items():
        methods[name] = split(lambda c=c: c(w.example_input, **others))
    every = list(w.model.parameters()) + sp + list(hfmodel.parameters())
    res = collections.defaultdict(list)
    for r in range(args.rounds + 1):
        t = {}
        for k, f in methods.items():
            for p in every:
                p.grad = None
            fw, bw = f()
            t[k], t[k + ".fwd"], t[k + ".bwd"] = fw + bw, fw, bw
        if r == 0:
            profs.clear()
            continue
        base = t["plain"]
        for k in ("plain.fwd", "plain.bwd", "hf", "hf.fwd", "hf.bwd", "drop_sa", "drop_sa.fwd",
                  "drop_sa.bwd", "drop_hf", "drop_hf.fwd", "drop_hf.bwd", "ex_sa"):
            res[k].append(t[k] / base)
        p = profs[-1]
        fall, fck, back = sum(p["fall"]), sum(p["nograd"][i] for i in recomputed), sum(p["bwd"])
        res["profile.Fall"].append(fall / base)
        res["profile.executor_Fall"].append(sum(p.get("executor_fall", p["fall"])) / base)
        res["profile.executor_Fck_recomputed"].append(
            sum(p.get("executor_fck", p["nograd"])[i] for i in recomputed) / base)
        res["profile.B+Loss"].append(back / base)
        res["profile.Fck_recomputed"].append(fck / base)
        res["profile.Fall_recomputed"].append(sum(p["fall"][i] for i in recomputed) / base)
        res["pred.store_all"].append((fall + back) / base)
        res["pred.hf"].append((fall + back + fck) / base)
        res["pred.hf/store_all"].append((fall + back + fck) / (fall + back))
        res["hf/drop_sa"].append(t["hf"] / t["drop_sa"])
        for name in points:
            res[f"{name}/drop_sa"].append(t[name] / t["drop_sa"])
        res["drop_hf/drop_sa"].append(t["drop_hf"] / t["drop_sa"])
    med = statistics.median
    out = {"network": args.network, "rounds": args.rounds, "recomputed_stages": recomputed,
           "hf_schedule": " ".join(map(str, hfs)),
           "chain_pred_hf/store_all": sim.makespan / store_t,
           "chain_pred_remat/store_all": {k: v for k, (_, v) in points.items()},
           "ratios_to_plain": {k: [med(v), *statistics.quantiles(v, n=4)[::2]]
                               for k, v in res.items()}}
    for k, v in out["ratios_to_plain"].items():
        print(f"{k:24s} {v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]")
    print("chain's HF / store-all", round(out["chain_pred_hf/store_all"], 3))
    for k, v in out["chain_pred_remat/store_all"].items():
        print(f"chain's {k} / store-all", round(v, 3))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"recompute_cost_{args.network}.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
