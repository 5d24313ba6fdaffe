"""Run schedules with offloads and prefetches (``Offx{i}``, ``Offt{i}``, ``Prex{i}``,
``Pret{i}``; docs/model.md, "Offloading") on a real network.

:class:`OffloadExecutor` is the :class:`~remat_theory.torch.run.executor.ScheduleExecutor` plus a
copy channel.  Every operation is first replayed by the two-stream referee's own
:func:`~remat_theory.model.offload.step` (on a unit chain with the network's
``output_saved``), which decides validity and where each value is after it, so that the
executor cannot drift from the model.

What moves.  A plain activation x_i is one tensor: its storage moves.  A tape t_{i+1} is an
autograd graph: the storages of the tensors it saved (seen by the executor's
``saved_tensors_hooks`` pack hook, :class:`~remat_theory.torch.run.executor._Tape`), the stage
input aside (the tape refers to x_i, it does not hold it), parameters, buffers and the
constants a captured chain hands between stages aside, plus the output x_{i+1} when
``output_saved[i]`` (the model's tape contains it).  A storage is moved, not a tensor:
its bytes are copied to a host buffer and the storage is resized to 0 bytes
(``untyped_storage().resize_(0)``, as FSDP frees its parameters), and a prefetch resizes it
back and copies the bytes in.  Every tensor that views the storage (the saved tensors inside
the graph, the output) sees the bytes again, so the backward runs unchanged and the
gradients are those of plain autograd, bit for bit.  A value on the host is out of the
executor's value table: no operation can read it until it is prefetched (the referee
refuses the schedule first).

When memory moves, as the referee counts it:

* ``Off``: the copy starts (CUDA: on the copy stream, after the operation that made the
  value); the device storage is *leaving*: still allocated, released by the next compute
  operation, which first waits for the copy (CUDA: an event) and then frees it;
* ``Pre``: the device storage is allocated when the operation is issued, the copy runs
  (CUDA: on the copy stream, after the compute operation issued before it, so the memory
  it frees can hold the copy), and a compute operation that reads the value waits for the
  copy's end (CUDA: an event);
* host copies the referee discards (a value recomputed, or one no backward reads any more)
  are dropped.

Two modes, by the device of the network input:

* **CUDA** (untested on a GPU in this project's test suite; written for the stream
  semantics above): host buffers are pinned (``pin_memory=True``), copies are
  ``non_blocking`` on a separate ``torch.cuda.Stream``, ordered by events; device storages
  are allocated and freed on the compute stream (the current one), which waits for every
  copy that touches them before it can reuse their blocks, so no ``record_stream`` is
  needed.  Time then overlaps as in the model.
* **correctness mode** (CPU): the network runs on the CPU, and "host" is a separate CPU
  buffer (its own storage; the device storage is released).  Host buffers are allocated
  inside the allocator meter's paused range (:meth:`AllocatorMeter.paused` and the
  ``remat::paused`` record-function name, also when the executor has no tracker), so any
  :class:`~remat_theory.torch.tracker.AllocatorMeter` around the run counts the *device*
  memory only: the allocator's bytes minus the host-held bytes, comparable with the
  referee's device peak.  ``host_bytes`` / ``host_peak`` say what the host held.  Copies
  are synchronous: the time of a run says nothing about a real copy channel.
"""
from __future__ import annotations

import contextlib

import torch

from remat_theory.model.errors import InvalidScheduleError
from remat_theory.model.offload import OffloadState, reads
from remat_theory.model.offload import step as offload_step
from remat_theory.model.offload import value_id
from remat_theory.model.schedule import OFF, PRE, Op, Schedule
from remat_theory.torch.capture.carried import carried_tensors
from remat_theory.torch.capture.stages import stage_buffers, stage_parameters
from remat_theory.torch.run.executor import ExecutionResult, ScheduleExecutor, same_storage
from remat_theory.torch.tracker import AllocatorMeter


__all__ = ["OffloadExecutor", "executor_for", "execute_offload"]


class _Away:
    """A value on the host: the executor's object for it (a plain tensor or a tape) and its
    (device storage, host buffer) pairs."""

    __slots__ = ("obj", "pairs")

    def __init__(self, obj, pairs) -> None:
        self.obj = obj
        self.pairs = pairs


