"""The cost model's error on this CPU: estimated against measured operation times.

    python benchmarks/realsize_cost.py

For each family at a medium configuration (hidden 256, 2 layers, batch 4, sequence 256,
fp32, one thread): the in-place API's real profile times each operation (no-grad forward,
recording forward, backward per layer, the loss stage; the faster of two timed passes), and
the fake profile's work on the CPU's measured rates (:func:`remat_theory.torch.realsize.devices.measure_cpu`)
gives the estimate.  Reported: estimate / measured per operation (median, range) and for the
plain step (forward and backward of every layer and the loss).  Results:
benchmarks/results/realsize_cost.json.
"""
from __future__ import annotations

import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "results", "realsize_cost.json")

_DEC = dict(vocab_size=2000, hidden_size=256, intermediate_size=688, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=512)
MEDIUM = {
    "llama-2-7b": _DEC,
    "gpt2-xl": dict(vocab_size=2000, n_positions=512, n_embd=256, n_layer=2, n_head=4),
    "bert-large": dict(vocab_size=2000, hidden_size=256, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=1024, max_position_embeddings=512),
    "t5-large": dict(vocab_size=2000, d_model=256, d_kv=64, d_ff=1024, num_layers=2,
                     num_decoder_layers=2, num_heads=4),
    "vit-l/16": dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=1024, image_size=128, patch_size=8, num_labels=10),
    "convnext-large": dict(hidden_sizes=[64, 128], depths=[2, 2], num_stages=2, image_size=128,
                           num_labels=10),
}
BATCH, SEQ = 4, 256


def main() -> None:
    import torch
    import transformers

    from remat_theory.torch.inplace import default_loss
    from remat_theory.torch.inplace.layers import find_layers
    from remat_theory.torch.inplace.profile import profile_layers
    from remat_theory.torch.realsize.chain import real_size_profile
    from remat_theory.torch.realsize.devices import measure_cpu, op_time
    from remat_theory.torch.realsize.presets import make_batch, spec_of
    import dataclasses
    import math
    torch.set_num_threads(1)
    raw = dataclasses.replace(measure_cpu(), compute_efficiency=1.0, memory_efficiency=1.0)
    measured = {}
    for name, over in MEDIUM.items():
        spec = spec_of(name, over)
        torch.manual_seed(0)
        model = getattr(transformers, spec.model_class)(spec.config).train()
        data = make_batch(spec, BATCH, SEQ)
        layers, _ = find_layers(model, (), data)
        real = profile_layers(model, layers, (), data, default_loss).chain
        fake = real_size_profile(spec, BATCH, SEQ, "fp32", replicate=False,
                             fused_attention=False)
        n = len(layers)
        ops = []
        for i in range(n):
            ops += [("fck", fake.fck[i], real.fwd_time[i]), ("fall", fake.fall[i], real.fall_time[i]),
                    ("bwd", fake.bwd[i], real.bwd_time[i])]
        ops.append(("loss", fake.loss, real.bwd_time[n]))
        measured[name] = ops
    # one real run calibrates: the two efficiencies that fit the first family's operations
    # best (least squares of log(estimate / measured) on a grid), then held out: the rest
    first = next(iter(MEDIUM))
    grid = [2 ** (-k / 4) for k in range(0, 41)]

    def loss_of(ce, me):
        dev = dataclasses.replace(raw, compute_efficiency=ce, memory_efficiency=me)
        return sum(math.log(op_time(w, dev) / m) ** 2 for _, w, m in measured[first])

    ce, me = min(((a, b) for a in grid for b in grid), key=lambda p: loss_of(*p))
    cpu = dataclasses.replace(raw, compute_efficiency=ce, memory_efficiency=me)
    rows, ratios, held = [], [], []
    for name, ops in measured.items():
        pairs = [(k, op_time(w, cpu), m) for k, w, m in ops]
        r = [e / m for _, e, m in pairs]
        ratios += r
        raw_r = [op_time(w, raw) / m for _, w, m in ops]
        est = sum(e for k, e, _ in pairs if k != "fck")
        meas = sum(m for k, _, m in pairs if k != "fck")
        if name != first:
            held.append(est / meas)
        rows.append(dict(family=name, calibrated_on=name == first,
                         uncalibrated_op_ratio_median=statistics.median(raw_r), ops=[dict(op=k, estimate=e, measured=m) for k, e, m in pairs],
                         step_estimate=est, step_measured=meas, step_ratio=est / meas,
                         op_ratio_median=statistics.median(r), op_ratio_min=min(r),
                         op_ratio_max=max(r)))
        print(f"{name:16s} step estimate / measured {est / meas:.3f}; per operation median "
              f"{statistics.median(r):.3f} ({min(r):.3f}-{max(r):.3f})", flush=True)
    out = dict(command="python benchmarks/realsize_cost.py " + " ".join(sys.argv[1:]),
               cpu=dict(fp32_flops=cpu.fp32, bf16_flops=cpu.bf16, bandwidth=cpu.bandwidth,
                        launch=cpu.launch, threads=1, compute_efficiency=ce,
                        memory_efficiency=me, calibrated_on=first),
               held_out_step_ratio_min=min(held), held_out_step_ratio_max=max(held),
               batch=BATCH, seq=SEQ, families=rows,
               op_ratio_median=statistics.median(ratios), op_ratio_min=min(ratios),
               op_ratio_max=max(ratios))
    print(f"CPU: {cpu.fp32 / 1e9:.1f} GFLOP/s fp32, {cpu.bandwidth / 1e9:.1f} GB/s, "
          f"{cpu.launch * 1e6:.1f} us per call; efficiencies fitted on {first}: compute "
          f"{ce:.3f}, memory {me:.3f}; held-out steps {min(held):.3f}-{max(held):.3f}; "
          f"all operations: median "
          f"{out['op_ratio_median']:.3f} ({out['op_ratio_min']:.3f}-{out['op_ratio_max']:.3f})")
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
