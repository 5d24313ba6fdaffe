"""Operation times of a chain of stages: a timer on the wall clock or the process clock (CUDA
events on a GPU), each stage's forward and backward measured in repeated plain passes."""
from __future__ import annotations

import statistics
import time

import torch

from remat_theory.model.errors import RematError
from remat_theory.model.schedule import Op
from remat_theory.torch.run.executor import ScheduleExecutor


def clear_grads(params) -> None:
    """Parameter gradients start a step absent (``optimizer.zero_grad()``'s default): the
    backward then allocates each one, and the meter counts it as persistent memory."""
    for p in params:
        p.grad = None


CLOCKS = ("wall", "process")


def check_clock(clock: str) -> str:
    if clock not in CLOCKS:
        raise RematError(f"clock = {clock!r} is unknown (expected one of {', '.join(CLOCKS)})")
    return clock


class Timer:
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


def measure_times(stages, loss_fn, x0, params, dev, repeats, warmup, clock, queue_kernels):
    """Median seconds of each operation, as the drop-in (:mod:`.module`) runs it.

    The drop-in runs a kept stage as plain autograd and a checkpointed segment through a
    non-reentrant ``torch.utils.checkpoint``: its first forward in autograd mode with every
    saved tensor discarded, its recomputation, in the backward, in autograd mode under
    saved-tensor hooks, then its backward.  So, per round:

    * the executor's Fck_i (autograd mode, saved tensors discarded: a checkpoint's first
      forward) and Fall_i (recording under the executor's saved-tensor hooks: what a
      recomputation runs), then its Loss and B_i;
    * a plain-autograd pass: each stage called on a detached copy of its input (no hooks),
      the loss, then each stage's own backward: ``fall_time[i]`` and ``bwd_time``, what a kept
      stage costs;
    * ``fwd_time[i]`` = Fck_i + max(0, hooked Fall_i - plain Fall_i): the chain charges a
      recomputed stage Fck + Fall + B, while the drop-in pays the checkpoint's forward, a
      recomputation under hooks (dearer than a plain recording forward) and the backward.

    Measured on the small Llama and GPT-2 (``benchmarks/recompute_cost.py``, docs/torch.md):
    the executor's per-operation times summed to 1.15-1.18 times a plain step, the plain
    pass's to about 1.0, and the hooked recomputation cost 1.26 times a plain forward."""
    L = len(stages)
    timer = Timer(dev, clock, queue_kernels)
    ex_fall, ex_fck, plain_fall, plain_bwd = ([[] for _ in range(L)] for _ in range(4))
    ex_bwd = [[] for _ in range(L + 1)]  # the executor's B_0 .. B_{L-1}, then its Loss
    loss_t = []
    # parsed once, outside the timed calls: a schedule's operations are parsed before it runs
    fck, fall, back = ([Op.parse(f"{k}{i}") for i in range(L)] for k in ("Fck", "Fall", "B"))
    loss = Op.parse("Loss")
    for rep in range(warmup + repeats):
        timer.next_round()
        clear_grads(params)
        ex = ScheduleExecutor(stages, loss_fn, x0)
        t_fck = [timer(lambda i=i: ex.step(fck[i])) for i in range(L)]
        for i in range(1, L + 1):
            ex.step(Op.parse(f"Dropx{i}"))
        t_fall = [timer(lambda i=i: ex.step(fall[i])) for i in range(L)]
        t_back = [timer(lambda: ex.step(loss))]
        t_back += [timer(lambda i=i: ex.step(back[i])) for i in range(L - 1, -1, -1)]
        del ex
        clear_grads(params)
        t_plain_f, t_plain_b, t_loss = plain_pass(stages, loss_fn, x0, timer)
        if rep < warmup:
            continue
        for i in range(L):
            ex_fck[i].append(t_fck[i])
            ex_fall[i].append(t_fall[i])
            plain_fall[i].append(t_plain_f[i])
            plain_bwd[i].append(t_plain_b[i])
            ex_bwd[i].append(t_back[L - i])
        ex_bwd[L].append(t_back[0])
        loss_t.append(t_loss)
    clear_grads(params)
    med = statistics.median
    fall = [med(v) for v in plain_fall]
    hooked = [med(v) for v in ex_fall]
    return {"nograd": [med(a) + max(0.0, h - f) for a, h, f in zip(ex_fck, hooked, fall)],
            "fall": fall, "bwd": [med(v) for v in plain_bwd] + [med(loss_t)],
            "executor_fck": [med(v) for v in ex_fck], "executor_fall": hooked,
            "executor_bwd": [med(v) for v in ex_bwd]}


def plain_pass(stages, loss_fn, x0, timer):
    """One store-all step of the stages as plain autograd, each stage timed alone: its
    forward on a detached input (needing a gradient where the executor's does: a float x_0
    and every later input), the loss forward and backward, then each stage's backward from
    the gradient of its output.  No saved-tensor hooks, no executor: what a kept stage costs
    in the drop-in.  Returns (forward times, backward times, loss time)."""
    L = len(stages)
    ins, outs, t_f, t_b = [], [], [0.0] * L, [0.0] * L
    x = x0.detach()
    for i, s in enumerate(stages):
        z = x.detach()
        if z.is_floating_point() or z.is_complex():
            z.requires_grad_()
        box = []
        t_f[i] = timer(lambda s=s, z=z: box.append(s(z)))
        ins.append(z)
        outs.append(box[0])
        x = box[0]
    del x, box, z
    last = outs[-1].detach().requires_grad_()

    def run_loss():
        loss_fn(last).backward()
    t_loss = timer(run_loss)
    grad = last.grad
    del last
    for i in range(L - 1, -1, -1):
        y, g = outs[i], grad
        outs[i] = None
        t_b[i] = timer(lambda: torch.autograd.backward(y, g))
        del y, g
        grad = ins[i].grad
        ins[i] = None
    return t_f, t_b, t_loss
