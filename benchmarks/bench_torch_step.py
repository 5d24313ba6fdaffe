"""What does the drop-in cost per training step?  Interleaved timing of one training step
(zero the gradients, forward, loss, backward) of:

* ``plain``: the plain ``nn.Sequential``;
* ``dropin_1.0``: ``CheckpointedSequential(budget=1.0)``;
* ``dropin_sa+1%``: budget = 101% of the store-all bytes (nothing recomputed either);
* ``dropin_dp``: the DP's schedule at the budget ``--fraction`` of the way from the
  drop-in's smallest feasible budget to store-all (it recomputes);
* ``ckseq``: ``torch.utils.checkpoint.checkpoint_sequential`` (non-reentrant) with
  ``--segments`` segments, and ``dropin_ckseq``: the drop-in running the schedule with the
  same recomputed forwards (every segment but the last run without recording, then
  recomputed recording when the backward reaches it), so the two differ only in the
  machinery that runs them.

Each round runs every variant once, in a seeded random order (so that no variant always
follows the same one), after a warm-up round.  A variant's ratio is the median over
``--rounds`` rounds of its step time divided by the plain step's time in the same round
(paired, so that a slow spell of the machine cancels out); the ratio of the medians is
written too, with every time.  ``ckseq`` and ``dropin_ckseq`` are also compared with each
other the same way.  ``dropin_1.0`` and ``dropin_sa+1%`` run the same code (plain
autograd), so their difference shows the noise.  One torch thread, timed by the CPU time of
the process (``--clock process``), so that the figures do not depend on how busy the other
cores are.

``dispatch_seconds`` isolates what the drop-in adds per call when nothing is recomputed
(the checks and the plan lookup), free of the noise of whole steps: a drop-in around
``nn.Identity`` stages against the same loop without it.  ``machinery_seconds`` does the
same for recomputation: the drop-in running checkpoint_sequential's schedule minus
checkpoint_sequential, per step, on as many tiny stages.

Before the timing, each variant's step is run once under the :class:`MemoryTracker`: its
peak activation bytes are written beside the simulator's prediction for the drop-in's
schedules.

    python benchmarks/bench_torch_step.py --rounds 41    # four built-in networks, GPT-2, ViT
    python benchmarks/bench_torch_step.py --scale test --rounds 3   # quick check

Writes ``benchmarks/results/torch_step_overhead.json`` (``--out``).
"""
from __future__ import annotations

import argparse
import functools
import json
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.utils.checkpoint

import solvers
from remat_theory.model.schedule import Schedule
from remat_theory.torch import (Budget, CheckpointOptions, CheckpointedSequential, MemoryTracker, profile,
                                split_stages)
from remat_theory.lab.networks import build
from remat_theory.torch.capture.call_inputs import example_inputs
from remat_theory.torch.run.nested import StageRunner, run_nested
from remat_theory.torch.plan.nested_form import nested_form, recomputed_stages
from remat_theory.torch.plan.levels import shared_parameter_bytes
from remat_theory.torch.plan.rounding import auto_unit, rounded_chain


def segments_schedule(length: int, segments: int) -> Schedule:
    """The schedule of ``checkpoint_sequential(stages, segments)``: the first
    ``segments - 1`` segments of ``length // segments`` stages run without recording
    (``Fck Fn ..``), the rest records; each earlier segment is recomputed recording
    (``Fall ..``) when the backward reaches it."""
    size = length // segments
    starts = list(range(0, size * (segments - 1), size))
    last = starts[-1] + size if starts else 0
    ops = []
    for a in starts:
        ops += [f"Fck{a}"] + [f"Fn{j}" for j in range(a + 1, a + size)]
    ops += [f"Fall{j}" for j in range(last, length)] + ["Loss"]
    ops += [f"B{j}" for j in range(length - 1, last - 1, -1)]
    for a in reversed(starts):
        ops += [f"Fall{j}" for j in range(a, a + size)]
        ops += [f"B{j}" for j in range(a + size - 1, a - 1, -1)]
    return Schedule(ops)


def _step(forward, x, loss_fn, params):
    for p in params:
        p.grad = None
    loss = loss_fn(forward(x))
    loss.backward()


