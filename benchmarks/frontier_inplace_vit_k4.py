"""The frontier's ViT at Hugging Face's every-4-layers point, through the in-place API: is the
in-place step slower than HF's with the same computation, and why?

The frontier (benchmarks/frontier_inplace_cpu.sh) measured the in-place API at 1.035 of HF's
every-4-layers time by activation memory (1.061 by step memory) against a noise of 0.029,
both recomputing one layer (HF its layer 0, the plan its layer 2 or 1).  Here, in one process,
interleaved, on the frontier's ViT (small scale: 4 layers, hidden 128, batch 4, 64x64):

* ``plain`` and ``remat:store-all`` (the API's hooks around plain autograd: the hooks' own
  cost), ``plain:2`` (the noise pair);
* ``hf:4`` (``activation_checkpointing_enable(every_n_layers=4)``: layer 0 recomputed);
* ``remat:layer0``, ``remat:layer1``, ``remat:layer2``: the API with a schedule fixed by a
  solver registered here, recomputing that one layer (``layer0`` is HF's computation);
* ``hf:4b``, ``remat:layer0b``: second copies of two of them (as ``plain:2`` of plain): how
  far two copies of one model differ in time on this machine;
* ``remat:plan@hf4``: the API given HF's measured step peak as its budget (the DP's choice).

Then the same on one model object in turn (:func:`same_object`), the forward's and the
backward's time apart: HF's switch on, the API attached with HF's computation, plain.

Each round runs every method once in a shuffled order; the step's thread CPU time
(``time.thread_time``) and wall time are taken; the report gives each method's median
and its median per-round ratio to ``hf:4`` (and of ``remat:store-all`` to ``plain``), with
the noise as the median ratio of ``plain:2`` to ``plain``.  Every method's gradients are
checked against plain's once.

    python benchmarks/frontier_inplace_vit_k4.py --rounds 41
        # writes benchmarks/results/inplace_vit_k4.json
"""
from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch

import solvers
from remat_theory.lab.frontier_networks import build_workload, primary_output
from remat_theory.model.schedule import Schedule
from remat_theory.model.simulator import simulate
from remat_theory.model.solution import Solution
from remat_theory.torch.inplace import rematerialize
from remat_theory.torch.tracker import AllocatorMeter

ONE_LAYER = {  # four layers, one recomputed (its forward kept out of the first pass)
    "layer0": "Fck0 Fall1 Fall2 Fall3 Loss B3 B2 B1 Fall0 B0",
    "layer1": "Fall0 Fck1 Fall2 Fall3 Loss B3 B2 Fall1 B1 B0",
    "layer2": "Fall0 Fall1 Fck2 Fall3 Loss B3 Fall2 B2 B1 B0",
}


def _fixed(text):
    schedule = Schedule.parse(text)

    def solve(chain, budget):
        sim = simulate(chain, schedule)
        if sim.peak_memory > budget:
            return Solution.infeasible("fixed", budget, min_budget=sim.peak_memory)
        return Solution.feasible("fixed", budget, schedule, sim.makespan, sim.peak_memory,
                                 min_budget=sim.peak_memory)
    return solve


