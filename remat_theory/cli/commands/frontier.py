"""``remat frontier --network NAME [...]``: time per training step against allocator-measured
peak memory, remat's schedules beside ``checkpoint_sequential`` and torch's memory-budgeted
compiler, interleaved in one run (see :mod:`remat_theory.lab.frontier`).  Needs torch."""
from __future__ import annotations

import json
from pathlib import Path

from remat_theory.cli.commands._common import (Ticker, check_output_dir, positive_int, print_json,
                                               torch_device)
from remat_theory.model.errors import RematError

NAME = "frontier"
ORDER = 62
HELP = ("time per step vs peak memory on the original model: remat against Hugging Face's "
        "checkpointing, checkpoint_sequential and torch.compile's memory budget")


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


def _compile_budgets(text: str) -> list:
    out = []
    for part in text.replace(",", " ").split():
        try:
            v = float(part)
        except ValueError:
            raise RematError(f"--compile-budgets: {part!r} is not a number") from None
        if not 0.0 <= v <= 1.0:
            raise RematError(f"--compile-budgets: {part!r} must be in [0, 1] "
                             f"(torch's activation_memory_budget)")
        out.append(v)
    return out


def _optimizer_bytes(text: str, gradient_bytes: int) -> int:
    kinds = {"none": 0, "sgd": 0, "sgd-momentum": 1, "adam": 2, "adamw": 2}
    t = text.strip().lower()
    if t in kinds:
        return kinds[t] * gradient_bytes
    from remat_theory.torch.plan.budget import parse_bytes
    try:
        return parse_bytes(text, "--optimizer-state")
    except RematError:
        raise RematError(f"--optimizer-state: {text!r} is not one of {', '.join(kinds)} nor "
                         f"bytes with a unit (e.g. 2GiB)") from None


METHODS = ("plain", "hf_checkpointing", "checkpoint_sequential", "compile_budget", "remat",
           "remat_compiled", "remat_offload", "remat_inplace")
"""The method families of :data:`remat_theory.lab.frontier.FAMILIES` (kept here so that
``--help`` needs no torch)."""


def _methods(text: str) -> list:
    out = [t for t in text.replace(",", " ").split() if t]
    if not out:
        raise RematError("--methods is empty")
    bad = [t for t in out if t not in METHODS]
    if bad:
        raise RematError(f"--methods: {', '.join(bad)} not among {', '.join(METHODS)}")
    return out


def add_arguments(p) -> None:
    p.add_argument("--network", required=True,
                   help="llama, qwen2, opt, gpt-neo, gpt2, distilbert, vit, convnext, swin, "
                        "resnet (transformers models, random weights), or a built-in network "
                        "of remat profile")
    p.add_argument("--scale", default="small", choices=("test", "small", "large"), help="network sizes")
    p.add_argument("--batch", default=None, help="comma-separated batch sizes (default: the network's)")
    p.add_argument("--size", default=None,
                   help="comma-separated input sizes (image side or sequence length; default: the network's)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto; default cpu")
    p.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads")
    p.add_argument("--solver", "--solvers", dest="solver", default="dp",
                   help="remat's solver (persistent schedules); default dp")
    p.add_argument("--fractions", default=None,
                   help="remat budgets as fractions of the store-all peak (default: every "
                        "breakpoint of the solver's makespan, see --max-points)")
    p.add_argument("--max-points", type=positive_int, default=16, dest="max_points",
                   help="at most this many remat breakpoints (spread by memory); default 16")
    p.add_argument("--compile-budgets", "--memory-budgets", default="0,0.3,0.6,1",
                   dest="compile_budgets",
                   help="torch._functorch activation_memory_budget values under torch.compile")
    p.add_argument("--compiled-points", type=int, default=4, dest="compiled_points",
                   help="how many single-level remat schedules (levels of the compiled "
                        "stages' chain, lowest to store-all) run as one compiled graph "
                        "(0: none)")
    p.add_argument("--backend", default="inductor",
                   help="torch.compile backend of compile_budget and remat_compiled (inductor; "
                        "aot_eager_decomp_partition runs the same partitioner with eager "
                        "kernels)")
    p.add_argument("--no-compile", action="store_true", dest="no_compile",
                   help="leave out both compiled families")
    p.add_argument("--no-hf", action="store_true", dest="no_hf",
                   help="leave out Hugging Face's activation checkpointing")
    p.add_argument("--budget-bytes", default=None, dest="budget_bytes",
                   help="comma-separated budgets of the whole step (e.g. 6GiB,40MiB): the "
                        "drop-in run with each, its step peak checked against it")
    p.add_argument("--optimizer-state", default="none", dest="optimizer_state",
                   help="with --budget-bytes, the budget also holds the optimizer state: none, "
                        "sgd-momentum, adam, or bytes (e.g. 1GiB)")
    p.add_argument("--offload", default=None, metavar="SOLVERS",
                   help="add remat_offload points: the drop-in with an offload plan of these "
                        "comma-separated solvers (e.g. save-on-cpu,offload-all,dp-offload); on "
                        "the CPU the executor's correctness mode (device peak measured, time a "
                        "memcpy's)")
    p.add_argument("--bandwidth", default="measure",
                   help="the copy channel of the remat_offload points: bytes per second, or "
                        "measure (default)")
    p.add_argument("--methods", default=None,
                   help="comma-separated method families to run: " + ", ".join(METHODS)
                        + " (plain always runs; default every one but remat_inplace, the "
                          "in-place API, which runs only when named)")
    p.add_argument("--inplace-max-points", type=positive_int, default=16,
                   dest="inplace_max_points",
                   help="at most this many breakpoints of the in-place API's plan (plus each "
                        "Hugging Face level and plain); default 16")
    p.add_argument("--tag", default=None,
                   help="with --out, write frontier_TAG_NETWORK.json/.png (default "
                        "frontier_NETWORK)")
    p.add_argument("--repeats", type=positive_int, default=5, help="interleaved timed rounds")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="write frontier_NETWORK.json and .png there (default: print only)")
    p.add_argument("--no-progress", action="store_true", dest="no_progress",
                   help="print no progress (default: elapsed time on a terminal, else a line "
                        "every few seconds, on stderr)")
    p.add_argument("--json", action="store_true", help="print the records as JSON")


