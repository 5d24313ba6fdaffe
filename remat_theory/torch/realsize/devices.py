"""Named devices and the cost model that turns an operation's work into seconds.

The cost model is a roofline per aten call: a call doing ``f`` floating-point operations
(torch's ``torch.utils.flop_counter`` formulas: matrix products, convolutions, attention;
zero for the rest) and moving ``b`` bytes (every tensor argument read once, every new
output written once) takes ``max(f / peak, b / bandwidth) + launch``; an operation's time
is the sum over its calls.  ``peak`` is the device's dense rate for the call's dtype (bf16 /
fp16 tensor cores, or fp32 without TF32, torch's default for matrix products), from the
vendors' data sheets; ``launch`` is a fixed cost per call (a kernel launch, or on the CPU the
dispatcher's overhead).  A GPU's figures are peaks, so its estimates are lower bounds of
what the device achieves (no device was available to calibrate them: docs/plan.md).  The
CPU's are measured here (:func:`measure_cpu`): the rate of a large matrix product, of a
large copy and the cost of a tiny operation, on the threads torch uses; the estimate's
error on this CPU is measured by ``benchmarks/realsize_cost.py``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from remat_theory.model.errors import RematError


__all__ = ["DEVICES", "Device", "device_named", "measure_cpu", "op_time"]

GiB = 2**30


@dataclass(frozen=True)
class Device:
    """``memory`` (bytes the allocator can hand out: the card's memory less ``reserve``),
    ``bf16``/``fp32`` (dense floating-point operations per second), ``bandwidth`` (bytes per
    second), ``launch`` (seconds per aten call)."""

    name: str
    memory: int
    bf16: float
    fp32: float
    bandwidth: float
    launch: float = 5e-6
    note: str = ""
    compute_efficiency: float = 1.0  # share of the peak rate a matrix product achieves
    memory_efficiency: float = 1.0  # share of the bandwidth a memory-bound call achieves


RESERVE = GiB  # the CUDA context, cuBLAS workspaces and the caching allocator's slack

# data-sheet figures (dense, no sparsity); memory as nvidia-smi reports it (MiB)
DEVICES = {
    "A100-40GB": Device("A100-40GB", 40960 * 2**20 - RESERVE, 312e12, 19.5e12, 1.555e12,
                        note="SXM4; fp32 without TF32"),
    "A100-80GB": Device("A100-80GB", 81920 * 2**20 - RESERVE, 312e12, 19.5e12, 2.039e12,
                        note="SXM4"),
    "H100-80GB": Device("H100-80GB", 81559 * 2**20 - RESERVE, 989e12, 67e12, 3.35e12,
                        note="SXM5"),
    "H200": Device("H200", 143771 * 2**20 - RESERVE, 989e12, 67e12, 4.8e12, note="SXM"),
    "L4": Device("L4", 23034 * 2**20 - RESERVE, 121e12, 30.3e12, 300e9),
    "RTX-4090": Device("RTX-4090", 24564 * 2**20 - RESERVE, 165.2e12, 82.6e12, 1.008e12,
                       note="bf16 with fp32 accumulation"),
}
_ALIASES = {"rtx4090": "RTX-4090", "rtx-4090": "RTX-4090", "4090": "RTX-4090",
            "h100": "H100-80GB", "h100-80gb": "H100-80GB", "h200": "H200",
            "a100": "A100-80GB", "a100-80gb": "A100-80GB", "a100-40gb": "A100-40GB",
            "l4": "L4"}


def device_named(name: str) -> Device:
    """A device of :data:`DEVICES` by name (case and the usual short names accepted), or
    ``"cpu"``: this machine's CPU, measured."""
    if name.lower() == "cpu":
        return measure_cpu()
    key = name if name in DEVICES else _ALIASES.get(name.lower())
    if key is None:
        raise RematError(f"gpu {name!r} is not known: {', '.join(DEVICES)} or cpu "
                         f"(or give --memory)")
    return DEVICES[key]


_CPU: dict = {}
#: (compute, memory) efficiencies of the CPU's model, fitted on one family's real profile
#: (Llama at hidden 256) by ``python benchmarks/realsize_cost.py``; its held-out error on
#: the other families is in docs/plan.md
CPU_EFFICIENCY = (0.354, 0.25)


def measure_cpu(memory: int | None = None) -> Device:
    """This CPU on torch's current threads: the fp32 rate of a 512x512 matrix product, the
    bandwidth of a 64 MiB copy, the time of an operation on 16 floats (best of a few)."""
    import torch
    threads = torch.get_num_threads()
    if threads not in _CPU:
        a, b = torch.randn(512, 512), torch.randn(512, 512)
        x = torch.empty(16 * 2**20)
        y = torch.empty_like(x)
        s = torch.ones(16)

        def best(fn, k=5):
            fn()
            out = []
            for _ in range(k):
                t0 = time.perf_counter()
                fn()
                out.append(time.perf_counter() - t0)
            return min(out)

        flops = 2 * 512**3 / best(lambda: torch.mm(a, b))
        bw = 2 * x.numel() * 4 / best(lambda: y.copy_(x))
        launch = best(lambda: [s.add(1) for _ in range(100)]) / 100
        ab, bb = a.bfloat16(), b.bfloat16()
        bf16 = 2 * 512**3 / best(lambda: torch.mm(ab, bb))
        _CPU[threads] = (flops, bf16, bw, launch)
    flops, bf16, bw, launch = _CPU[threads]
    if memory is None:
        import os
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return Device("cpu", int(memory), bf16, flops, bw, launch,
                  note=f"measured on {threads} thread(s)",
                  compute_efficiency=CPU_EFFICIENCY[0], memory_efficiency=CPU_EFFICIENCY[1])


def op_time(work, device: Device) -> float:
    """Seconds of one operation's :class:`~.meter.Work` on ``device`` (module docstring)."""
    total = 0.0
    for f, b, size in zip(work.flops, work.bytes, work.itemsize):
        peak = (device.bf16 if 0 < size <= 2 else device.fp32) * device.compute_efficiency
        total += max(f / peak if f else 0.0,
                     b / (device.bandwidth * device.memory_efficiency)) + device.launch
    return total
