"""``remat profile --model NAME --fake``: the layers' chain of a transformers model at its
real configuration, from fake tensors (:mod:`remat_theory.torch.realsize`; docs/plan.md).
NAME is a preset of ``remat plan --list`` or a transformers ``config.json``; sizes in bytes
as the allocator would hold them, times from the cost model of ``--gpu`` (default: this
CPU, measured)."""
from __future__ import annotations

from remat_theory.cli.commands._common import positive_int, print_json


def add_fake_arguments(p) -> None:
    g = p.add_argument_group("--fake (a transformers model at its real size, on fake tensors)")
    g.add_argument("--fake", action="store_true",
                   help="profile --model (a preset or a config.json) on fake tensors: nothing "
                        "allocated, times from a device's cost model")
    g.add_argument("--batch", type=positive_int, default=1, help="with --fake: batch size")
    g.add_argument("--seq", type=positive_int, default=2048, help="with --fake: sequence length")
    g.add_argument("--dtype", default="bf16", choices=("bf16", "fp32", "mixed"),
                   help="with --fake: bf16, fp32 or mixed (fp32 parameters, bf16 autocast)")
    g.add_argument("--gpu", default="cpu", help="with --fake: the device whose cost model "
                   "times the stages (H100-80GB, A100-80GB, ...; default cpu, measured)")


def run_fake(args) -> int:
    from remat_theory.torch.realsize.chain import real_size_profile
    from remat_theory.torch.realsize.devices import device_named
    from remat_theory.torch.realsize.planner import timed
    from remat_theory.torch.realsize.presets import load_config

    spec = load_config(args.model)
    rs = real_size_profile(spec, args.batch, args.seq, args.dtype)
    chain = timed(rs, device_named(args.gpu)).chain
    if args.out:
        chain.save(args.out)
    if args.json:
        print_json(chain.to_dict())
        return 0
    print(f"{spec.name}: {chain.length} layers ({rs.profiled_layers} profiled on fake tensors), "
          f"batch {args.batch}, sequence {args.seq}, {args.dtype}; times on {args.gpu}")
    print(f"x_0 = {chain.x_size[0]} B; store-all peak {chain.store_all_memory()} B; "
          f"ideal makespan {chain.ideal_makespan() * 1e3:.3f} ms"
          + (f"; written to {args.out}" if args.out else ""))
    return 0