def _dispatch_seconds(x, chain, length: int, clock, calls: int = 2000) -> float:
    """What the drop-in itself adds to a step when nothing is recomputed: the time of a call
    of a budget-1.0 drop-in whose stages are ``nn.Identity`` minus that of the same
    identities called in a loop (per call, see :func:`_fastest_difference`)."""
    ids = [torch.nn.Identity() for _ in range(length)]
    # a parameter that requires grad makes it a training call: the drop-in looks its plan up
    ids[0].register_parameter("unused", torch.nn.Parameter(torch.zeros(1)))
    ck = CheckpointedSequential(ids, 1.0, example_input=x, options=CheckpointOptions(chain=chain))

    def loop(inp):
        for m in ids:
            inp = m(inp)
        return inp

    return _fastest_difference(lambda: ck(x), lambda: loop(x), clock, calls)


def _machinery_seconds(length: int, segments: int, clock, calls: int = 300) -> float:
    """Per step, what the drop-in's way of running checkpoint_sequential's schedule costs
    beyond checkpoint_sequential itself, on ``length`` tiny stages (``nn.Linear(4, 4)``, one
    sample) where the machinery is all there is to time (per step of forward and backward,
    see :func:`_fastest_difference`)."""
    stages = [torch.nn.Linear(4, 4) for _ in range(length)]
    x = torch.randn(1, 4)
    tree = nested_form(segments_schedule(length, segments), length)

    def ours():
        run_nested(tree, x, StageRunner(stages)).sum().backward()

    def theirs():
        torch.utils.checkpoint.checkpoint_sequential(stages, segments, x,
                                                     use_reentrant=False).sum().backward()

    ours(), theirs()
    return _fastest_difference(ours, theirs, clock, calls)


def _fastest_difference(a, b, clock, calls: int, batches: int = 9) -> float:
    """Seconds per call of ``a`` minus ``b``: batches of ``calls`` calls, alternated, and
    each one's fastest batch (the least disturbed by the machine's other work)."""
    best_a = best_b = float("inf")
    for _ in range(batches):
        t0 = clock()
        for _ in range(calls):
            a()
        t1 = clock()
        for _ in range(calls):
            b()
        t2 = clock()
        best_a, best_b = min(best_a, t1 - t0), min(best_b, t2 - t1)
    return (best_a - best_b) / calls


