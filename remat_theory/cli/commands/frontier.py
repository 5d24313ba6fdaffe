"""``remat frontier --network NAME [...]``: time per training step against allocator-measured
peak memory, remat's schedules beside ``checkpoint_sequential`` and torch's memory-budgeted
compiler, interleaved in one run (see :mod:`remat_theory.torch.frontier`).  Needs torch."""
from __future__ import annotations

import json
from pathlib import Path

from remat_theory.cli.commands._common import (Ticker, check_output_dir, positive_int, print_json,
                                               torch_device)
from remat_theory.model.errors import RematError

NAME = "frontier"
ORDER = 62
HELP = "time per step vs peak memory: remat against checkpoint_sequential and torch.compile's budget"


def _floats(flag: str, text: str, low: float, high: float) -> list:
    out = []
    for part in text.replace(",", " ").split():
        try:
            v = float(part)
        except ValueError:
            raise RematError(f"{flag}: {part!r} is not a number") from None
        if not low < v <= high:
            raise RematError(f"{flag}: {part!r} must be in ({low:g}, {high:g}]")
        out.append(v)
    if not out:
        raise RematError(f"{flag} is empty")
    return out


def _ints(flag: str, text: str) -> list:
    out = []
    for part in text.replace(",", " ").split():
        if not part.isdigit() or int(part) < 1:
            raise RematError(f"{flag}: {part!r} is not a positive integer")
        out.append(int(part))
    if not out:
        raise RematError(f"{flag} is empty")
    return out


def add_arguments(p) -> None:
    p.add_argument("--network", required=True,
                   help="a built-in network (remat profile --help lists them)")
    p.add_argument("--scale", default="small", choices=("test", "small", "large"), help="network sizes")
    p.add_argument("--batch", default=None, help="comma-separated batch sizes (default: the network's)")
    p.add_argument("--size", default=None,
                   help="comma-separated input sizes (image side or sequence length; default: the network's)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto; default cpu")
    p.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads")
    p.add_argument("--solvers", default="dp", help="comma-separated remat solvers; default dp")
    p.add_argument("--fractions", default=None,
                   help="remat budgets as fractions of the store-all peak (default: a sweep "
                        "from each solver's smallest feasible budget to store-all)")
    p.add_argument("--memory-budgets", default="0.1,0.3,0.5,0.7,0.9", dest="memory_budgets",
                   help="torch._functorch activation_memory_budget values under torch.compile")
    p.add_argument("--no-compile", action="store_true", dest="no_compile",
                   help="leave out torch.compile's memory-budget points")
    p.add_argument("--compile-stages", action="store_true", dest="compile_stages",
                   help="also run remat with every stage compiled by torch.compile "
                        "(remat-compiled points, profiled compiled)")
    p.add_argument("--repeats", type=positive_int, default=7, help="interleaved timed rounds")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="write frontier_NETWORK.json and .png there (default: print only)")
    p.add_argument("--no-progress", action="store_true", dest="no_progress",
                   help="print no progress (default: elapsed time on a terminal, else a line "
                        "every few seconds, on stderr)")
    p.add_argument("--json", action="store_true", help="print the records as JSON")


def run(args) -> int:
    if args.out:
        check_output_dir(args.out, "--out")
    torch, device = torch_device(args.device, args.threads, "frontier")
    from remat_theory.torch.frontier import format_table, plot, run_frontier
    from remat_theory.torch.networks import build

    fractions = None if args.fractions is None else _floats("--fractions", args.fractions, 0.0, 1.0)
    budgets = _floats("--memory-budgets", args.memory_budgets, 0.0, 1.0)
    solvers = [s for s in args.solvers.replace(",", " ").split() if s]
    batches = [None] if args.batch is None else _ints("--batch", args.batch)
    sizes = [None] if args.size is None else _ints("--size", args.size)
    records = []
    configs = [(b, s) for b in batches for s in sizes]
    for k, (batch, size) in enumerate(configs):
        net = build(args.network, args.scale, batch=batch, size=size)
        with Ticker(f"remat frontier: {args.network} ({k + 1}/{len(configs)})",
                    enabled=not args.no_progress, lines=True):
            rec = run_frontier(net, device=device, repeats=args.repeats, solvers=solvers,
                               fractions=fractions, memory_budgets=budgets,
                               compile_budgets=not args.no_compile,
                               compile_stages=args.compile_stages)
        rec.update(scale=args.scale, batch=batch, size=size)
        records.append(rec)
        if not args.json:
            print(format_table(rec), flush=True)
            print()
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        stem = f"frontier_{args.network}"
        (out / f"{stem}.json").write_text(json.dumps(records, indent=1) + "\n")
        plot(records, out / f"{stem}.png", title=f"{args.network}: time per step vs peak memory")
        if not args.json:
            print(f"wrote {out / (stem + '.json')} and {out / (stem + '.png')}")
    if args.json:
        print_json(records)
    return 0