def run(args) -> int:
    import shlex
    import sys

    if args.out:
        check_output_dir(args.out, "--out")

    fractions = None if args.fractions is None else _floats("--fractions", args.fractions, 0.0, 1.0)
    compile_budgets = [] if args.no_compile else _compile_budgets(args.compile_budgets)
    batches = [None] if args.batch is None else _ints("--batch", args.batch)
    sizes = [None] if args.size is None else _ints("--size", args.size)
    if args.compiled_points < 0:
        raise RematError(f"--compiled-points: {args.compiled_points} must be >= 0")
    step_budgets = []
    if args.budget_bytes is not None:
        from_text = [t for t in args.budget_bytes.replace(",", " ").split() if t]
        if not from_text:
            raise RematError("--budget-bytes is empty")
        step_budgets = from_text
    offload_solvers = [] if not args.offload else [t for t in args.offload.replace(",", " ").split()]
    bandwidth = args.bandwidth
    if bandwidth != "measure":
        try:
            bandwidth = float(bandwidth)
        except ValueError:
            raise RematError(f"--bandwidth {args.bandwidth!r}: expected bytes per second or "
                             f"measure") from None
        if not bandwidth > 0:
            raise RematError(f"--bandwidth {args.bandwidth!r} must be > 0")
    families = None if args.methods is None else _methods(args.methods)
    if args.tag is not None and not args.tag.replace("-", "").replace("_", "").isalnum():
        raise RematError(f"--tag {args.tag!r}: letters, digits, - and _ only")
    torch, device = torch_device(args.device, args.threads, "frontier")
    from remat_theory.lab.frontier import format_table, plot, run_frontier
    from remat_theory.lab.frontier import DEFAULT_FAMILIES
    from remat_theory.lab.frontier_networks import WORKLOADS, build_workload
    from remat_theory.torch.plan.budget import gradient_bytes, parse_bytes

    for text in step_budgets:
        parse_bytes(text, "--budget-bytes")
    command = "remat " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    records = []
    configs = [(b, s) for b in batches for s in sizes]
    for k, (batch, size) in enumerate(configs):
        staged = {"remat", "checkpoint_sequential", "remat_offload", "remat_compiled"}
        capture = (args.network not in WORKLOADS or args.budget_bytes is not None
                   or bool(staged & set(DEFAULT_FAMILIES if families is None else families)))
        w = build_workload(args.network, args.scale, batch=batch, size=size,
                           **({} if capture else {"granularity": None}))
        budgets = None
        if fractions is not None and w.stages is not None:
            from remat_theory.torch.profiling.profiler import profile
            store_all = profile(list(w.stages), w.example_input, w.loss_fn,
                                repeats=1).store_all_memory()
            budgets = [max(1, int(f * store_all)) for f in fractions]
        opt = 0 if w.stages is None else _optimizer_bytes(args.optimizer_state,
                                                          gradient_bytes(w.stages))
        with Ticker(f"remat frontier: {args.network} ({k + 1}/{len(configs)})",
                    enabled=not args.no_progress, lines=True):
            rec = run_frontier(w, device=device, repeats=args.repeats, solver=args.solver,
                               budgets=budgets, max_points=args.max_points,
                               compile_budgets=compile_budgets,
                               compiled_points=0 if args.no_compile else args.compiled_points,
                               backend=args.backend, hf=not args.no_hf,
                               step_budgets=step_budgets, optimizer_bytes=opt,
                               offload_solvers=offload_solvers, bandwidth=bandwidth,
                               families=families, inplace_max_points=args.inplace_max_points)
        rec.update(scale=args.scale, batch=batch, size=size, command=command)
        records.append(rec)
        if not args.json:
            print(format_table(rec), flush=True)
            print()
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        stem = f"frontier_{args.network}" if args.tag is None else f"frontier_{args.tag}_{args.network}"
        (out / f"{stem}.json").write_text(json.dumps(records, indent=1) + "\n")
        plot(records, out / f"{stem}.png", title=f"{args.network}: time per step vs peak memory")
        if not args.json:
            print(f"wrote {out / (stem + '.json')} and {out / (stem + '.png')}")
    if args.json:
        print_json(records)
    return 0