def bench_network(name: str, scale: str, rounds: int, fraction: float, segments: int,
                  clock) -> dict:
    net = build(name, scale)
    stages = split_stages(net.model)
    L = len(stages)
    x, loss_fn = net.example_input, net.loss_fn
    params = list(net.model.parameters())
    chain = profile(stages, x, loss_fn, repeats=3)
    store_all = chain.store_all_memory()

    def dropin(budget):
        return CheckpointedSequential(stages, budget, example_input=x, loss_fn=loss_fn,
                                      options=CheckpointOptions(chain=chain))

    # the drop-in's smallest budget: the DP's, plus its reserve for stage-shared parameters
    lo = (solvers.solve(rounded_chain(chain, auto_unit(chain)), store_all, "dp").min_budget
          + 2 * shared_parameter_bytes(stages))
    dp_budget = int(lo + fraction * (store_all - lo))
    ck_one, ck_sa, ck_dp = dropin(1.0), dropin(Budget.activations(int(store_all * 1.01))), \
        dropin(Budget.activations(dp_budget))
    tree = nested_form(segments_schedule(L, segments), L)

    def ckseq(inp):
        return torch.utils.checkpoint.checkpoint_sequential(stages, segments, inp,
                                                            use_reentrant=False)

    def dropin_ckseq(inp):
        return run_nested(tree, inp, StageRunner(stages))

    others = example_inputs(stages)  # a captured chain's masks go with every call
    variants = {"plain": functools.partial(net.model, **others),
                "dropin_1.0": functools.partial(ck_one, **others),
                "dropin_sa+1%": functools.partial(ck_sa, **others),
                "dropin_dp": functools.partial(ck_dp, **others), "ckseq": ckseq,
                "dropin_ckseq": dropin_ckseq}
    names = list(variants)
    peaks = {}
    for p in params:  # allocated before tracking: parameter gradients are not activations
        p.grad = torch.zeros_like(p)
    for v in names:
        tracker = MemoryTracker()
        tracker.track(x)
        with tracker:
            out = variants[v](x)
            loss = loss_fn(out)
            del out
            loss.backward()
        del loss
        peaks[v] = tracker.peak
    times = {v: [] for v in names}
    order = list(names)
    shuffle = random.Random(0).shuffle
    for r in range(rounds + 1):  # round 0 warms up
        shuffle(order)
        for v in order:
            t0 = clock()
            _step(variants[v], x, loss_fn, params)
            dt = clock() - t0
            if r:
                times[v].append(dt)
    dispatch = _dispatch_seconds(x, chain, L, clock)
    machinery = _machinery_seconds(L, segments, clock)
    med = {v: statistics.median(ts) for v, ts in times.items()}
    paired = {v: statistics.median(t / p for t, p in zip(times[v], times["plain"])) for v in names}
    paired_ck = statistics.median(a / b for a, b in zip(times["dropin_ckseq"], times["ckseq"]))
    return {
        "network": name, "scale": scale, "stages": L, "rounds": rounds,
        "store_all_bytes": store_all,
        "recomputed_forwards": {"dropin_1.0": ck_one.plan.recomputed,
                                "dropin_sa+1%": ck_sa.plan.recomputed,
                                "dropin_dp": ck_dp.plan.recomputed,
                                "ckseq": recomputed_stages(tree),
                                "dropin_ckseq": recomputed_stages(tree)},
        "dp_budget_bytes": dp_budget, "dp_min_budget_bytes": lo, "segments": segments,
        "median_seconds": med,
        "measured_peak_bytes": peaks,
        "predicted_peak_bytes": {"dropin_1.0": ck_one.plan.predicted_peak,
                                 "dropin_sa+1%": ck_sa.plan.predicted_peak,
                                 "dropin_dp": ck_dp.plan.predicted_peak},
        "ratio_to_plain": paired,
        "ratio_of_medians_to_plain": {v: med[v] / med["plain"] for v in names},
        "dropin_ckseq_over_ckseq": paired_ck,
        "dispatch_seconds": dispatch,
        "dispatch_over_plain_step": dispatch / med["plain"],
        "machinery_seconds": machinery,
        "machinery_over_plain_step": machinery / med["plain"],
        "seconds": times,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--networks", default="mlp,resnet,transformer,rnn,gpt2,vit",
                    help="built-in network names (gpt2 and vit need transformers)")
    ap.add_argument("--scale", default="small")
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--fraction", type=float, default=0.5,
                    help="budget of dropin_dp: this fraction of the way from the smallest "
                         "feasible budget to store-all")
    ap.add_argument("--segments", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--clock", choices=("process", "wall"), default="process",
                    help="process: CPU time of this process (other processes' load does not "
                         "inflate it; with one thread it is the step's work); wall: perf_counter")
    ap.add_argument("--out", default="benchmarks/results/torch_step_overhead.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    records = []
    for name in args.networks.split(","):
        clock = time.process_time if args.clock == "process" else time.perf_counter
        rec = bench_network(name, args.scale, args.rounds, args.fraction, args.segments, clock)
        records.append(rec)
        ratios = " ".join(f"{k}={v:.3f}" for k, v in rec["ratio_to_plain"].items() if k != "plain")
        print(f"{name:12s} plain {rec['median_seconds']['plain'] * 1e3:8.2f} ms  {ratios}  "
              f"dropin_ckseq/ckseq={rec['dropin_ckseq_over_ckseq']:.3f}  dispatch "
              f"{rec['dispatch_seconds'] * 1e6:.1f} us  machinery "
              f"{rec['machinery_seconds'] * 1e6:.1f} us  dp peak "
              f"{rec['measured_peak_bytes']['dropin_dp']} B (predicted "
              f"{rec['predicted_peak_bytes']['dropin_dp']}, plain "
              f"{rec['measured_peak_bytes']['plain']})", flush=True)
    given = sys.argv[1:] if argv is None else argv
    out = {"command": "python benchmarks/bench_torch_step.py " + " ".join(given),
           "torch": torch.__version__, "machine": platform.machine(),
           "threads": args.threads, "clock": args.clock, "results": records}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
