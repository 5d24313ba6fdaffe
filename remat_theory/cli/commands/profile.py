"""``remat profile --model NAME [--out CHAIN.json]``: profile a torch network into a chain
file (remat-chain/1).  Needs torch.

``NAME`` is a built-in network (``mlp``, ``resnet``, ``transformer``, ``rnn``, and the
captured families of :data:`~remat_theory.lab.networks.FAMILIES`: ``tv-resnet`` and the
transformers models, which need transformers), or ``module:function``: an importable zero-argument function returning
``(model, example_inputs, loss_fn)`` (or a :class:`~remat_theory.lab.networks.Network`).
``model`` is any ``nn.Module``: an ``nn.Sequential`` or a list of modules is used as its
stages; any other model is captured with
:func:`~remat_theory.torch.capture.chain.to_stages` (``--granularity``), and ``example_inputs``
is then what ``to_stages`` takes (a tensor, a tuple, or a dict of keyword inputs).

``--offload`` also measures the copy channel (:func:`remat_theory.torch.profiling.bandwidth.measure_bandwidth`:
device <-> pinned host with CUDA events on a GPU; on the CPU the correctness mode's memcpy
rate, not a PCIe figure) and writes it as the chain's ``bandwidth``, the slower direction;
without it the chain has no ``bandwidth`` and every answer is as before.
"""
from __future__ import annotations

import argparse
import importlib

from remat_theory.cli.commands._fake_profile import add_fake_arguments, run_fake
from remat_theory.cli.commands._common import (Ticker, check_output_file, positive_int, print_json,
                                               torch_device)
from remat_theory.model import fields as chain_fields
from remat_theory.model.errors import PluginError, RematError
from remat_theory.cli.render import printable

NAME = "profile"
ORDER = 55
HELP = "profile a torch network into a chain (sizes in bytes, times in seconds)"


def granularity_arg(text: str):
    if text in ("block", "fine"):
        return text
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected block, fine or a number of stages") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: the number of stages must be >= 1")
    return v


