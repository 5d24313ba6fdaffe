"""``remat plan CONFIG --batch B --seq S --dtype bf16 --gpu H100-80GB [--memory 80GB]
[--out PLAN.json] [--json]``: which layers of a transformers model to keep and which to
recompute at its real size on a device, from a profile on fake tensors (nothing allocated,
nothing downloaded; docs/plan.md).  Needs torch and transformers.

CONFIG is a preset (``remat plan --list``) or a transformers ``config.json``.  The answer
compares remat's schedule with store-all and Hugging Face's every-layer checkpointing at
their predicted step peaks and estimated times (torch's ``sac_milp`` needs CUDA for its
runtime estimates: docs/plan.md);
where nothing fits it names the largest batch (or sequence) that does.
"""
from __future__ import annotations

import json

from remat_theory.cli.commands._common import check_output_file, positive_int, print_json
from remat_theory.model.errors import RematError

NAME = "plan"
ORDER = 57
HELP = ("plan a transformers model's recomputation at its real size on a GPU, from fake "
        "tensors (no GPU, no download)")


def add_arguments(p) -> None:
    p.add_argument("config", nargs="?", default=None,
                   help="a preset (llama-2-7b, llama-2-13b, llama-2-70b, mistral-7b, qwen2-7b, "
                        "gpt2-xl, bert-large, t5-large, bart-large, vit-l/16, convnext-large) "
                        "or a transformers config.json")
    p.add_argument("--list", action="store_true", help="list the presets and devices")
    p.add_argument("--batch", type=positive_int, default=1, help="sequences (images) per step")
    p.add_argument("--seq", type=positive_int, default=2048,
                   help="sequence length (ignored for images)")
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp32", "mixed"),
                   help="bf16: parameters and activations in bf16; fp32; mixed: fp32 "
                        "parameters, bf16 autocast")
    p.add_argument("--gpu", default="H100-80GB",
                   help="A100-40GB, A100-80GB, H100-80GB, H200, L4, RTX-4090 or cpu (measured)")
    p.add_argument("--memory", default=None,
                   help="device memory to plan for instead of the GPU's, e.g. 80GB or 40GiB")
    p.add_argument("--optimizer", default="adam", choices=("adam", "sgd"),
                   help="optimizer state kept resident (adam: two moments per parameter)")
    p.add_argument("--solver", default="dp", help="solver of the layers' chain (default dp)")
    p.add_argument("--no-search", action="store_true", dest="no_search",
                   help="where nothing fits, do not search the largest batch or sequence")
    p.add_argument("--out", default=None, metavar="PLAN.json", help="write the plan there")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")


def _gb(n) -> str:
    return "-" if n is None else f"{n / 2**30:.2f} GiB"


def run(args) -> int:
    try:
        from remat_theory.torch.plan.budget import parse_bytes
    except ImportError:
        raise RematError("remat plan needs torch (pip install torch==2.13.0)") from None
    from remat_theory.torch.realsize.devices import DEVICES, device_named
    from remat_theory.torch.realsize.planner import plan_model
    from remat_theory.torch.realsize.presets import PRESETS, load_config

    if args.list:
        print("presets: " + ", ".join(PRESETS))
        for d in DEVICES.values():
            print(f"{d.name}: {_gb(d.memory)} usable, {d.bf16 / 1e12:g} TFLOP/s bf16, "
                  f"{d.fp32 / 1e12:g} fp32, {d.bandwidth / 1e9:g} GB/s")
        return 0
    if args.config is None:
        raise RematError("CONFIG is required (a preset or a config.json; --list names them)")
    if args.out:
        check_output_file(args.out, "--out")
    memory = None if args.memory is None else parse_bytes(args.memory, "--memory")
    spec = load_config(args.config)
    device = device_named(args.gpu)
    plan = plan_model(spec, args.batch, args.seq, args.dtype, device, memory=memory,
                      optimizer=args.optimizer, solver=args.solver, search=not args.no_search)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(plan, f, indent=1)
    if args.json:
        print_json(plan)
        return 0
    _print(plan, args)
    return 0


def _print(plan, args) -> None:
    n = len(plan["layers"])
    print(f"{plan['model']} ({plan['model_class']}, {plan['parameters'] / 1e9:.2f} B parameters, "
          f"{n} layers; {plan['profiled_layers']} profiled on fake tensors) at batch "
          f"{plan['batch']}, sequence {plan['seq']}, {plan['dtype']}, on {plan['device']} "
          f"({_gb(plan['memory'])})")
    print(f"resident: parameters and {plan['optimizer']} state {_gb(plan['resident'])}; the "
          f"training step may use {_gb(plan['step_budget'])}")
    print(f"{'strategy':<22}{'step peak':>14}{'fits':>6}{'layers recomputed':>19}{'est. time':>12}")
    for o in plan["options"]:
        t = "-" if o.get("time") is None else f"{o['time']:.3f} s"
        fits = "-" if o.get("fits") is None else ("yes" if o["fits"] else "no")
        rec = "-" if o.get("recomputed") is None else str(o["recomputed"])
        print(f"{o['name']:<22}{_gb(o.get('step_peak')):>14}{fits:>6}{rec:>19}{t:>12}")
    if plan["fits"]:
        rec = plan["recompute"]
        print(f"remat: recompute {len(rec)} of {n} layers ({_span(rec)}); predicted step peak "
              f"{_gb(plan['predicted_step_peak'])}, estimated step time "
              f"{plan['estimated_time']:.3f} s (forward and backward)")
    else:
        why = plan.get("reason") or "no schedule fits"
        more = ""
        if plan.get("largest_batch"):
            more = f"; the largest batch that fits is {plan['largest_batch']}"
            if plan.get("largest_seq"):
                more = f"; at batch 1 the longest sequence that fits is {plan['largest_seq']}"
        elif "largest_batch" in plan:
            more = "; not even batch 1 at sequence 1 fits"
        print(f"does not fit: {why}{more}")
    if plan.get("caution"):
        print(f"caution: {plan['caution']}")
    if args.out:
        print(f"plan written to {args.out}")


def _span(paths) -> str:
    if not paths:
        return "none"
    if len(paths) <= 4:
        return ", ".join(paths)
    return f"{paths[0]} ... {paths[-1]}"
