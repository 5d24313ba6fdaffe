"""What the allocator would hold, and the work done, on fake tensors.

:class:`FakeMeter` is a ``TorchDispatchMode`` for code running under torch's
``FakeTensorMode`` (or on real tensors: it only reads shapes).  It keeps a timeline of the
tensor storages that aten operations create and that die, and answers the questions the
in-place profiler asks of its allocator meter: for each labelled operation (:meth:`op`),
the bytes held when it started, at its most and when it ended, with *persistent* storages
(the parameters' gradients) taken out from the moment they are made, as
:class:`remat_theory.torch.tracker.AllocatorMeter` takes them out.  A storage is identified by
its storage object (fake storages have no address), counted once whatever the number of
views of it, in full, from the operation that made it to the first operation after its last
tensor died.  It also keeps the live-tensor view of :class:`~remat_theory.torch.tracker.MemoryTracker`
(``current``, ``peak``, :meth:`refresh`, :meth:`reset_peak`) and, per labelled operation,
the work of every aten call: floating-point operations (torch's own
``torch.utils.flop_counter`` formulas) and bytes moved (every tensor argument read and every
new output written, each once), from which :mod:`.devices` makes a time.

What it cannot see by itself (and the real CPU profile does): memory a kernel allocates and
frees inside one aten call (a workspace).  ``workspace`` (a callable of the call, such as
:class:`.workspace.CpuWorkspace`) gives it: a transient of that many bytes once the call's
outputs are made, in the operations' timeline (:meth:`results`), not among the live tensors
(``current``, :meth:`fresh`, :meth:`watch_rise`: what the in-place profile counts by live
tensors).  docs/plan.md gives the measured consequence.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry


__all__ = ["FakeMeter", "OpRecord", "Work"]

_VIEWISH = {"view", "_unsafe_view", "reshape", "expand", "t", "transpose", "permute", "slice",
            "select", "unsqueeze", "squeeze", "as_strided", "alias", "detach", "_reshape_alias",
            "split", "split_with_sizes", "unbind", "chunk", "narrow", "diagonal", "unfold",
            "view_as_real", "view_as_complex", "lift_fresh", "_to_copy_noop"}
_RANDOM = {"bernoulli", "native_dropout", "rand", "randn", "rand_like", "randn_like",
           "normal", "uniform", "randint", "randperm", "exponential"}


@dataclass
class Work:
    """The aten calls of one operation: per call, its floating-point operations, its bytes
    moved and whether it is a matrix product (tensor cores) and its dtype's itemsize."""

    flops: list = field(default_factory=list)
    bytes: list = field(default_factory=list)
    itemsize: list = field(default_factory=list)
    random: bool = False

    def add(self, other: "Work") -> None:
        self.flops += other.flops
        self.bytes += other.bytes
        self.itemsize += other.itemsize
        self.random = self.random or other.random

    @property
    def total_flops(self) -> int:
        return int(sum(self.flops))

    @property
    def total_bytes(self) -> int:
        return int(sum(self.bytes))


@dataclass
class OpRecord:
    """Bytes held (persistent storages out) when an operation started, at its most, when it
    ended; its work."""

    label: str
    before: int
    peak: int
    after: int
    work: Work


def _key(t):
    try:
        s = t.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None, None, 0
    return s._cdata, s, int(s.nbytes())


