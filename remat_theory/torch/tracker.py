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
caching (the CUDA cross-check in :mod:`remat_theory.lab.confirm` reports those), and
memory held outside tensors.
"""
from __future__ import annotations

import bisect
import contextlib
import os
from dataclasses import dataclass

import torch
from remat_theory.model.errors import RematError
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

    def released(self, t: torch.Tensor) -> None:
        """Stop counting the storage of ``t``, which its owner is about to release with
        ``untyped_storage().resize_(0)`` while tensors still refer to it (the executor does
        so for an unsaved output kept as the root of a backward).  A storage method, not an
        aten operation: this mode would not see it, and the storage itself stays alive."""
        try:
            ref = StorageWeakRef(t.untyped_storage())
        except (RuntimeError, NotImplementedError):
            return
        self.current -= self._live.pop(ref, 0)

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


# ====================================================================== allocator-level accounting
@dataclass
class OpMemory:
    """Bytes held while one operation ran, by the allocator's accounting (see
    :class:`AllocatorMeter`): ``before`` when it started, ``peak`` the most at any moment
    while it ran (allocations inside kernels included), ``after`` when it ended.  All are
    relative to the start of the measurement, with persistent memory taken out."""

    label: str
    before: int
    peak: int
    after: int


class AllocatorMeter:
    """What the framework's memory allocator holds at each operation, kernels' own
    allocations included; the same accounting for profiling a chain and for measuring a run.

    Why not :class:`MemoryTracker`: it sees tensors that aten operations return, not memory an
    operation allocates and frees inside its kernels (e.g. oneDNN's reordered copies of a
    convolution's input and weight on the CPU: 7.9 MB for one 3x3 convolution from 256 to 512
    channels whose output is 1.6 MB), so a chain profiled with it under-predicts what a
    schedule really peaks at.

    Use::

        meter = AllocatorMeter(device, persistent=lambda: [p.grad for p in params])
        with meter:
            with meter.op("Fall0"):
                ...                       # the operation
        ops = meter.results()             # one OpMemory per meter.op block, in order
        meter.persistent_bytes            # the persistent tensors' bytes (see below)

    How it measures, per device:

    * CPU: a ``torch.profiler`` session with ``profile_memory=True`` around the whole
      ``with`` block; torch's CPU allocator reports every allocation and free to it (pointer,
      signed size, time), and each :meth:`op` block is a ``record_function`` range.  The
      events are walked in time order after the session: bytes held = sum of the sizes of
      blocks allocated in the session and not yet freed.  A free of memory allocated before
      the session is not reported by torch, so everything the measured work frees must be
      allocated inside the block (the network input and the parameters, which are never
      freed, may predate it).  Memory that a library allocates with its own allocator, not
      torch's (e.g. BLAS packing buffers), is not seen.  Only one profiler session can be
      active at a time: this cannot run inside another ``torch.profiler.profile``.
    * CUDA (not exercised by the CPU test suite): the caching allocator's counters,
      ``torch.cuda.memory_allocated`` before and after each :meth:`op` block and
      ``torch.cuda.max_memory_allocated`` after ``torch.cuda.reset_peak_memory_stats`` at its
      start.  These count allocated blocks (sizes rounded up by the caching allocator), not
      the memory it has cached.

    Persistent memory: ``persistent`` (a callable returning tensors, e.g. the parameter
    gradients) names storages that are outside the chain: a gradient allocated by a backward
    stays for the whole training step and is counted whole beside the chain
    (``persistent_bytes``: the most such bytes live at once), not as a transient of the
    backward that allocated it.  On the CPU the persistent storages are listed at the end of
    every operation, and every allocation that is one of them while it lives is taken out of
    the count from the moment it is made (a gradient that a later backward replaces, as
    autograd does when it sums a shared parameter's gradient out of place, included).  On
    CUDA only totals
    are known: at each operation the persistent tensors' bytes *before* it are taken out, so
    one that an operation allocates still counts in that operation's ``peak`` (an upper bound
    on its activation peak, by at most the gradients it creates) and is taken out from the
    next operation on.

    Bookkeeping: allocations made inside :meth:`paused` (the executor's random generator
    states, its copies of running statistics, the loss value it keeps) are not counted, nor
    their frees, on the CPU; on CUDA they are counted (the generator states and the loss
    value are CPU tensors there; the running statistics are a few bytes per channel).

    Priming: ``prime`` (a callable) runs first inside the session, and every figure is then
    relative to what was held after it.  A module that keeps state from one call to the next
    (a cached attention mask that each call replaces: 512 bytes in a captured GPT-2 stage)
    would otherwise look like a leak on the CPU, its replacement counted and the free of the
    copy made before the session not reported; after a priming forward, the copy replaced
    was made inside the session, and both sides are seen.
    """

    PREFIX = "remat::op:"
    PAUSED = "remat::paused"
    PRIME = "prime"

    def __init__(self, device=None, persistent=None, prime=None) -> None:
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.persistent = persistent or (lambda: ())
        self.prime = prime
        self.persistent_bytes = 0
        self._ops: list = []  # CUDA: OpMemory; CPU: labels in order
        self._prof = None
        self._events = None
        self._active = False

    # ------------------------------------------------------------------ public
    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def __enter__(self) -> "AllocatorMeter":
        if self._active:
            raise RematError("this AllocatorMeter is already measuring")
        self._ops, self._events, self.persistent_bytes, self._kept = [], None, 0, []
        self._active = True
        if self.cuda:
            self._cuda_enter()
        else:
            self._cpu_enter()
        if self.prime is not None:
            with self.op(self.PRIME):
                self.prime()
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self._active = False
        if self.cuda:
            self.persistent_bytes = self._cuda_persistent() - self._pers0
        elif exc_type is not None:  # stop the session; the error is what the caller needs
            prof, self._prof = self._prof, None
            prof.__exit__(None, None, None)
        else:
            self._cpu_exit()

    @contextlib.contextmanager
    def op(self, label: str):
        """Measure one operation (``label`` names it in :meth:`results`)."""
        if not self._active:
            raise RematError("AllocatorMeter.op must be used inside the meter's with block")
        if self.cuda:
            with self._cuda_op(label):
                yield
        else:
            self._ops.append(label)
            with torch.profiler.record_function(f"{self.PREFIX}{len(self._ops) - 1}"):
                yield
            # which storages are persistent (e.g. parameter gradients) when it ends
            self._kept.append({t.untyped_storage().data_ptr()
                               for t in _storages(self.persistent())})

    @contextlib.contextmanager
    def paused(self):
        """Bookkeeping inside is not counted (CPU; see the class docstring)."""
        if not self._active or self.cuda:
            yield self
            return
        with torch.profiler.record_function(self.PAUSED):
            yield self

    def results(self) -> list:
        """One :class:`OpMemory` per :meth:`op` block, in the order they ran (bytes above
        what was held when ``prime`` had run, or at the start)."""
        if self._active:
            raise RematError("AllocatorMeter.results is available after its with block")
        out = list(self._ops) if self.cuda else list(self._events or [])
        if self.prime is None or not out:
            return out
        base = out[0].after
        return [OpMemory(r.label, r.before - base, r.peak - base, r.after - base) for r in out[1:]]

    @property
    def peak(self) -> int:
        """The largest ``peak`` of the operations measured (bytes above the start)."""
        return max((r.peak for r in self.results()), default=0)

    # ------------------------------------------------------------------ CUDA
    def _cuda_persistent(self) -> int:
        return sum(_cuda_block_bytes(storage_bytes(t)) for t in _storages(self.persistent()))

    def _cuda_enter(self) -> None:
        torch.cuda.synchronize(self.device)
        self._base = torch.cuda.memory_allocated(self.device)
        self._pers0 = self._cuda_persistent()

    @contextlib.contextmanager
    def _cuda_op(self, label: str):
        dev = self.device
        pers = self._cuda_persistent() - self._pers0
        before = torch.cuda.memory_allocated(dev) - self._base - pers
        torch.cuda.reset_peak_memory_stats(dev)
        yield
        # The counters change when the host allocates or frees (stream-ordered reuse), so no
        # synchronisation is needed for them; this one only keeps ops from overlapping.
        torch.cuda.synchronize(dev)
        peak = torch.cuda.max_memory_allocated(dev) - self._base - pers
        pers_after = self._cuda_persistent() - self._pers0
        after = torch.cuda.memory_allocated(dev) - self._base - pers_after
        self._ops.append(OpMemory(label, before, max(before, peak, after), after))

    # ------------------------------------------------------------------ CPU
    def _cpu_enter(self) -> None:
        if torch._C._autograd._profiler_enabled():
            self._active = False
            raise RematError("the allocator meter measures CPU memory with torch.profiler, "
                             "but a profiler session is already running; run the profiling "
                             "or the confirmation outside it")
        # libkineto prints a line at every session start and stop unless told otherwise; an
        # explicit KINETO_LOG_LEVEL set by the user wins.
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")
        self._prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                            profile_memory=True)
        self._prof.__enter__()

    def _cpu_exit(self) -> None:
        prof, self._prof = self._prof, None
        prof.__exit__(None, None, None)
        tree = prof.profiler.kineto_results.experimental_event_tree()
        self._kept.append({t.untyped_storage().data_ptr() for t in _storages(self.persistent())})
        self._events, self.persistent_bytes = _walk_cpu_events(tree, self._ops, self._kept,
                                                               self.PREFIX, self.PAUSED)


def allocator_peak(fn, device=None, persistent=None) -> int:
    """Bytes the allocator holds at the peak of ``fn()`` above what it held when ``fn``
    started (see :class:`AllocatorMeter`; ``persistent`` as there)."""
    meter = AllocatorMeter(device, persistent)
    with meter:
        with meter.op("fn"):
            fn()
    return meter.peak


def _storages(tensors):
    return [t for t in tensors if isinstance(t, torch.Tensor) and storage_bytes(t) > 0]


def _cuda_block_bytes(n: int) -> int:
    """Bytes the CUDA caching allocator counts for an n-byte tensor: rounded up to 512."""
    return max(512, -(-n // 512) * 512)


def _walk_cpu_events(tree, labels, kept, prefix, paused_name):
    """Turn a profiler event tree into one OpMemory per label (see AllocatorMeter).

    ``kept[k]``: pointers of the persistent storages when operation k ended (the last entry:
    at the end of the session).  An allocation is persistent when its pointer is among them
    at some operation's end while it is live (a gradient that a later backward replaces, as
    autograd does when it sums a shared parameter's gradient out of place, is persistent
    too).  Returns (records, the most bytes of persistent storages live at once)."""
    allocs, ops, paused = [], {}, []
    stack = list(tree)
    while stack:
        e = stack.pop()
        stack.extend(e.children)
        kind = type(e.extra_fields).__name__
        if kind == "_ExtraFields_Allocation":
            ef = e.extra_fields
            if ef.device.type == "cpu" and ef.alloc_size != 0:
                allocs.append((e.start_time_ns, ef.id, ef.ptr, ef.alloc_size))
        elif e.name.startswith(prefix):
            ops[int(e.name[len(prefix):])] = (e.start_time_ns, e.end_time_ns)
        elif e.name == paused_name:
            paused.append((e.start_time_ns, e.end_time_ns))
    for k, label in enumerate(labels):
        if k not in ops:
            raise RematError(f"the profiler lost the range of operation {label!r}")
    allocs.sort()
    paused.sort()
    pstarts = [s for s, _ in paused]
    # when each persistent-pointer set was taken: the end of its operation, or the very end
    ends = [ops[k][1] for k in range(len(labels))] + [float("inf")]

    def in_paused(t):
        k = bisect.bisect_right(pstarts, t) - 1
        return k >= 0 and t <= paused[k][1]

    # lifetime of every allocation: [its time, the time of its free or the end]
    free_at, open_ = {}, {}
    for k, (t, _, ptr, size) in enumerate(allocs):
        if size > 0:
            open_[ptr] = k
        elif ptr in open_:
            free_at[open_.pop(ptr)] = t

    def persistent(k):
        t, _, ptr, _ = allocs[k]
        stop = free_at.get(k, float("inf"))
        a = bisect.bisect_left(ends, t)
        return any(ptr in kept[j] for j in range(a, len(ends)) if ends[j] <= stop)

    live, kept_live = {}, {}  # counted / persistent blocks live, by pointer
    times, held = [], []
    cur = pers = pers_peak = 0
    for k, (t, _, ptr, size) in enumerate(allocs):
        if size > 0:
            if persistent(k):
                kept_live[ptr] = size
                pers += size
                pers_peak = max(pers_peak, pers)
            elif not in_paused(t):
                live[ptr] = size
                cur += size
        elif ptr in live:
            cur -= live.pop(ptr)
        elif ptr in kept_live:
            pers -= kept_live.pop(ptr)
        # else: a paused block, or one allocated before the session
        times.append(t)
        held.append(cur)
    out = []
    for k, label in enumerate(labels):
        s, e = ops[k]
        a = bisect.bisect_left(times, s)
        b = bisect.bisect_right(times, e)
        before = held[a - 1] if a else 0
        after = held[b - 1] if b else 0
        peak = max([before, after] + held[a:b])
        out.append(OpMemory(label, before, peak, after))
    return out, pers_peak