def add_arguments(p) -> None:
    p.add_argument("--model", required=True,
                   help="mlp, resnet, transformer, rnn; captured at their layers: llama, "
                        "mistral, qwen2, opt, gpt-neo, gpt-neox, phi, gpt2, bert, roberta, "
                        "distilbert, vit, convnext, swin, hf-resnet, tv-resnet, gemma, "
                        "gemma2, falcon, bloom, gpt-j, mixtral, deit (t5-encoder: as one "
                        "graph, see docs/torch_measurement.md); "
                        "or module:function returning (model, example_inputs, loss_fn)")
    p.add_argument("--scale", default="small", choices=("test", "small", "large"), help="network sizes")
    p.add_argument("--granularity", type=granularity_arg, default="block",
                   help="cuts of a captured model: block (default: at every layer of its "
                        "repeated stack), fine (every valid cut of its graph) or N (at most N "
                        "balanced stages)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    p.add_argument("--repeats", type=positive_int, default=5, help="timed repetitions per stage")
    p.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads")
    p.add_argument("--clock", default="wall", choices=("wall", "process"),
                   help="CPU timing clock (process: CPU time, immune to other load)")
    p.add_argument("--offload", action="store_true",
                   help="measure the device<->host copy bandwidth and write it as the chain's "
                        "bandwidth (the slower direction; on the CPU a memcpy rate, not PCIe)")
    p.add_argument("--out", default=None, metavar="CHAIN.json", help="write the chain there")
    p.add_argument("--no-progress", action="store_true", dest="no_progress",
                   help="print no progress (default: elapsed time on a terminal, else a line "
                        "every few seconds, on stderr)")
    p.add_argument("--json", action="store_true", help="print the chain as JSON")
    add_fake_arguments(p)


def _from_factory(spec: str, granularity):
    """(stages model, x_0, loss_fn) from ``module:function``."""
    from remat_theory.torch import to_stages
    from remat_theory.lab.networks import Network
    from remat_theory.torch.device import is_module, is_sequential

    module_name, _, func_name = spec.partition(":")
    if not module_name or not func_name:
        raise RematError(f"--model {spec!r}: expected a built-in name or module:function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise RematError(f"--model {spec!r}: cannot import {module_name!r} ({e})") from None
    factory = getattr(module, func_name, None)
    if not callable(factory):
        raise RematError(f"--model {spec!r}: {module_name} has no function {func_name!r}")
    try:
        made = factory()
    except RematError:
        raise
    except Exception as e:  # noqa: BLE001 - the factory's own failure, named as its
        raise PluginError(f"--model {spec!r}: the factory {func_name}() raised "
                          f"{type(e).__name__}: {e}", plugin=spec) from e
    if isinstance(made, Network):
        return made.model, made.example_input, made.loss_fn
    if not (isinstance(made, tuple) and len(made) == 3 and (is_module(made[0]) or isinstance(made[0], list))):
        raise RematError(f"--model {spec!r}: the function returned {type(made).__name__}; "
                         f"expected (model, example_inputs, loss_fn) or a Network")
    model, inputs, loss_fn = made
    if is_sequential(model) or isinstance(model, list):
        return model, inputs, loss_fn
    chain = to_stages(model, inputs, granularity=granularity)
    return chain, chain.example_input, loss_fn


def run(args) -> int:
    if args.out:
        check_output_file(args.out, "--out")
    if args.fake:
        return run_fake(args)
    torch, device = torch_device(args.device, args.threads, "profile")
    from remat_theory.torch import profile_details
    from remat_theory.lab.networks import build

    if ":" in args.model:
        model, x0, loss_fn = _from_factory(args.model, args.granularity)
        name = f"{args.model.partition(':')[2]}-{device}"
    else:
        net = build(args.model, args.scale, granularity=args.granularity)
        model, x0, loss_fn = net.model, net.example_input, net.loss_fn
        name = f"{args.model}-{args.scale}-{device}"
    with Ticker(f"remat profile: {args.model}", enabled=not args.no_progress, lines=True):
        res = profile_details(model, x0, loss_fn, device, repeats=args.repeats,
                              clock=args.clock, name=name)
    chain = res.chain
    copy = None
    if args.offload:
        from remat_theory.torch.profiling.bandwidth import with_bandwidth

        chain, copy = with_bandwidth(chain, device)
    if args.out:
        chain.save(args.out)
    if args.json:
        print_json(chain.to_dict())
        return 0
    print(f"{printable(chain.name)}: {chain.length} stages on {device}; sizes in bytes, times in ms")
    _print_table(chain, res.stages)
    if copy is not None:
        print(f"copy bandwidth: {copy.to_host / 1e9:.3f} GB/s to the host, "
              f"{copy.to_device / 1e9:.3f} GB/s to the device; the chain's bandwidth is the "
              f"slower, {copy.bandwidth / 1e9:.3f} GB/s ({copy.method})")
    print(f"x_0 = {chain.x_size[0]} B; store-all peak {chain.store_all_memory()} B; "
          f"ideal makespan {chain.ideal_makespan() * 1e3:.3f} ms"
          + (f"; written to {args.out}" if args.out else ""))
    return 0


def _print_table(chain, stages) -> None:
    """One row per stage and one for the loss, one column per field of the chain's table
    (remat_theory.model.fields) that has a number per stage, in table order: a stage's row
    shows its entry and, for an activation field, its output's (x_{i+1}); the loss row the
    last entry of the backward fields.  Flags off their default are listed below it."""
    cols = [f for f in chain_fields.FIELDS if not f.scalar and f.kind != "flag"]
    heads = [f.name + (" ms" if f.kind == "time" else "") for f in cols]
    widths = [max(len(h) + 2, 11) for h in heads]

    def cell(f, i, w):
        v = getattr(chain, f.name)[i]
        return f"{v * 1e3:>{w}.3f}" if f.kind == "time" else f"{v:>{w}}"

    L = chain.length
    print(f"{'i':>3} {'stage':<24}" + "".join(f"{h:>{w}}" for h, w in zip(heads, widths)))
    for i, st in enumerate(stages):
        label = getattr(st, "label", None) or type(st).__name__
        label = label if len(label) <= 23 else "…" + label[-22:]
        print(f"{i:>3} {label:<24}" + "".join(
            cell(f, i + 1 if f.per == "activation" else i, w) for f, w in zip(cols, widths)))
    print((f"{L:>3} {'loss':<24}" + "".join(
        cell(f, L, w) if f.length == "L+1" and f.per == "stage" else " " * w
        for f, w in zip(cols, widths))).rstrip())
    for f in chain_fields.FIELDS:
        if f.kind == "flag":
            off = [i for i, v in enumerate(getattr(chain, f.name)) if v != f.default]
            if off:
                print(f"{f.name} {not f.default} at stages {', '.join(map(str, off))} "
                      f"({f.doc})")