class OffloadExecutor(ScheduleExecutor):
    """A :class:`ScheduleExecutor` that also runs the transfers of the two-stream model
    (module docstring).  Same parameters; schedules without transfers run exactly as in
    the base class.

    Attributes: ``mode`` (``"cuda"`` or ``"correctness"``), ``host_bytes`` (bytes on the
    host now), ``host_peak`` (the most at once), ``moved_bytes`` (per value moved by its
    latest offload, ``{"x3": n, "t2": m}``: the bytes that really travel, to compare with
    the chain's sizes)."""

    def __init__(self, stages, loss_fn, x0: torch.Tensor, *, tracker=None, allow_drop: bool = True,
                 output_saved=None, release=None):
        super().__init__(stages, loss_fn, x0, tracker=tracker, allow_drop=allow_drop,
                         output_saved=output_saved, release=release)
        self._ochain = self._unit.replace(bandwidth=1.0)
        self._ostate = OffloadState.initial(self._ochain)
        self._next = None  # the referee's state after the compute op being run
        self.mode = "cuda" if self.device.type == "cuda" else "correctness"
        self._away: dict = {}  # value id -> _Away
        self._leaving: list = []  # (storages, done event or None)
        self._ready: dict = {}  # value id -> (event, host buffers): a prefetch not yet waited for
        self._made: dict = {}  # value id -> event after the compute op that made it (CUDA)
        self._resident = None
        self.host_bytes = 0
        self.host_peak = 0
        self.moved_bytes: dict = {}
        self._stream = torch.cuda.Stream(self.device) if self.mode == "cuda" else None

    # ------------------------------------------------------------------ public
    def step(self, op) -> None:
        if isinstance(op, str):
            op = Op.parse(op)
        if op.kind not in (OFF, PRE):
            super().step(op)
            return
        new = self._referee(op)
        if op.kind == OFF:
            self._offload(op.target, op.index)
        else:
            self._prefetch(op.target, op.index)
        self._ostate = new
        self._state = new.dev
        self._steps += 1

    def release_leaving(self) -> None:
        """Release the device copies of the values offloaded since the last compute op
        (after their copies); the next compute op does it first anyway.  Call it before
        measuring a compute op on its own, as the referee counts its memory after it."""
        current = torch.cuda.current_stream(self.device) if self.mode == "cuda" else None
        for storages, done in self._leaving:
            if done is not None:
                current.wait_event(done)
            for st in storages:
                st.resize_(0)
        self._leaving = []

    def wait_prefetches(self) -> None:
        """CUDA: the current stream waits for every prefetch not yet waited for (the drop-in
        hands x_L to the user's loss, which the executor does not check)."""
        if self.mode == "cuda":
            current = torch.cuda.current_stream(self.device)
            for ready, _ in self._ready.values():
                current.wait_event(ready)
            self._ready.clear()

    # ------------------------------------------------------------------ referee
    def _referee(self, op: Op) -> OffloadState:
        r = offload_step(self._ochain, self._ostate, op, self.allow_drop)
        if isinstance(r, str):
            raise InvalidScheduleError(r, self._steps, op.token)
        return r[0]

    def _check(self, op: Op):
        """A compute op (from :meth:`step` or :meth:`set_loss_grad`): validity by the
        referee; then it waits for the values it reads and releases the leaving copies, and
        the host copies the referee discards are dropped."""
        new = self._referee(op)
        old = self._ostate
        if self.mode == "cuda":
            current = torch.cuda.current_stream(self.device)
            for v in reads(self._ochain, old.dev, op):
                waiting = self._ready.pop(v, None)
                if waiting is not None:
                    current.wait_event(waiting[0])
        self.release_leaving()
        L = self.L
        for i in range(L + 1):
            if old.host_plain >> i & 1 and not new.host_plain >> i & 1:
                self._drop_host(value_id(self._ochain, "x", i))
            if old.host_tapes >> i & 1 and not new.host_tapes >> i & 1:
                self._drop_host(value_id(self._ochain, "t", i))
        self._next = new
        return new.dev

    def _commit(self, new_state) -> None:
        # a plain unsaved x_j leaving the device shares its storage with the output of the
        # tape t_j; the base class releases it when that tape is on the device, and so must
        # this one when the tape is on the host
        plain = self._values.plain
        for j in [j for j in plain if not new_state.plain >> j & 1]:
            away = self._away.get(value_id(self._ochain, "t", j))
            if away is not None and same_storage(plain[j], away.obj.output):
                self._release(plain.pop(j))
        old = self._ostate.dev
        super()._commit(new_state)
        self._ostate, self._next = self._next, None
        if self.mode == "cuda":
            made = torch.cuda.Event()
            made.record(torch.cuda.current_stream(self.device))
            for i in range(self.L + 1):
                if new_state.plain >> i & 1 and not old.plain >> i & 1:
                    self._made[value_id(self._ochain, "x", i)] = made
                if new_state.tapes >> i & 1 and not old.tapes >> i & 1:
                    self._made[value_id(self._ochain, "t", i)] = made

    def _free_loss_input(self, L: int, read: bool) -> None:
        # as the base class, when the tape t_L whose output a plain unsaved x_L shares is on
        # the host
        x = self._values.plain.get(L)
        away = self._away.get(value_id(self._ochain, "t", L))
        if x is not None and away is not None and same_storage(x, away.obj.output):
            if not read:
                self._release(self._values.plain.pop(L))
            return
        super()._free_loss_input(L, read)

    # ------------------------------------------------------------------ transfers
    @contextlib.contextmanager
    def _paused(self):
        """Bookkeeping (random generator states, running statistics saved around a
        recomputation: CPU tensors on a GPU) is paused for every allocator meter, also when
        the executor has no tracker (the drop-in's offload plans)."""
        with super()._paused(), torch.profiler.record_function(AllocatorMeter.PAUSED):
            yield

    def _host_allocation(self):
        """Host buffers are not device memory: paused for every allocator meter."""
        return self._paused()

    def _resident_pointers(self) -> set:
        """Storages a tape may save but does not hold: parameters, buffers, x_0 (fixed), and
        the constants a captured chain's first stage hands on (remade by each of its runs,
        so read at every tape offload)."""
        if self._resident is None:
            kept = stage_parameters(self.stages) + list(stage_buffers(self.stages))
            kept.append(self._values.plain[0])
            self._resident = {t.untyped_storage().data_ptr() for t in kept}
        return self._resident | {t.untyped_storage().data_ptr()
                                 for t in carried_tensors(self.stages)}

    def _storages(self, target: str, i: int, obj) -> list:
        """The device storages a value holds (module docstring), each once, non-empty."""
        if target == "x":
            tensors = [obj]
        else:
            tensors = [r() for r in obj.saved]
            tensors = [t for t in tensors if t is not None]
            if self.output_saved[i - 1]:
                tensors.append(obj.output)
            tensors += _numbers_saved(obj.output)
        resident = self._resident_pointers() if target == "t" else set()
        out, seen = [], set()
        for t in tensors:
            st = t.untyped_storage()
            ptr = st.data_ptr()
            if st.nbytes() == 0 or ptr in seen or ptr in resident or st.device != self.device:
                continue
            seen.add(ptr)
            out.append(st)
        return out

    def _offload(self, target: str, i: int) -> None:
        table = self._values.plain if target == "x" else self._values.tapes
        obj = table.pop(i)
        vid = value_id(self._ochain, target, i)
        storages = self._storages(target, i, obj)
        pairs = []
        if self.mode == "cuda":
            made = self._made.pop(vid, None)
            if made is not None:
                self._stream.wait_event(made)
            with self._host_allocation():
                hosts = [torch.empty(st.nbytes(), dtype=torch.uint8,
                                     pin_memory=True).untyped_storage() for st in storages]
            with torch.cuda.stream(self._stream):
                for st, h in zip(storages, hosts):
                    h.copy_(st, non_blocking=True)
                    pairs.append((st, h))
            done = torch.cuda.Event()
            done.record(self._stream)
        else:
            with self._host_allocation():
                for st in storages:
                    h = torch.UntypedStorage(st.nbytes(), device="cpu")
                    h.copy_(st)
                    pairs.append((st, h))
            done = None
        moved = sum(st.nbytes() for st in storages)
        self.moved_bytes[f"{target}{i}"] = moved
        self.host_bytes += moved
        self.host_peak = max(self.host_peak, self.host_bytes)
        self._away[vid] = _Away(obj, pairs)
        self._leaving.append((storages, done))
        del obj

    def _prefetch(self, target: str, i: int) -> None:
        vid = value_id(self._ochain, target, i)
        away = self._away.pop(vid)
        self._keep_leaving_apart(away.pairs)
        if self.mode == "cuda":
            current = torch.cuda.current_stream(self.device)
            for st, h in away.pairs:  # allocated on the compute stream, when issued
                if st.nbytes() != h.nbytes():
                    st.resize_(h.nbytes())
            self._stream.wait_stream(current)
            with torch.cuda.stream(self._stream):
                for st, h in away.pairs:
                    st.copy_(h, non_blocking=True)
            ready = torch.cuda.Event()
            ready.record(self._stream)
            # the host buffers live until a compute op has waited for the copy
            self._ready[vid] = (ready, [h for _, h in away.pairs])
        else:
            for st, h in away.pairs:
                if st.nbytes() != h.nbytes():
                    st.resize_(h.nbytes())
                st.copy_(h)
        self.host_bytes -= sum(h.nbytes() for _, h in away.pairs)
        table = self._values.plain if target == "x" else self._values.tapes
        table[i] = away.obj

    def _keep_leaving_apart(self, pairs) -> None:
        """A value prefetched before the next compute op has released the copy its offload
        left: the referee counts both (the leaving copy until that op, the prefetched one
        from now on).  The storage is the value's, so it stays (its bytes are still there;
        the prefetch copies the same bytes in) and a buffer of its size stands for the
        leaving copy until the release."""
        mine = {st.data_ptr() for st, _ in pairs if st.nbytes()}
        if not mine:
            return
        for storages, _ in self._leaving:
            for k, st in enumerate(storages):
                if st.nbytes() and st.data_ptr() in mine:
                    storages[k] = torch.empty(st.nbytes(), dtype=torch.uint8,
                                              device=self.device).untyped_storage()

    def _drop_host(self, vid: int) -> None:
        away = self._away.pop(vid, None)
        if away is not None:
            self.host_bytes -= sum(h.nbytes() for _, h in away.pairs)


