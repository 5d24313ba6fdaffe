"""Which stage outputs does no backward read, and what does modelling it change?

For each network: the profiled chain's ``output_saved`` (docs/model.md: ``output_saved[i]``
false when neither B_i nor B_{i+1} reads x_{i+1}), the store-all peak the chain predicts
with the field and without it (every output kept in its stage's tape: the chain before the
field existed), and two measurements with the allocator accounting the profile uses
(:class:`~remat_theory.torch.tracker.AllocatorMeter`: x_0 plus the most bytes held above
the start of a training step, parameter gradients taken out as persistent memory):

* ``plain``: one step of plain autograd (forward, loss, backward), no schedule;
* ``dropin_store_all``: ``CheckpointedSequential(model, 1.0)`` (store-all, which it runs as
  plain autograd);
* ``dropin_dp``: the drop-in at ``--fraction`` of the store-all peak with the ``dp`` solver
  (recomputing), beside the simulator's prediction for its schedule.  The random generator
  states each checkpoint saves (5056 B each on the CPU, outside the chain) are counted
  apart, in ``dropin_dp_rng_bytes``.

    python benchmarks/unsaved_outputs.py                       # mlp, resnet, transformer, rnn
    python benchmarks/unsaved_outputs.py --models gpt2,vit --scale test

Writes ``benchmarks/results/unsaved_outputs.json`` (``--out``) and prints a table.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import platform
import sys
from pathlib import Path
from unittest import mock

import torch

from remat_theory.model.errors import RematError
from remat_theory.model.simulator import simulate
from remat_theory.torch import (CheckpointOptions, CheckpointedSequential, profile_details,
                                split_stages)
from remat_theory.lab.networks import build
from remat_theory.torch.capture.call_inputs import example_inputs
from remat_theory.torch.profiling.profiler import prime_forward
from remat_theory.torch.capture.stages import stage_parameters
from remat_theory.torch.tracker import AllocatorMeter, storage_bytes


@contextlib.contextmanager
def _rng_states_counted_apart(meter, sizes: list):
    """Checkpoints save random generator states (CPU tensors, not activations): make them
    as the meter's bookkeeping and note their bytes in ``sizes``."""
    get = torch.get_rng_state

    def paused_get():
        with meter.paused():
            state = get()
        sizes.append(storage_bytes(state))
        return state

    with mock.patch.object(torch, "get_rng_state", paused_get):
        yield


def measured_step(stages, step, x0, params, device) -> tuple:
    """(x_0 + the allocator's peak above the start of ``step()``, bytes of the random
    generator states made during it, which are not counted)."""
    for p in params:
        p.grad = None
    meter = AllocatorMeter(device, persistent=lambda: [p.grad for p in params],
                           prime=lambda: prime_forward(stages, x0, device))
    rng: list = []
    with meter:
        with meter.op("step"), _rng_states_counted_apart(meter, rng):
            step()
    for p in params:
        p.grad = None
    return storage_bytes(x0) + meter.peak, sum(rng)


def network_record(name: str, scale: str, fraction: float, device) -> dict:
    net = build(name, scale).to(device)
    stages = split_stages(net.model)
    params = stage_parameters(stages)
    x0, loss_fn = net.example_input, net.loss_fn
    res = profile_details(stages, x0, loss_fn, device, repeats=1, warmup=1, name=name)
    chain = res.chain
    grad_input = x0.is_floating_point()

    def plain_step():
        x = x0.detach().requires_grad_(grad_input)
        y = x
        for s in stages:
            y = s(y)
        loss = loss_fn(y)
        del y
        loss.backward()

    def dropin_step(ck):
        def step():
            x = x0.detach().requires_grad_(grad_input)
            loss = loss_fn(ck(x, **example_inputs(stages)))
            loss.backward()
        return step

    rec = {"model": name, "scale": scale, "stages": chain.length,
           "unsaved_outputs": [i for i, s in enumerate(chain.output_saved) if not s],
           "stage_kinds": [type(s).__name__ for s in stages],
           "saves_input": res.saves_input, "saves_output": res.saves_output,
           "store_all_predicted": chain.store_all_memory(),
           "store_all_predicted_without_field": chain.replace(output_saved=None).store_all_memory()}
    rec["plain_measured"], _ = measured_step(stages, plain_step, x0, params, device)
    ck = CheckpointedSequential(stages, 1.0, example_input=x0, loss_fn=loss_fn,
                                options=CheckpointOptions(chain=chain))
    rec["dropin_store_all_measured"], _ = measured_step(stages, dropin_step(ck), x0, params,
                                                        device)
    try:
        ck = CheckpointedSequential(stages, fraction, "dp", example_input=x0, loss_fn=loss_fn,
                                    options=CheckpointOptions(chain=chain))
    except RematError as e:
        rec["dropin_dp"] = str(e)
        return rec
    measured, rng = measured_step(stages, dropin_step(ck), x0, params, device)
    rec.update(dropin_dp_budget=ck.budget, dropin_dp_predicted=ck.plan.predicted_peak,
               dropin_dp_recomputed=ck.plan.recomputed, dropin_dp_measured=measured,
               dropin_dp_rng_bytes=rng,
               dropin_dp_schedule=" ".join(o.token for o in ck.schedule))
    assert simulate(chain, ck.schedule).peak_memory == ck.plan.predicted_peak
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="mlp,resnet,transformer,rnn")
    ap.add_argument("--scale", default="small")
    ap.add_argument("--fraction", type=float, default=0.5,
                    help="the drop-in's dp budget, a fraction of store-all (default 0.5)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default="benchmarks/results/unsaved_outputs.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    device = torch.device(args.device)
    records = []
    for name in args.models.split(","):
        rec = network_record(name, args.scale, args.fraction, device)
        records.append(rec)
        mb = 1e6
        line = (f"{name:12s} unsaved {rec['unsaved_outputs']} of {rec['stages']}: store-all "
                f"predicted {rec['store_all_predicted'] / mb:.3f} MB (without the field "
                f"{rec['store_all_predicted_without_field'] / mb:.3f}), plain autograd "
                f"{rec['plain_measured'] / mb:.3f}, drop-in store-all "
                f"{rec['dropin_store_all_measured'] / mb:.3f}")
        if "dropin_dp_measured" in rec:
            line += (f"; drop-in dp at {args.fraction:g}: predicted "
                     f"{rec['dropin_dp_predicted'] / mb:.3f}, measured "
                     f"{rec['dropin_dp_measured'] / mb:.3f} (+{rec['dropin_dp_rng_bytes']} B "
                     f"of RNG states)")
        print(line, flush=True)
    out = {"command": "python benchmarks/unsaved_outputs.py " + " ".join(argv or sys.argv[1:]),
           "torch": torch.__version__, "machine": platform.platform(), "records": records}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
