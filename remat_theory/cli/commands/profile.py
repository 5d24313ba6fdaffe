"""``remat profile --model NAME [--out CHAIN.json]``: profile a built-in torch network into a
chain file (remat-chain/1).  Needs torch."""
from __future__ import annotations

from remat_theory.cli.commands._common import positive_int, print_json, torch_device

NAME = "profile"
ORDER = 55
HELP = "profile a built-in torch network into a chain (sizes in bytes, times in seconds)"


def add_arguments(p) -> None:
    p.add_argument("--model", required=True, help="mlp, resnet, transformer or rnn")
    p.add_argument("--scale", default="small", choices=("test", "small", "large"), help="network sizes")
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    p.add_argument("--repeats", type=positive_int, default=5, help="timed repetitions per stage")
    p.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads")
    p.add_argument("--clock", default="wall", choices=("wall", "process"),
                   help="CPU timing clock (process: CPU time, immune to other load)")
    p.add_argument("--out", default=None, metavar="CHAIN.json", help="write the chain there")
    p.add_argument("--json", action="store_true", help="print the chain as JSON")


def run(args) -> int:
    torch, device = torch_device(args.device, args.threads, "profile")
    from remat_theory.torch import build, profile_details

    net = build(args.model, args.scale)
    res = profile_details(net.model, net.example_input, net.loss_fn, device,
                          repeats=args.repeats, clock=args.clock, name=f"{args.model}-{args.scale}-{device}")
    chain = res.chain
    if args.out:
        chain.save(args.out)
    if args.json:
        print_json(chain.to_dict())
        return 0
    print(f"{chain.name}: {chain.length} stages on {device}; sizes in bytes, times in ms")
    print(f"{'i':>3} {'stage':<24}{'fwd ms':>9}{'bwd ms':>9}{'x_size':>11}{'tape':>11}{'fwd ovh':>10}{'bwd ovh':>10}")
    for i, st in enumerate(res.stages):
        print(f"{i:>3} {type(st).__name__:<24}{chain.fwd_time[i] * 1e3:>9.3f}{chain.bwd_time[i] * 1e3:>9.3f}"
              f"{chain.x_size[i + 1]:>11}{chain.tape_size[i]:>11}{chain.fwd_overhead[i]:>10}"
              f"{chain.bwd_overhead[i]:>10}")
    L = chain.length
    print(f"{L:>3} {'loss':<24}{'':>9}{chain.bwd_time[L] * 1e3:>9.3f}{'':>11}{'':>11}{'':>10}"
          f"{chain.bwd_overhead[L]:>10}")
    print(f"x_0 = {chain.x_size[0]} B; store-all peak {chain.store_all_memory()} B; "
          f"ideal makespan {chain.ideal_makespan() * 1e3:.3f} ms"
          + (f"; written to {args.out}" if args.out else ""))
    return 0
