"""Measure the copy channel's bandwidth: the chain field ``bandwidth`` (bytes per second,
each way; docs/model.md, "Offloading").

:func:`measure_bandwidth` copies buffers of several sizes each way, the way the
:class:`~remat_theory.torch.run.offload_executor.OffloadExecutor` copies values:

* on CUDA (untested on a GPU in this project's test suite): device -> pinned host and
  pinned host -> device, ``non_blocking`` on a separate stream, timed with CUDA events;
* on the CPU: the correctness mode's copy, one CPU storage into another
  (``UntypedStorage.copy_``), timed with ``time.perf_counter``.  It is a memcpy rate, not a
  PCIe figure: it says how fast the executor's correctness mode copies, nothing about a
  device.

Small copies are dominated by a fixed launch cost, so the rate of the largest size is the
one reported for each direction (every size's rate is kept, to see the curve flatten).  The
chain has one ``bandwidth`` for both directions; :attr:`BandwidthResult.bandwidth` is the
smaller of the two, so that a schedule planned with it never finds a copy slower than
planned (a conservative choice; both directions are reported).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field

import torch

from remat_theory.model.errors import RematError


CUDA_SIZES = (1 << 20, 8 << 20, 64 << 20, 256 << 20)
CPU_SIZES = (1 << 16, 1 << 20, 16 << 20)


@dataclass
class BandwidthResult:
    """Rates in bytes per second.  ``to_host`` / ``to_device``: the largest size's rate each
    way; ``bandwidth``: the smaller of the two (the chain field); ``rates``: per size,
    ``[bytes, to_host, to_device]``; ``method``: how it was measured."""

    device: str
    to_host: float
    to_device: float
    bandwidth: float
    rates: list = field(default_factory=list)
    method: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def _check(sizes, repeats) -> tuple:
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise RematError(f"repeats = {repeats!r} must be an integer >= 1")
    sizes = tuple(sizes)
    if not sizes:
        raise RematError("sizes is empty: give at least one number of bytes")
    for s in sizes:
        if isinstance(s, bool) or not isinstance(s, int) or s < 1:
            raise RematError(f"sizes: {s!r} must be a positive integer (bytes)")
    return tuple(sorted(sizes)), repeats


def _cuda_rates(device: torch.device, size: int, repeats: int) -> tuple:
    stream = torch.cuda.Stream(device)
    dev = torch.empty(size, dtype=torch.uint8, device=device)
    host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    out = []
    for direction in ("to_host", "to_device"):
        times = []
        for k in range(repeats + 1):  # the first copy warms up
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            stream.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(stream):
                start.record(stream)
                if direction == "to_host":
                    host.copy_(dev, non_blocking=True)
                else:
                    dev.copy_(host, non_blocking=True)
                end.record(stream)
            end.synchronize()
            if k:
                times.append(start.elapsed_time(end) / 1000.0)
        out.append(size / statistics.median(times))
    return tuple(out)


def _cpu_rates(size: int, repeats: int) -> tuple:
    a = torch.UntypedStorage(size, device="cpu")
    b = torch.UntypedStorage(size, device="cpu")
    a.fill_(1)
    out = []
    for src, dst in ((a, b), (b, a)):
        times = []
        for k in range(repeats + 1):
            t0 = time.perf_counter()
            dst.copy_(src)
            t = time.perf_counter() - t0
            if k:
                times.append(t)
        out.append(size / max(statistics.median(times), 1e-9))
    return tuple(out)


def measure_bandwidth(device="cpu", sizes=None, repeats: int = 5) -> BandwidthResult:
    """Copy rates each way (module docstring); ``sizes`` in bytes (default
    :data:`CUDA_SIZES` on a GPU, :data:`CPU_SIZES` on the CPU); the median of ``repeats``
    timed copies per size and direction, after one untimed copy."""
    dev = torch.device(device)
    if dev.type not in ("cpu", "cuda"):
        raise RematError(f"device = {str(dev)!r}: bandwidth is measured on cpu or cuda")
    sizes, repeats = _check(CUDA_SIZES if sizes is None and dev.type == "cuda" else
                            CPU_SIZES if sizes is None else sizes, repeats)
    rates = []
    for s in sizes:
        up, down = _cuda_rates(dev, s, repeats) if dev.type == "cuda" else _cpu_rates(s, repeats)
        rates.append([s, up, down])
    to_host, to_device = rates[-1][1], rates[-1][2]
    method = ("CUDA events, device <-> pinned host, non_blocking on a side stream"
              if dev.type == "cuda" else
              "CPU storage copy (the correctness mode's copy; a memcpy rate, not PCIe)")
    return BandwidthResult(str(dev), to_host, to_device, min(to_host, to_device), rates, method)


def with_bandwidth(chain, device="cpu", **kw):
    """``chain`` with ``bandwidth`` measured on ``device`` (:func:`measure_bandwidth`);
    returns ``(chain, BandwidthResult)``."""
    res = measure_bandwidth(device, **kw)
    return chain.replace(bandwidth=res.bandwidth), res


def chain_with_bandwidth(chain, bandwidth, device):
    """``chain`` with the copy channel of ``bandwidth`` (:func:`~remat_theory.torch.plan.offload.check_bandwidth`); a chain
    that has one already keeps it."""
    if bandwidth is None or chain.bandwidth is not None:
        return chain
    if bandwidth == "measure":
        bandwidth = measure_bandwidth(device).bandwidth
    return chain.replace(bandwidth=float(bandwidth))