class FakeMeter(TorchDispatchMode):
    """See the module docstring.  ``persistent``: a callable returning the tensors whose
    storages are outside the count (read at the end of every :meth:`op`)."""

    def __init__(self, persistent=None, workspace=None) -> None:
        super().__init__()
        self.persistent = persistent or (lambda: ())
        self.workspace = workspace
        self._live: dict = {}  # storage id -> (weakref to the storage, bytes, serial)
        self._events: list = []  # (+1 alloc | -1 free, serial, bytes)
        self._serial = 0
        self._ops: list = []  # (label, first event, last event, persistent ids, Work)
        self._kernels: list = []  # (workspace's Kernel, its outputs' serials)
        self._work: Work | None = None
        self.current = 0
        self.peak = 0
        self._fresh = None  # [first serial, bytes live, peak] of storages made in a window

    # -------------------------------------------------------------- live storages
    def _expire(self) -> None:
        dead = [k for k, (ref, _, _) in self._live.items() if ref.expired()]
        for k in dead:
            _, n, serial = self._live.pop(k)
            self.current -= n
            self._events.append((-1, serial, n))
            if self._fresh is not None and serial >= self._fresh[0]:
                self._fresh[1] -= n

    def refresh(self) -> int:
        self._expire()
        return self.current

    def reset_peak(self) -> None:
        self._expire()
        self.peak = self.current

    def live_storages(self) -> set:
        """The storages live now (weak references), as
        :meth:`remat_theory.torch.inplace.realstep.RiseTracker.live_storages`."""
        self._expire()
        return {ref for ref, _, _ in self._live.values()}

    def new_storages(self, old: set) -> dict:
        """The storages live now that were not in ``old`` (weak reference -> bytes)."""
        self._expire()
        return {ref: n for ref, n, _ in self._live.values() if ref not in old}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.namespace == "prim":  # metadata queries fake tensors answer (prim.device)
            return out  # no aten operation on real tensors: expiring here would be earlier
        self._expire()
        ins = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        in_keys = {_key(t)[0] for t in ins}
        outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        new_bytes = 0
        made = []  # per output, the serial of the storage it made (None: none)
        for t in outs:
            k, s, n = _key(t)
            made.append(None)
            if k is None or k in in_keys or n == 0:
                continue
            if k in self._live:
                made[-1] = self._live[k][2]
            else:
                self._serial += 1
                made[-1] = self._serial
                self._live[k] = (StorageWeakRef(s), n, self._serial)
                self.current += n
                self._events.append((1, self._serial, n))
                if self._fresh is not None:
                    self._fresh[1] += n
                    self._fresh[2] = max(self._fresh[2], self._fresh[1])
            new_bytes += t.numel() * t.element_size()
        self.peak = max(self.peak, self.current)
        kernel = self.workspace(func, args, kwargs) if self.workspace is not None else None
        if kernel is not None:  # the kernel's own allocations: in the operations' timeline
            # (sized in results(), once it is known which outputs are persistent), not live
            self._events.append((0, len(self._kernels), 0))
            self._kernels.append((kernel, made))
        if self._work is not None:
            name = func._overloadpacket.__name__
            if name not in _VIEWISH:
                fn = flop_registry.get(func._overloadpacket)
                flops = 0
                if fn is not None:
                    flops = int(fn(*args, **kwargs, out_val=out))  # shapes only
                read = sum(t.numel() * t.element_size() for t in ins)
                size = max((t.element_size() for t in ins + outs if t.is_floating_point()),
                           default=4)
                self._work.flops.append(flops)
                self._work.bytes.append(read + new_bytes)
                self._work.itemsize.append(size if flops else 0)
                if name in _RANDOM:
                    self._work.random = True
        return out

    @contextlib.contextmanager
    def fresh(self):
        """Within: count only storages made inside (what a fresh
        :class:`~remat_theory.torch.tracker.MemoryTracker` counts); yields a one-element
        list holding their peak once the block ends."""
        self._expire()
        outer, self._fresh = self._fresh, [self._serial + 1, 0, 0]
        box = [0]
        try:
            yield box
        finally:
            self._expire()
            box[0] = self._fresh[2]
            self._fresh = outer

    def watch_rise(self) -> None:
        """From now to :meth:`stop_rise`: the most bytes of storages made since live at once
        (what :class:`remat_theory.torch.inplace.realstep.RiseTracker` measures)."""
        self._expire()
        self._fresh = [self._serial + 1, 0, 0]

    def stop_rise(self) -> int:
        self._expire()
        rise, self._fresh = (self._fresh[2] if self._fresh else 0), None
        return rise

    # -------------------------------------------------------------- operations
    @contextlib.contextmanager
    def op(self, label: str):
        self._expire()
        start = len(self._events)
        outer, self._work = self._work, Work()
        try:
            yield
        finally:
            self._expire()
            work, self._work = self._work, outer
            if outer is not None:
                outer.add(work)
            pers = set()
            for t in self.persistent():
                if isinstance(t, torch.Tensor):
                    k = _key(t)[0]
                    if k in self._live:  # its allocation while it lives (ids are reused)
                        pers.add(self._live[k][2])
            self._ops.append((label, start, len(self._events), pers, work))

    def results(self) -> list:
        """One :class:`OpRecord` per :meth:`op`, in the order they ended."""
        # a storage is persistent when it is among the persistent ones at the end of some
        # operation while it lives: it is then out of the count from the moment it is made
        pers_ids = set().union(*[p for *_, p, _ in self._ops]) if self._ops else set()
        held, top, cur = [], [], 0  # per event: bytes held after it, at its most
        for sign, k, n in self._events:
            extra = 0
            if sign == 0:  # a kernel's workspace, its persistent outputs out of the count
                kernel, made = self._kernels[k]
                extra = kernel.workspace(frozenset(i for i, s in enumerate(made)
                                                   if s in pers_ids))
            elif k not in pers_ids:
                cur += sign * n
            held.append(cur)
            top.append(cur + extra)
        out = []
        for label, a, b, _, work in self._ops:
            before = held[a - 1] if a else 0
            after = held[b - 1] if b else 0
            peak = max([before, after] + top[a:b])
            out.append(OpRecord(label, before, peak, after, work))
        return out