def _numbers_saved(output: torch.Tensor) -> list:
    """The Python numbers the graph of one stage saved: an op that multiplies a tensor by
    a Python float (GPT-2's GELU: ``0.5 * x``, ``0.044715 * x**3``) saves the number as a
    0-dim "wrapped number" tensor (8 bytes, on the CPU), and autograd saves those without
    calling the saved-tensor hooks, so the tape's pack hook never sees them.  On the CPU
    they are allocator memory the profile counts in the tape (the 24 bytes per GPT-2 block
    that offloaded tapes left behind); on CUDA they are host memory (the device filter of
    :meth:`OffloadExecutor._storages` leaves them).  Found by walking the stage's graph
    from its output to the stage input's ``_Source`` node (the stage's boundary: its input
    is detached), reading each node's ``_saved_*`` attributes; a saved value that cannot
    be read now (the stage input, when it is not on the device) is not one of them."""
    found, seen, todo = [], set(), [output.grad_fn]
    while todo:
        fn = todo.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        if type(fn).__name__ == "_SourceBackward":
            continue
        for name in dir(fn):
            if not name.startswith("_saved_"):
                continue
            try:
                v = getattr(fn, name)
            except Exception:  # noqa: BLE001 - an input reference whose value is away
                continue
            if isinstance(v, torch.Tensor) and v.dim() == 0:
                found.append(v)
        todo.extend(f for f, _ in fn.next_functions)
    return found


def executor_for(schedule, stages, loss_fn, x0, **kw) -> ScheduleExecutor:
    """An :class:`OffloadExecutor` for a schedule with transfers, else a plain
    :class:`ScheduleExecutor`."""
    if isinstance(schedule, str):
        schedule = Schedule.parse(schedule)
    cls = OffloadExecutor if any(op.kind in (OFF, PRE) for op in schedule) else ScheduleExecutor
    return cls(stages, loss_fn, x0, **kw)


def execute_offload(model, schedule, x0: torch.Tensor, loss_fn, *, tracker=None,
                    output_saved=None) -> ExecutionResult:
    """Run a schedule with transfers on ``model`` (see :class:`OffloadExecutor`)."""
    return OffloadExecutor(model, loss_fn, x0, tracker=tracker,
                           output_saved=output_saved).run(schedule)
