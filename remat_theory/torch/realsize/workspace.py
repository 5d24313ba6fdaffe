"""Memory a CPU kernel allocates and frees inside one aten call (a workspace), measured.

A dispatch mode sees the tensors an aten call returns, not what its kernel allocates for
itself meanwhile; the allocator does (the in-place profile's meter).  On this CPU the
difference is oneDNN's: a convolution reorders its input, weight and output gradient into
blocked layouts, and its backward over a depthwise convolution whose input is in the
channels-last layout (ConvNeXt's, after the permutes around its layer norm) holds about
50 kB per channel whatever the batch and the image size (806 kB for 16 channels, 8x8
pixels: a hundred times the tensors it reads).  The sizes depend on the library's choice
of algorithm for the call's shapes, strides and thread count, not on a closed form found
here (docs/plan.md gives the measured sweep), so :class:`CpuWorkspace` measures them: each
distinct call (its function, every tensor's shape, strides and dtype, the other arguments)
once on real zero-filled tensors of the same layout, its allocations and frees as torch's
CPU allocator reports them to the profiler (what the in-place profile's allocator meter,
:class:`remat_theory.torch.tracker.AllocatorMeter`, reads), after one warm-up call, as the
in-place profile measures after its warm-up pass.  The workspace is what the call's peak
rose above what it left held (its outputs), the outputs the meter keeps out of its count
left out (a parameter's gradient: taken out from the moment it is made, so the peak is the
kernel's scratch alone); :class:`~.meter.FakeMeter` places it as a transient once the
outputs are made, so each call's peak is the allocator's.

Only the calls of :data:`KERNELS` are measured (the ones whose CPU kernels were found to
allocate inside enough to move a profile's figures: convolutions, layer and batch norms,
the CPU's flash attention, the embedding's backward; not the few bytes a kernel takes to
wrap a Python scalar).  It runs real kernels at the profile's sizes, one call at a time: for the CPU
as the target device only (``remat plan --gpu cpu``, ``remat profile --fake``'s default
device), never for a GPU, whose cuDNN/cuBLAS workspaces are other sizes and not modelled.
"""
from __future__ import annotations

import os

import torch
from torch.utils import _pytree as pytree

from remat_theory.model.errors import RematError


__all__ = ["CpuWorkspace", "KERNELS", "Kernel", "SHARED"]

KERNELS = frozenset({
    "convolution", "convolution_backward", "native_layer_norm", "native_layer_norm_backward",
    "native_batch_norm", "native_batch_norm_backward",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention_for_cpu_backward", "embedding_dense_backward",
})
"""aten calls (by overload packet name) whose CPU workspace is measured."""


def _key(func, args, kwargs):
    def one(v):
        if isinstance(v, torch.Tensor):
            return ("T", tuple(v.shape), tuple(v.stride()), str(v.dtype), v.requires_grad)
        return ("V", repr(v))
    return (str(func), torch.get_num_threads(),
            tuple(one(v) for v in pytree.tree_leaves((args, kwargs))))


def _real(t: torch.Tensor) -> torch.Tensor:
    """A real zero-filled tensor of ``t``'s shape, strides and dtype (its storage just
    large enough, a broadcast view's included)."""
    span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()) if n > 0)
    if any(n == 0 for n in t.shape):
        span = 0
    return torch.zeros(span, dtype=t.dtype).as_strided(tuple(t.shape), tuple(t.stride()))


class Kernel:
    """The allocations one call's kernel made, in order: ``steps`` a list of (signed bytes,
    the output it made or -1), a free negative.  :meth:`workspace` is what the call's peak
    rose above what it left held, the outputs named in ``outside`` not counted (those that
    the meter keeps out of its count: the parameters' gradients a backward makes)."""

    def __init__(self, steps) -> None:
        self.steps = steps

    def workspace(self, outside=frozenset()) -> int:
        cur = peak = 0
        for size, out in self.steps:
            if out in outside:
                continue
            cur += size
            peak = max(peak, cur)
        return max(0, peak - cur)


class CpuWorkspace:
    """``ws(func, args, kwargs)``: the :class:`Kernel` of the call on this CPU (None for a
    call outside :data:`KERNELS`); see the module docstring.  Call it outside any fake
    mode's dispatch, on any tensors (fake ones included: only their layout is read).
    A call the CPU kernel refuses on those tensors (a RuntimeError) counts none: its
    function is named in ``refused`` (the caller clears it and reads it back per profile).
    ``measured``: the distinct calls measured (torch's thread count is part of a call's
    key: oneDNN's choices depend on it), kept for the instance's life: :data:`SHARED` is the
    one the real-size profiles share, so that ``remat plan``'s search for the largest batch
    does not measure a call twice."""

    def __init__(self) -> None:
        self.measured: dict = {}
        self.failed: set = set()  # calls the CPU kernel refused (named in ``refused``)
        self.refused: set = set()  # their functions' names, since the caller last cleared it

    def __call__(self, func, args, kwargs):
        if func._overloadpacket.__name__ not in KERNELS:
            return None
        key = _key(func, args, kwargs)
        if key not in self.measured and key not in self.failed:
            try:
                self.measured[key] = self._measure(func, args, kwargs)
            except RuntimeError:
                # the fake tensors' metadata is not what the CPU kernel takes (under bf16
                # autocast a layer norm's statistics are bf16 on fake tensors, fp32 in the
                # kernel): its workspace is unknown, and the caller says so
                self.failed.add(key)
        if key in self.failed:
            self.refused.add(str(func))
            return None
        return self.measured[key]

    @staticmethod
    def _measure(func, args, kwargs) -> Kernel:
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        # the call as it reached the meter: its inputs already cast (no autocast again)
        with unset_fake_temporarily(), torch.no_grad(), torch.autocast("cpu", enabled=False):
            a, kw = pytree.tree_map(lambda v: _real(v) if isinstance(v, torch.Tensor) else v,
                                    (args, kwargs))
            func(*a, **kw)  # warm-up: the library's caches (oneDNN's primitives) made once
            if torch._C._autograd._profiler_enabled():
                raise RematError("the CPU workspace is measured with torch.profiler, but a "
                                 "profiler session is already running")
            os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # as the allocator meter does
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                          profile_memory=True)
            with prof:
                out = func(*a, **kw)
            outs = [t.untyped_storage().data_ptr() for t in pytree.tree_leaves(out)
                    if isinstance(t, torch.Tensor)]
            del out
        events = []
        stack = list(prof.profiler.kineto_results.experimental_event_tree())
        while stack:
            e = stack.pop()
            stack.extend(e.children)
            ef = e.extra_fields
            if type(ef).__name__ == "_ExtraFields_Allocation" and ef.device.type == "cpu" \
                    and ef.alloc_size != 0:
                events.append((e.start_time_ns, ef.id, ef.ptr, ef.alloc_size))
        events.sort()
        # an output is the last allocation at its pointer (a pointer freed meanwhile is
        # reused)
        last = {ptr: k for k, (_, _, ptr, size) in enumerate(events) if size > 0}
        made = {last[p]: i for i, p in enumerate(outs) if p in last}
        return Kernel([(size, made.get(k, -1)) for k, (_, _, _, size) in enumerate(events)])


SHARED = CpuWorkspace()
