"""Profile a network into a :class:`~remat_theory.model.chain.Chain` (DESIGN section 1).

For every stage i (the stages of :func:`~remat_theory.torch.stages.split_stages`):

* ``x_size[i+1]``: bytes of the storage of the stage output (``x_size[0]``: the input).
* ``tape_size[i]``: bytes of what autograd saves for the backward of stage i, found with
  ``torch.autograd.graph.saved_tensors_hooks``: each saved tensor's storage counted once,
  plus the output's storage (the tape includes x_{i+1}).  Not counted: the stage *input*
  (the model's B_i needs x_i separately, and the executor re-reads it from whatever copy of
  x_i is held, see :mod:`.executor`), and parameters and buffers (autograd saves weights
  too, but they are resident whatever the schedule, so they are not activation memory).
  The same quantity is also measured by the :class:`MemoryTracker` (live bytes after the
  stage minus before); the larger of the two is used, and both are reported.
* ``fwd_overhead[i]``: transient bytes while stage i runs: the tracker's peak during the
  forward minus what is held afterwards, the larger of the no-grad forward (Fn/Fck) and
  the recording forward (Fall); ``bwd_overhead[i]``: peak during B_i minus (held before +
  x_size[i]), and for the loss, peak minus (held before + x_size[L]); negative values (a
  backward that frees saved tensors before it allocates d_i) are clamped to 0.
* ``fwd_time[i]``: median over repeats of the recording forward (Fall_i); ``bwd_time[i]``:
  median of B_i; ``bwd_time[L]``: median of the loss forward and backward.  Times are
  seconds, CUDA events on a GPU (with the stage's kernels queued ahead, see
  :class:`_Timer`), ``time.perf_counter`` on the CPU (where operations are synchronous), or
  there ``time.process_time`` with ``clock="process"``.  The no-grad forward times are
  reported separately (``ProfileResult.fwd_time_nograd``); the model has one forward time
  per stage.

Everything is measured by running the real executor operations on the real stages, so the
chain describes exactly what the executor will do.  Profiling leaves the model as it was:
buffers (BatchNorm statistics), parameter ``.grad`` and random generator states are
restored afterwards.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch

from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError
from remat_theory.model.schedule import Op
from remat_theory.torch.executor import ScheduleExecutor
from remat_theory.torch.stages import model_state_kept, split_stages, stage_buffers, stage_parameters
from remat_theory.torch.tracker import MemoryTracker, storage_bytes


@dataclass
class ProfileResult:
    chain: Chain
    stages: list = field(repr=False)
    hook_tape_size: list = field(default_factory=list)  # bytes, from saved_tensors_hooks
    tracked_tape_size: list = field(default_factory=list)  # bytes, from the tracker
    fwd_overhead_nograd: list = field(default_factory=list)
    fwd_overhead_record: list = field(default_factory=list)
    fwd_time_nograd: list = field(default_factory=list)  # seconds
    device: str = "cpu"

    def to_dict(self) -> dict:
        return {"chain": self.chain.to_dict(), "hook_tape_size": self.hook_tape_size,
                "tracked_tape_size": self.tracked_tape_size,
                "fwd_overhead_nograd": self.fwd_overhead_nograd,
                "fwd_overhead_record": self.fwd_overhead_record,
                "fwd_time_nograd": self.fwd_time_nograd, "device": self.device}


CLOCKS = ("wall", "process")


def check_clock(clock: str) -> str:
    if clock not in CLOCKS:
        raise RematError(f"clock = {clock!r} is unknown (expected one of {', '.join(CLOCKS)})")
    return clock


class _Timer:
    """Times a callable: CUDA events on a GPU; on the CPU ``time.perf_counter`` (clock
    ``"wall"``) or ``time.process_time`` (clock ``"process"``: CPU time of this process, which
    other processes' load does not inflate; equal to the work's wall time when torch runs on
    one thread, and the sum over threads otherwise).

    On a GPU the events time what the GPU does between them.  Timed from an idle GPU, that
    includes the time the CPU takes to issue the stage's first kernels (Python, the executor,
    autograd's dispatch), during which the GPU waits.  In a whole training step the CPU runs
    ahead of the GPU and that time is hidden, so stage times taken this way add up to more
    than the step takes.  So from the second round of calls on (:meth:`next_round`; the
    profiler makes one round per repetition, warm-ups included), every call first queues a
    GPU sleep twice as long as the CPU took to issue nine calls in ten of the previous round
    (at most 50 ms): the stage's kernels are then all queued when its start event runs, as
    they are in a step.  A stage whose CPU issue time exceeds its GPU time is then timed by
    its GPU work alone (so a network whose steps are bound by the CPU's issue rate would run
    slower than predicted).  Measured on an H200 (``benchmarks/gpu_timer_ab.py``, large
    networks, whole schedules): step time / predicted time was 0.64-0.97 with stages timed
    from an idle GPU and 0.994-1.032 with their kernels queued (one outlier in two runs:
    1.17).  ``queue_kernels=False`` gives the former.
    """

    MAX_LEAD = 0.05

    def __init__(self, device: torch.device, clock: str = "wall", queue_kernels: bool = True):
        self.cuda = device.type == "cuda"
        self.queue = queue_kernels and self.cuda and hasattr(torch.cuda, "_sleep")
        self.now = time.process_time if check_clock(clock) == "process" else time.perf_counter
        self.lead = 0.0  # seconds of GPU sleep queued before each timed call
        self._issue = []  # CPU seconds to issue each call of this round
        self._sleep_rate = None  # cycles per second of torch.cuda._sleep

    def next_round(self) -> None:
        if self._issue and self.queue:
            q = sorted(self._issue)[int(0.9 * (len(self._issue) - 1))]
            self.lead = min(self.MAX_LEAD, 2 * q)
        self._issue = []

    def _cycles_per_second(self) -> float:
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        cycles = 20_000_000
        torch.cuda._sleep(1000)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        return cycles / (start.elapsed_time(end) / 1000.0)

    def __call__(self, fn) -> float:
        if self.cuda:
            if self.lead > 0:
                if self._sleep_rate is None:
                    self._sleep_rate = self._cycles_per_second()
                torch.cuda._sleep(int(self.lead * self._sleep_rate))
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            t0 = time.perf_counter()
            fn()
            self._issue.append(time.perf_counter() - t0)
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1000.0
        t0 = self.now()
        fn()
        return self.now() - t0


def _tracked_step(ex: ScheduleExecutor, tr: MemoryTracker, op: str):
    before = tr.refresh()
    tr.reset_peak()
    ex.step(Op.parse(op))
    after = tr.refresh()
    return before, tr.peak, after


def _ensure_grads(params) -> None:
    for p in params:
        if p.requires_grad and p.grad is None:
            p.grad = torch.zeros_like(p)


def profile_details(model, example_input: torch.Tensor, loss_fn, device=None, *,
                    repeats: int = 5, warmup: int = 1, name: str | None = None,
                    clock: str = "wall", queue_kernels: bool = True) -> ProfileResult:
    """Profile ``model`` (nn.Sequential or list of stage modules) into a chain, with details.

    ``device``: where to run (the model and input are moved there; default: the input's
    device).  ``repeats``: timed repetitions (median taken); ``warmup``: untimed runs first;
    ``clock``: ``"wall"`` or ``"process"`` (CPU only; see :class:`_Timer`).
    ``queue_kernels``: on a GPU, time each stage with its kernels queued behind a GPU sleep,
    as in a training step (default), or from an idle GPU (see :class:`_Timer`).
    """
    if not isinstance(example_input, torch.Tensor):
        raise RematError(f"example_input must be a tensor, got {type(example_input).__name__}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise RematError(f"repeats = {repeats!r} must be an integer >= 1")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise RematError(f"warmup = {warmup!r} must be an integer >= 0")
    check_clock(clock)
    stages = split_stages(model)
    dev = torch.device(device) if device is not None else example_input.device
    for s in stages:
        s.to(dev)
    if hasattr(loss_fn, "to"):
        loss_fn.to(dev)
    x0 = example_input.detach().to(dev)
    L = len(stages)
    params = stage_parameters(stages)
    resident = {p.untyped_storage().data_ptr() for p in params}
    resident |= {b.untyped_storage().data_ptr() for b in stage_buffers(stages)}

    with model_state_kept(stages, dev):
        _check_stages(stages, x0)
        _ensure_grads(params)
        # ---------------- memory, with the tracker
        tr = MemoryTracker()
        tr.track(x0)
        ex = ScheduleExecutor(stages, loss_fn, x0, tracker=tr)
        x_size = [storage_bytes(x0)]
        fo_nograd = []
        with tr:
            for i in range(L):
                before, peak, after = _tracked_step(ex, tr, f"Fck{i}")
                out = ex.available(i + 1)
                x_size.append(storage_bytes(out))
                fo_nograd.append(peak - after)
                del out
            hook_tape, tracked_tape, fo_record = [], [], []
            for i in range(L):
                ex.saved_log = []
                before, peak, after = _tracked_step(ex, tr, f"Fall{i}")
                out = ex._values.tapes[i + 1].output
                ptrs = {}
                for t in ex.saved_log + [out]:
                    st = t.untyped_storage()
                    if st.data_ptr() and st.data_ptr() not in resident:
                        ptrs[st.data_ptr()] = st.nbytes()
                ex.saved_log.clear()  # the pack hook holds this list until the graph dies
                ex.saved_log = None
                del out
                hook_tape.append(sum(ptrs.values()))
                tracked_tape.append(after - before)
                fo_record.append(peak - after)
            for i in range(1, L + 1):
                ex.step(Op.parse(f"Dropx{i}"))
            bwd_overhead = [0] * (L + 1)
            before, peak, after = _tracked_step(ex, tr, "Loss")
            bwd_overhead[L] = max(0, peak - before - x_size[L])
            for i in range(L - 1, -1, -1):
                before, peak, after = _tracked_step(ex, tr, f"B{i}")
                bwd_overhead[i] = max(0, peak - before - x_size[i])
        del ex
        tape_size = [max(h, t, x_size[i + 1]) for i, (h, t) in enumerate(zip(hook_tape, tracked_tape))]
        fwd_overhead = [max(0, a, b) for a, b in zip(fo_nograd, fo_record)]

        # ---------------- time, without the tracker
        timer = _Timer(dev, clock, queue_kernels)
        fall_t, nograd_t, bwd_t = ([[] for _ in range(L)] for _ in range(3))
        loss_t = []
        for rep in range(warmup + repeats):
            timer.next_round()
            ex = ScheduleExecutor(stages, loss_fn, x0)
            times = [timer(lambda i=i: ex.step(Op.parse(f"Fck{i}"))) for i in range(L)]
            for i in range(1, L + 1):
                ex.step(Op.parse(f"Dropx{i}"))
            times_all = [timer(lambda i=i: ex.step(Op.parse(f"Fall{i}"))) for i in range(L)]
            t_loss = timer(lambda: ex.step(Op.parse("Loss")))
            times_b = {i: timer(lambda i=i: ex.step(Op.parse(f"B{i}"))) for i in range(L - 1, -1, -1)}
            del ex
            if rep < warmup:
                continue
            for i in range(L):
                nograd_t[i].append(times[i])
                fall_t[i].append(times_all[i])
                bwd_t[i].append(times_b[i])
            loss_t.append(t_loss)
    chain = Chain(
        fwd_time=[statistics.median(v) for v in fall_t],
        bwd_time=[statistics.median(v) for v in bwd_t] + [statistics.median(loss_t)],
        x_size=x_size, tape_size=tape_size, fwd_overhead=fwd_overhead,
        bwd_overhead=bwd_overhead, name=name or type(model).__name__)
    return ProfileResult(chain, stages, hook_tape, tracked_tape, fo_nograd, fo_record,
                         [statistics.median(v) for v in nograd_t], str(dev))


def profile(model, example_input: torch.Tensor, loss_fn, device=None, *, repeats: int = 5,
            warmup: int = 1, name: str | None = None, clock: str = "wall") -> Chain:
    """Profile ``model`` into a :class:`Chain` (see the module docstring for each field).

    ``model``: an ``nn.Sequential`` (nested ones flattened) or a list of stage modules;
    ``loss_fn``: maps the model output to a scalar loss (it is stage L of the chain).
    """
    return profile_details(model, example_input, loss_fn, device, repeats=repeats,
                           warmup=warmup, name=name, clock=clock).chain


def _check_stages(stages, x0: torch.Tensor) -> None:
    """One no-grad pass: each stage must return one new tensor and leave its input alone."""
    x = x0
    with torch.no_grad():
        for i, s in enumerate(stages):
            version = x._version
            y = s(x)
            if not isinstance(y, torch.Tensor):
                raise RematError(f"stage {i} ({type(s).__name__}) returned {type(y).__name__}; "
                                 f"a stage must return one tensor")
            if x._version != version:
                raise RematError(f"stage {i} ({type(s).__name__}) modifies its input in place "
                                 f"(e.g. ReLU(inplace=True) as its own stage); group it with the "
                                 f"stage before it by passing a list of modules")
            if y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr():
                raise RematError(f"stage {i} ({type(s).__name__}) returns a view of its input "
                                 f"(e.g. Flatten as its own stage); group it with a neighbouring "
                                 f"stage by passing a list of modules")
            x = y
