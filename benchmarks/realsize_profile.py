"""Fake-tensor chains against the real CPU profile, and the cost of profiling at real size.

    python benchmarks/realsize_profile.py            # both parts
    python benchmarks/realsize_profile.py --fidelity # families at small sizes only
    python benchmarks/realsize_profile.py --scale    # real-size profiles only
    python benchmarks/realsize_profile.py --workspace # this CPU's convolution workspaces

Fidelity: for each preset's family at its small configuration (TINY, batch 2, sequence 16,
fp32, one thread), the in-place API's real CPU profile (the allocator's accounting) and
the fake one (this CPU's kernel workspaces measured): per field the largest relative
difference, whether both steps placed every gradient alike, and the step peaks each
profile predicts for store-all and every layer checkpointed (fake / real).  Scale: each
real-size profile in a fresh process (wall time, and its peak RSS as the child reads it
itself).  Workspace: this CPU's convolution workspaces at a few shapes, as the fake
profile measures them.  Results: benchmarks/results/realsize_profile.json.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "results", "realsize_profile.json")
SCALE = [("llama-2-7b", 8, 4096), ("llama-2-13b", 8, 4096), ("llama-2-70b", 1, 4096),
         ("mistral-7b", 8, 4096), ("gpt2-xl", 8, 1024), ("bert-large", 32, 512),
         ("t5-large", 8, 512), ("vit-l/16", 64, 1), ("convnext-large", 64, 1),
         ("resnet-50", 128, 1)]


def fidelity() -> list:
    import torch
    import transformers

    from remat_theory.torch.inplace import default_loss
    from remat_theory.torch.inplace.layers import find_layers
    from remat_theory.torch.inplace.plan import calibrate, measured_gradients, step_peak
    from remat_theory.torch.inplace.profile import profile_layers
    from remat_theory.torch.realsize.chain import real_size_profile
    from remat_theory.torch.realsize.planner import hf_schedule, store_all_schedule
    from remat_theory.torch.realsize.presets import TINY, make_batch, spec_of
    torch.set_num_threads(1)
    rows = []
    for name in TINY:
        spec = spec_of(name, TINY[name])
        torch.manual_seed(0)
        model = getattr(transformers, spec.model_class)(spec.config).train()
        data = make_batch(spec, 2, 16)
        layers, _ = find_layers(model, (), data)
        real = profile_layers(model, layers, (), data, default_loss)
        t0 = time.process_time()
        fake = real_size_profile(spec, 2, 16, "fp32", replicate=False, fused_attention=False,
                                 cpu_workspace=True)
        cpu = time.process_time() - t0
        fp = fake.profile
        diff = {}
        for key in ("x_size", "tape_size", "fwd_overhead", "fall_overhead", "bwd_overhead"):
            a, b = getattr(real.chain, key), getattr(fp.chain, key)
            diff[key] = max(abs(u - v) / max(u, 1) for u, v in zip(a, b))
        for key in ("prefix_bytes", "end_peak", "shared_grad_bytes", "loss_rise"):
            a, b = getattr(real, key), getattr(fp, key)
            diff[key] = abs(a - b) / max(a, 1)
        diff["bwd_rise"] = max(abs(u - v) / max(u, 1) for u, v in zip(real.bwd_rise, fp.bwd_rise))
        # each profile's own prediction, as its API makes it: the real one with the gradients
        # its step placed, the fake one with those its step placed
        grads = measured_gradients(real, fake.gradients)
        calibrate(real, grads)
        n = len(layers)
        peaks = {}
        for label, sched in (("store_all", store_all_schedule(n)), ("hf", hf_schedule(n))):
            a = step_peak(real, sched, grads)[0]
            b = step_peak(fp, sched, fake.gradients)[0]
            peaks[label] = dict(real=a, fake=b, ratio=b / a)
        exact = all(v == 0 for v in diff.values())
        rows.append(dict(family=name, model_class=spec.model_class, layers=n,
                         paths_equal=[lc.path for lc in layers] == fake.paths, exact=exact,
                         grads_placed_equal=fp.grads_made == real.grads_made,
                         max_relative_difference=diff, step_peaks=peaks,
                         plain_step_real=real.plain_step_measured,
                         plain_step_fake=fake.plain_step, fake_profile_cpu_s=cpu))
        print(f"{name:16s} exact={exact!s:5s} grads={fp.grads_made == real.grads_made!s:5s} "
              + " ".join(f"{k}={v:.5f}" for k, v in diff.items() if v)
              + f"  store-all fake/real {peaks['store_all']['ratio']:.5f}"
              + f"  every-layer {peaks['hf']['ratio']:.5f}", flush=True)
    return rows


# (batch, in channels, out channels, image, kernel, stride, padding, groups, channels-last)
CONVS = [(2, 3, 32, 32, 8, 8, 0, 1, False), (4, 3, 32, 32, 8, 8, 0, 1, False),
         (2, 3, 64, 32, 8, 8, 0, 1, False), (2, 3, 32, 64, 8, 8, 0, 1, False),
         (2, 16, 32, 8, 2, 2, 0, 1, False), (2, 32, 64, 8, 2, 2, 0, 1, False),
         (2, 64, 64, 8, 3, 1, 1, 1, False), (2, 64, 128, 16, 3, 1, 1, 1, False),
         (2, 64, 64, 8, 1, 1, 0, 1, False),
         (2, 16, 16, 8, 7, 1, 3, 16, False), (2, 64, 64, 8, 7, 1, 3, 64, False),
         (2, 16, 16, 8, 7, 1, 3, 16, True), (8, 16, 16, 8, 7, 1, 3, 16, True),
         (2, 16, 16, 32, 7, 1, 3, 16, True), (2, 64, 64, 8, 7, 1, 3, 64, True),
         (2, 256, 256, 8, 7, 1, 3, 256, True)]


def workspace() -> list:
    """This CPU's convolution workspaces (one thread, fp32) as the fake profile measures
    them (:class:`remat_theory.torch.realsize.workspace.CpuWorkspace`): the forward's, and
    the backward's with the weight's and bias's gradients out of the count (the meter takes
    them out), against the bytes of the tensors each call reads."""
    import torch

    from remat_theory.torch.realsize.workspace import CpuWorkspace
    torch.set_num_threads(1)
    ws, rows = CpuWorkspace(), []
    aten = torch.ops.aten
    for n, cin, cout, hw, k, st, pad, g, last in CONVS:
        x = torch.zeros(n, hw, hw, cin).permute(0, 3, 1, 2) if last else torch.zeros(n, cin, hw, hw)
        w, b = torch.zeros(cout, cin // g, k, k), torch.zeros(cout)
        conv = (x, w, b, [st, st], [pad, pad], [1, 1], False, [0, 0], g)
        y = aten.convolution.default(*conv)
        gy = torch.zeros_like(y)
        fwd = ws(aten.convolution.default, conv, {}).workspace()
        bwd_args = (gy, x, w, [cout], [st, st], [pad, pad], [1, 1], False, [0, 0], g,
                    [True, True, True])
        bwd = ws(aten.convolution_backward.default, bwd_args, {}).workspace(frozenset({1, 2}))
        nbytes = lambda *ts: sum(t.numel() * t.element_size() for t in ts)  # noqa: E731
        row = dict(batch=n, cin=cin, cout=cout, image=hw, kernel=k, stride=st, padding=pad,
                   groups=g, channels_last=last, forward=fwd, backward=bwd,
                   forward_reads=nbytes(x, w, b), backward_reads=nbytes(gy, x, w))
        rows.append(row)
        print(f"N{n} C{cin}->{cout} {hw}x{hw} k{k} s{st} g{g}{' channels-last' if last else ''}: "
              f"forward {fwd} B ({fwd / row['forward_reads']:.2f}x its reads), backward {bwd} B "
              f"({bwd / row['backward_reads']:.2f}x)", flush=True)
    return rows


def _one(name, batch, seq) -> None:
    from remat_theory.torch.realsize.chain import real_size_profile
    from remat_theory.torch.realsize.presets import spec_of
    t0 = time.perf_counter()
    rs = real_size_profile(spec_of(name), batch, seq, "bf16")
    wall = time.perf_counter() - t0
    import resource
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MB (Linux: KiB)
    print(json.dumps(dict(model=name, batch=batch, seq=seq, dtype="bf16", wall_s=wall,
                          max_rss_mb=rss,
                          layers=len(rs.paths), profiled_layers=rs.profiled_layers,
                          parameters=rs.params,
                          store_all_activation_bytes=rs.profile.store_all_bytes)))


def scale() -> list:
    rows = []
    for name, batch, seq in SCALE:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, __file__, "--one", name, str(batch), str(seq)],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        text = proc.stdout.read()
        status = proc.wait()
        wall = time.perf_counter() - t0
        if status != 0:
            raise SystemExit(f"{name}: the profile failed")
        row = json.loads(text.strip().splitlines()[-1])
        row.update(process_wall_s=wall)  # max_rss_mb: the child's own (a fork's count
        # would start from the parent's)
        rows.append(row)
        print(f"{name:16s} batch {batch:3d} seq {seq:5d}: profile {row['wall_s']:.1f} s "
              f"(process {wall:.1f} s), RSS {row['max_rss_mb']:.0f} MB", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fidelity", action="store_true")
    ap.add_argument("--scale", action="store_true")
    ap.add_argument("--workspace", action="store_true")
    ap.add_argument("--one", nargs=3, metavar=("MODEL", "BATCH", "SEQ"))
    a = ap.parse_args()
    if a.one:
        _one(a.one[0], int(a.one[1]), int(a.one[2]))
        return
    both = not (a.fidelity or a.scale or a.workspace)
    results = json.load(open(OUT)) if os.path.exists(OUT) else {}
    command = "python benchmarks/realsize_profile.py " + " ".join(sys.argv[1:])
    if a.fidelity or both:
        results["fidelity"] = fidelity()
        results["fidelity_command"] = command
    if a.workspace:
        results["workspace"] = workspace()
        results["workspace_command"] = command
    if a.scale or both:
        results["scale"] = scale()
        results["scale_command"] = command
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
