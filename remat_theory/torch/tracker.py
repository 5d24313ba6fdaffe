"""Live-tensor memory accounting that works on every device, the CPU included.

:class:`MemoryTracker` is a ``TorchDispatchMode``: every aten operation that runs while it is
active (forward and backward alike; autograd propagates the mode to its engine) passes
through it.  After each operation it registers the storages of the operation's outputs and
forgets those that have been freed, so it knows the bytes of live storage at operation
granularity and their peak.  Each storage is counted once, whatever number of views point
to it, and in full (``untyped_storage().nbytes()``), which is what the memory really holds.

Why weak references: the tracker must not keep anything alive.  It holds
:class:`~torch.multiprocessing.reductions.StorageWeakRef` objects; a storage is freed the
moment its last tensor dies, and the weak reference then reports ``expired()``.  Expiry is
checked before each new registration, so the peak is the bytes live right after an
operation has allocated its output and before anything is freed, exactly the moment the
chain model's "peak while it runs" describes.

What it counts: only storages newly created by operations while it is active (and not
paused), plus those registered with :meth:`track`; an output sharing a storage with one of
the operation's inputs (a view, an in-place result) is not new memory.  Parameters, buffers and pre-existing ``.grad``
tensors are therefore never counted (they are resident memory, not activations); to keep a
parameter gradient out of the count, allocate it before tracking starts (e.g.
``p.grad = torch.zeros_like(p)``: autograd then accumulates in place).  What it cannot see:
workspace an operator allocates and frees inside one aten call, allocator rounding and
caching (the CUDA cross-check in :mod:`remat_theory.torch.confirm` reports those), and
memory held outside tensors.
"""
from __future__ import annotations

import contextlib

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class MemoryTracker(TorchDispatchMode):
    """Count the live bytes of tensor storages created while active, and their peak.

    Use as a context manager::

        tracker = MemoryTracker()
        tracker.track(x0)          # count a tensor created before tracking
        with tracker:
            ...                    # forward / backward work
        tracker.peak, tracker.current

    Attributes (bytes): ``current`` (live now, as of the last operation), ``peak`` (largest
    ``current`` seen since construction or :meth:`reset_peak`).
    """

    def __init__(self) -> None:
        super().__init__()
        self._live: dict = {}  # StorageWeakRef -> nbytes
        self._paused = 0
        self.current = 0
        self.peak = 0
        self.ops = 0

    # ------------------------------------------------------------------ registration
    def _expire(self) -> None:
        dead = [ref for ref in self._live if ref.expired()]
        for ref in dead:
            self.current -= self._live.pop(ref)

    def _add(self, t) -> None:
        if not isinstance(t, torch.Tensor) or t.is_meta:
            return
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # sparse or other storage-less tensors
            return
        n = storage.nbytes()
        if n == 0:
            return
        ref = StorageWeakRef(storage)
        if ref not in self._live:
            self._live[ref] = n
            self.current += n

    def track(self, *tensors) -> None:
        """Count tensors that already exist (e.g. the network input x_0)."""
        self._expire()
        for t in tensors:
            self._add(t)
        self.peak = max(self.peak, self.current)

    def refresh(self) -> int:
        """Forget freed storages now; return the live bytes."""
        self._expire()
        return self.current

    def reset_peak(self) -> None:
        """Set the peak to the current live bytes (after forgetting freed storages)."""
        self._expire()
        self.peak = self.current

    @contextlib.contextmanager
    def paused(self):
        """Operations run inside are not registered (e.g. bookkeeping copies)."""
        self._paused += 1
        try:
            yield self
        finally:
            self._paused -= 1

    # ------------------------------------------------------------------ dispatch
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not self._paused:
            self.ops += 1
            self._expire()
            # Outputs that share a storage with an input are views or in-place results:
            # no new memory (and views of untracked tensors, such as weight.t() of a
            # parameter, must not start counting the parameter).
            inputs = {_ptr(t) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor) and _ptr(t) not in inputs:
                    self._add(t)
            if self.current > self.peak:
                self.peak = self.current
        return out


def _ptr(t: torch.Tensor):
    try:
        return (t.device, t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):
        return None


def storage_bytes(t: torch.Tensor) -> int:
    """Bytes of the storage behind ``t`` (a view counts its whole storage)."""
    return int(t.untyped_storage().nbytes())