def same_object(w, model, example, loss_fn, cycles: int) -> dict:
    """One model object in turn: HF's every-4-layers switched on, then the in-place API with
    HF's computation (``remat:layer0``) attached, then plain, ``cycles`` times (the order
    alternating), 8 measured steps each after 3 warm-up steps; the forward's and the
    backward's thread CPU time apart.  No copy of the model: what a copy's place in memory
    does to its time (up to 1% here) is out of it."""
    model = copy.deepcopy(model)
    res = {k: ([], []) for k in ("hf:4", "remat:layer0", "plain")}

    def steps(k):
        for i in range(11):
            t0 = time.thread_time()
            loss = w.loss_fn(w.call(model))
            t1 = time.thread_time()
            loss.backward()
            t2 = time.thread_time()
            model.zero_grad(set_to_none=True)
            if i >= 3:
                res[k][0].append(t1 - t0)
                res[k][1].append(t2 - t1)

    with solvers.registered("bench-fixed-same", _fixed(ONE_LAYER["layer0"]), optimal_for="none",
                            supports=("fall_time", "fall_overhead", "output_saved")) as name:
        for c in range(cycles):
            for k in (("hf:4", "remat:layer0", "plain") if c % 2 else
                      ("remat:layer0", "plain", "hf:4")):
                if k == "hf:4":
                    model.activation_checkpointing_enable(every_n_layers=4)
                    steps(k)
                    model.activation_checkpointing_disable()
                elif k == "remat:layer0":
                    handle = rematerialize(model, 0.99, example, loss_fn=loss_fn, solver=name)
                    steps(k)
                    handle.remove()
                else:
                    steps(k)
    return {k: {"forward_s": statistics.median(f), "backward_s": statistics.median(b)}
            for k, (f, b) in res.items()}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=41)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cycles", type=int, default=8, help="of the one-object comparison")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "inplace_vit_k4.json"))
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    w = build_workload("vit", "small", granularity=None)
    base = w.model.train()

    def step(m):
        w.loss_fn(w.call(m)).backward()

    def grads(m):
        return [None if p.grad is None else p.grad.clone() for p in m.parameters()]

    def peak(m):
        step(m)
        m.zero_grad(set_to_none=True)
        meter = AllocatorMeter("cpu")
        with meter:
            with meter.op("step"):
                step(m)
        m.zero_grad(set_to_none=True)
        return meter.peak

    example = w.inputs  # what the frontier's in-place points are given
    loss_fn = lambda out: w.loss_fn(primary_output(out))  # noqa: E731
    models = {"plain": copy.deepcopy(base), "plain:2": copy.deepcopy(base)}
    for k in ("hf:4", "hf:4b"):  # two copies: what placing a model's copy in memory does
        hf = copy.deepcopy(base)
        hf.activation_checkpointing_enable(every_n_layers=4)
        models[k] = hf
    hf_step = peak(models["hf:4"])
    plans = {}
    m = copy.deepcopy(base)
    plans["remat:store-all"] = rematerialize(m, 1.0, example, loss_fn=loss_fn).plan
    models["remat:store-all"] = m
    for label, text in list(ONE_LAYER.items()) + [("layer0b", ONE_LAYER["layer0"])]:
        m = copy.deepcopy(base)
        with solvers.registered(f"bench-fixed-{label}", _fixed(text), optimal_for="none",
                                supports=("fall_time", "fall_overhead", "output_saved")) as name:
            plans[f"remat:{label}"] = rematerialize(m, 0.99, example, loss_fn=loss_fn,
                                                    solver=name).plan
        models[f"remat:{label}"] = m
    m = copy.deepcopy(base)
    try:
        h = rematerialize(m, hf_step, example, loss_fn=loss_fn)
    except Exception as e:  # noqa: BLE001 - refused: the smallest it accepts
        h = rematerialize(m, e.smallest_feasible, example, loss_fn=loss_fn)
    plans["remat:plan@hf4"] = h.plan
    models["remat:plan@hf4"] = m

    torch.manual_seed(0)
    step(models["plain"])
    ref = grads(models["plain"])
    models["plain"].zero_grad(set_to_none=True)
    equal = {}
    for k, mod in models.items():
        step(mod)
        equal[k] = all((a is None and b is None) or torch.equal(a, b)
                       for a, b in zip(grads(mod), ref))
        mod.zero_grad(set_to_none=True)
    peaks = {k: peak(mod) for k, mod in models.items()}

    cpu = {k: [] for k in models}
    wall = {k: [] for k in models}
    rng = random.Random(a.seed)
    order = list(models)
    for _ in range(a.rounds):
        rng.shuffle(order)
        for k in order:
            mod = models[k]
            t0, c0 = time.perf_counter(), time.thread_time()
            step(mod)
            c1, t1 = time.thread_time(), time.perf_counter()
            mod.zero_grad(set_to_none=True)
            cpu[k].append(c1 - c0)
            wall[k].append(t1 - t0)

    def ratio(xs, ys):
        return statistics.median(x / y for x, y in zip(xs, ys))

    out = {"command": "python benchmarks/frontier_inplace_vit_k4.py " + " ".join(
        sys.argv[1:] if argv is None else argv), "rounds": a.rounds,
        "noise_cpu": ratio(cpu["plain:2"], cpu["plain"]),
        "noise_wall": ratio(wall["plain:2"], wall["plain"]),
        "hooks_cpu": ratio(cpu["remat:store-all"], cpu["plain"]),
        "hooks_wall": ratio(wall["remat:store-all"], wall["plain"]),
        "copies_cpu": {"plain:2/plain": ratio(cpu["plain:2"], cpu["plain"]),
                       "hf:4b/hf:4": ratio(cpu["hf:4b"], cpu["hf:4"]),
                       "remat:layer0b/remat:layer0": ratio(cpu["remat:layer0b"],
                                                           cpu["remat:layer0"])},
        "methods": {}}
    for k in models:
        p = plans.get(k)
        out["methods"][k] = {
            "cpu_s": statistics.median(cpu[k]), "wall_s": statistics.median(wall[k]),
            "cpu_vs_hf4": ratio(cpu[k], cpu["hf:4"]), "wall_vs_hf4": ratio(wall[k], wall["hf:4"]),
            "step_peak": peaks[k], "grads_equal_plain": equal[k],
            "schedule": None if p is None or p.schedule is None else str(p.schedule),
            "predicted_step_peak": None if p is None else p.predicted_step_peak}
    out["same_object"] = same_object(w, base, example, loss_fn, a.cycles)
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"noise (plain:2 / plain) cpu {out['noise_cpu']:.3f} wall {out['noise_wall']:.3f}; "
          f"hooks (remat:store-all / plain) cpu {out['hooks_cpu']:.3f} wall {out['hooks_wall']:.3f}")
    print("copies (cpu): " + ", ".join(f"{k} {v:.3f}" for k, v in out["copies_cpu"].items()))
    so = out["same_object"]
    print("one model object, in turn (ms, thread CPU, median): " + ", ".join(
        f"{k} forward {v['forward_s'] * 1e3:.2f} backward {v['backward_s'] * 1e3:.2f}"
        for k, v in so.items()))
    for k, r in out["methods"].items():
        print(f"{k:18} cpu {r['cpu_s'] * 1e3:7.2f} ms ({r['cpu_vs_hf4']:.3f} of hf:4)  wall "
              f"{r['wall_s'] * 1e3:7.2f} ms ({r['wall_vs_hf4']:.3f})  step peak {r['step_peak']:>9} "
              f"grads equal {r['grads_equal_plain']}  {r['schedule'] or ''}")


if __name__ == "__main__":
    main()
