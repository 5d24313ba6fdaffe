"""``remat plan`` for the named models on three devices: remat against store-all and Hugging
Face's every-layer checkpointing (predicted step peak, estimated time).

    python benchmarks/realsize_plans.py

Results: benchmarks/results/realsize_plans.json (each plan without its chain and schedule).
"""
from __future__ import annotations

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "results", "realsize_plans.json")
MODELS = [("llama-2-7b", 4, 4096), ("llama-2-13b", 2, 4096), ("llama-2-70b", 1, 4096),
          ("mistral-7b", 4, 4096), ("gpt2-xl", 8, 1024), ("bert-large", 32, 512),
          ("t5-large", 16, 512), ("vit-l/16", 128, 1), ("convnext-large", 128, 1),
          ("resnet-50", 256, 1)]
DEVICES = ["A100-80GB", "H100-80GB", "H200"]


def main() -> None:
    from remat_theory.torch.realsize.devices import device_named
    from remat_theory.torch.realsize.planner import plan_model
    from remat_theory.torch.realsize.presets import spec_of
    rows = []
    for name, batch, seq in MODELS:
        for dev in DEVICES:
            t0 = time.perf_counter()
            p = plan_model(spec_of(name), batch, seq, "bf16", device_named(dev))
            wall = time.perf_counter() - t0
            for k in ("chain", "schedule", "layers"):
                p.pop(k, None)
            p["wall_s"] = wall
            rows.append(p)
            opts = {o["name"]: o for o in p["options"]}
            hf, rm = opts["hf-every-layer"], opts.get("remat")
            at = opts.get("remat-at-hf-memory")
            line = (f"{name:15s} {dev:10s} b{batch:<4d}"
                    + (f" remat {rm['step_peak'] / 2**30:7.2f} GiB {rm['time']:.3f} s "
                       f"({len(p['recompute'])} layers recomputed, {p['source']})" if rm else
                       f" does not fit: {p.get('reason')}; largest batch {p.get('largest_batch')}"
                       f" seq {p.get('largest_seq')}")
                    + f" | HF {hf['step_peak'] / 2**30:.2f} GiB {hf['time']:.3f} s"
                    + (f" | remat at HF's memory {at['time']:.3f} s" if at else ""))
            print(line, flush=True)
    with open(OUT, "w") as f:
        json.dump(dict(command="python benchmarks/realsize_plans.py " + " ".join(sys.argv[1:]),
                       plans=rows), f, indent=1)


if __name__ == "__main__":
    main()
