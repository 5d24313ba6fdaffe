"""Profile a network into a :class:`~remat_theory.model.chain.Chain` (model: docs/model.md).

Memory is what torch's allocator holds, measured per operation by an
:class:`~remat_theory.torch.tracker.AllocatorMeter` (allocations inside kernels included;
on the CPU through ``torch.profiler``'s memory events, on CUDA through the caching
allocator's counters), in one pass of every operation the executor runs: Fck_0..Fck_{L-1},
Fall_0..Fall_{L-1}, Loss, B_{L-1}..B_0.  For every stage i (the stages of
:func:`~remat_theory.torch.capture.stages.split_stages`):

* ``x_size[i+1]``: bytes of the stage output (its storage; on CUDA the allocator's rounded
  block where larger); ``x_size[0]``: the input.
* ``tape_size[i]``: what the recording forward Fall_i leaves allocated (bytes held after it
  minus before), and at least what ``torch.autograd.graph.saved_tensors_hooks`` sees autograd
  save (each storage once, plus the output: the tape includes x_{i+1}).  Not counted: the
  stage *input* (the model's B_i needs x_i separately, and the executor re-reads it from
  whatever copy of x_i is held, see :mod:`.executor`), parameters and buffers (resident
  whatever the schedule).  Both measures are reported (``hook_tape_size``,
  ``allocator_tape_size``).
* ``fwd_overhead[i]``: the no-grad forward's transient (Fn_i, Fck_i): its peak minus (held
  before + x_size[i+1]).  ``fall_overhead[i]``: the recording forward's (Fall_i): its peak
  minus (held before + tape_size[i]).  They differ: without grad a transformer layer's
  attention scores and MLP intermediates are transients; with grad they are kept in the tape.
* ``bwd_overhead[i]``: peak during B_i minus (held before + x_size[i]); for the loss, peak
  minus (held before + x_size[L]).  B_i runs as in a plain ``loss.backward()``: d_{i+1} and
  each part of the tape are freed as soon as autograd has read them (the executor's
  ``release``), so that a transient-heavy backward (attention, a convolution) is measured
  at the peak it really reaches.  Where that peak falls below held + x_size[i] (a ReLU's or
  a Linear's backward frees d_{i+1} before it allocates d_i), which the operation table
  cannot express, the stage's backward is measured and run holding them to its end
  instead, where the table is exact (``ProfileResult.bwd_release``); what stays below (no
  d_0 for token ids, say) is clamped to 0 and reported (``ProfileResult.bwd_below_table``).
* ``output_saved[i]``: whether any backward reads x_{i+1}: stage i's recording forward
  saved it (a ReLU saves its output), or stage i+1's saved it as its input (a Linear saves
  its input); for the last stage only the former (the loss runs its forward and backward
  at once, and then frees x_L).  Decided by comparing the storages autograd saves (through
  ``saved_tensors_hooks``) with the output's storage, so that a saved view counts.  The
  output of a Linear followed by a ReLU is unsaved: plain autograd frees it as soon as the
  ReLU has read it.  ``tape_size[i]`` is still all Fall_i adds, the output included; the
  chain holds ``tape_size[i] - x_size[i+1]`` of it as the tape when the output is unsaved.
* ``fall_time[i]``, ``bwd_time[i]``: median over repeats of stage i's forward and backward
  as plain autograd runs them (each stage on a detached input, no saved-tensor hooks): what
  a kept stage costs in the drop-in, whose kept stages are plain autograd; ``bwd_time[L]``:
  the loss forward and backward.  ``fwd_time[i]`` (Fn/Fck): the executor's Fck_i (autograd
  mode, every saved tensor discarded: a non-reentrant checkpoint's first forward) plus what
  the recomputation's saved-tensor hooks add to a recording forward (the executor's Fall_i
  minus the plain one, at least 0): the chain charges a recomputed stage Fck + Fall + B,
  the drop-in pays the checkpoint's forward, a hooked recomputation and the backward
  (:func:`measure_times`; the executor's own times: ``ProfileResult.executor_times``).
  Times are seconds, CUDA events on a GPU (with the stage's kernels
  queued ahead, see :class:`Timer`), ``time.perf_counter`` on the CPU (where operations are
  synchronous), or there ``time.process_time`` with ``clock="process"``.

Parameter gradients are not activations: each step starts with them absent (as after
``optimizer.zero_grad()``), the backward allocates them and they stay for the step, so they
are counted whole beside the chain (``ProfileResult.param_grad_bytes``), outside any budget,
like the weights and the optimizer state.  A backward that *adds* into an existing gradient
(a parameter shared by several stages, as in the unrolled RNN) allocates the stage's
gradient, adds it and frees it: that transient is the backward's own and is in its overhead.

Memory is measured by running the real executor operations on the real stages, so the
chain's bytes describe exactly what the executor will do; times describe the drop-in (the
executor's hooks make its own store-all run 1.15-1.2 times a plain step on the small
Llama and GPT-2, docs/torch.md).  Profiling leaves the model as it was:
buffers (BatchNorm statistics), parameter ``.grad`` and random generator states are
restored afterwards.  On the CPU it needs ``torch.profiler`` to be free (no other profiler
session running).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError
from remat_theory.model.schedule import Op
from remat_theory.torch.capture.carried import carried_tensors
from remat_theory.torch.capture.stages import (model_state_kept, rng_changed, rng_state,
                                               split_stages, stage_buffers, stage_parameters)
from remat_theory.torch.profiling.times import check_clock, clear_grads, measure_times
from remat_theory.torch.run.executor import ScheduleExecutor
from remat_theory.torch.tracker import AllocatorMeter, storage_bytes


@dataclass
class ProfileResult:
    """A profiled chain and the measurements behind it (bytes, seconds)."""

    chain: Chain
    stages: list = field(repr=False)
    hook_tape_size: list = field(default_factory=list)  # from saved_tensors_hooks
    allocator_tape_size: list = field(default_factory=list)  # bytes Fall_i left allocated
    fwd_overhead_nograd: list = field(default_factory=list)  # = chain.fwd_overhead
    fwd_overhead_record: list = field(default_factory=list)  # = chain.fall_overhead
    fwd_time_nograd: list = field(default_factory=list)  # = chain.fwd_time
    param_grad_bytes: int = 0  # parameter gradients, persistent, outside the chain
    saves_input: list = field(default_factory=list)  # Fall_i saved (a view of) x_i
    saves_output: list = field(default_factory=list)  # Fall_i saved (a view of) x_{i+1}
    ops: list = field(default_factory=list, repr=False)  # per-op {label, before, peak, after}
    device: str = "cpu"
    # per stage: B_i lets autograd free d_{i+1} and the tape as it goes (the executor's
    # ``release``; pass it to ScheduleExecutor / measure_run with this chain)
    bwd_release: list = field(default_factory=list)
    # per backward (the loss last): bytes its peak stays below the operation table's
    bwd_below_table: list = field(default_factory=list)
    # per stage: its forward draws random numbers (dropout in training mode): a checkpoint
    # of it must keep the generator state to replay them (drop-in: preserve_rng_state)
    draws_random: list = field(default_factory=list)
    # bytes by which B_0's peak is lower when x_0 needs no gradient (a training batch, the
    # drop-in's usual input): d_0 and what computing it takes; 0 for integer inputs
    input_grad_bytes: int = 0
    # bytes a caller's ``loss = loss_fn(out); loss.backward()`` holds beside the chain from
    # the loss on: the loss tensor's storage (a reduction buffer the size of x_L for an MSE
    # on the CPU, 4 B for a cross-entropy) and the gradient seeding the backward
    loss_bytes: int = 8
    # per stage, the executor's own times (its saved-tensor hooks included): "fck" (a
    # checkpoint's first forward), "fall" (a recomputation) and "bwd" (B_i, the Loss last);
    # see measure_times and executor_chain
    executor_times: dict = field(default_factory=dict)

    def executor_chain(self) -> Chain:
        """The chain with the times :class:`ScheduleExecutor` takes (every operation under
        its saved-tensor hooks), for predicting a schedule the executor runs (``remat
        confirm``); :attr:`chain` has the drop-in's (kept stages as plain autograd).  Sizes
        are the same.  Without executor times (a profile read from an older file), the
        chain itself."""
        t = self.executor_times
        if not all(t.get(k) for k in ("fck", "fall", "bwd")):
            return self.chain
        return self.chain.replace(fwd_time=list(t["fck"]), fall_time=list(t["fall"]),
                                  bwd_time=list(t["bwd"]))

    def to_dict(self) -> dict:
        return {"chain": self.chain.to_dict(), "hook_tape_size": self.hook_tape_size,
                "allocator_tape_size": self.allocator_tape_size,
                "fwd_overhead_nograd": self.fwd_overhead_nograd,
                "fwd_overhead_record": self.fwd_overhead_record,
                "fwd_time_nograd": self.fwd_time_nograd,
                "param_grad_bytes": self.param_grad_bytes, "saves_input": self.saves_input,
                "saves_output": self.saves_output, "ops": self.ops, "device": self.device,
                "bwd_release": self.bwd_release, "bwd_below_table": self.bwd_below_table,
                "draws_random": self.draws_random, "input_grad_bytes": self.input_grad_bytes,
                "loss_bytes": self.loss_bytes, "executor_times": self.executor_times}


def prime_forward(stages, x0: torch.Tensor, device) -> None:
    """One no-grad forward of every stage, the model's buffers, gradients and random
    generators left as they were: run first inside an :class:`AllocatorMeter`, so that state
    a module keeps between calls is made inside the measurement (see its docstring)."""
    with model_state_kept(stages, device), torch.no_grad():
        x = x0
        for s in stages:
            x = s(x)
        del x


def _check_arguments(example_input, repeats, warmup, clock) -> None:
    if not isinstance(example_input, torch.Tensor):
        raise RematError(f"example_input must be a tensor, got {type(example_input).__name__}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise RematError(f"repeats = {repeats!r} must be an integer >= 1")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise RematError(f"warmup = {warmup!r} must be an integer >= 0")
    check_clock(clock)


def profile_details(model, example_input: torch.Tensor, loss_fn, device=None, *,
                    repeats: int = 5, warmup: int = 1, name: str | None = None,
                    clock: str = "wall", queue_kernels: bool = True) -> ProfileResult:
    """Profile ``model`` (nn.Sequential or list of stage modules) into a chain, with details.

    Parameters
    ----------
    model : an ``nn.Sequential`` (nested ones flattened) or a list of stage modules.
    example_input : the network input x_0 (a tensor).
    loss_fn : maps the model output to a scalar loss (stage L of the chain).
    device : where to run (the model and input are moved there; default: the input's device).
    repeats : timed repetitions per operation (the median is taken).
    warmup : untimed runs first.
    clock : ``"wall"`` or ``"process"`` (CPU only; see :class:`Timer`).
    queue_kernels : on a GPU, time each stage with its kernels queued behind a GPU sleep, as
        in a training step (default), or from an idle GPU (see :class:`Timer`).

    Returns
    -------
    ProfileResult
        The chain (sizes and overheads from the allocator, see the module docstring) and the
        raw measurements behind it.
    """
    _check_arguments(example_input, repeats, warmup, clock)
    stages = split_stages(model)
    dev = torch.device(device) if device is not None else example_input.device
    for s in stages:
        s.to(dev)
    if hasattr(loss_fn, "to"):
        loss_fn.to(dev)
    x0 = example_input.detach().to(dev)
    params = stage_parameters(stages)
    with model_state_kept(stages, dev):
        _check_stages(stages, x0)
        # Time first: the warm-up runs also make whatever a stage allocates once and keeps
        # (library workspaces, lazily built caches) before memory is measured.
        times = measure_times(stages, loss_fn, x0, params, dev, repeats, warmup, clock,
                               queue_kernels)
        mem = _measure_memory(stages, loss_fn, x0, params, dev)
        input_grad = _input_grad_bytes(stages, x0, params, dev, mem["bwd_release"][0])
    chain = Chain(
        fwd_time=times["nograd"], bwd_time=times["bwd"], x_size=mem["x_size"],
        tape_size=mem["tape_size"], fwd_overhead=mem["fwd_overhead"],
        bwd_overhead=mem["bwd_overhead"], fall_time=times["fall"],
        fall_overhead=mem["fall_overhead"], output_saved=mem["output_saved"],
        name=name or type(model).__name__)
    return ProfileResult(chain, stages, mem["hook_tape"], mem["allocator_tape"],
                         mem["fwd_overhead"], mem["fall_overhead"], times["nograd"],
                         mem["param_grad_bytes"], mem["saves_input"], mem["saves_output"],
                         mem["ops"], str(dev), mem["bwd_release"], mem["bwd_below_table"],
                         mem["draws_random"], input_grad, mem["loss_bytes"],
                         {"fck": times["executor_fck"], "fall": times["executor_fall"],
                          "bwd": times["executor_bwd"]})


def _measure_memory(stages, loss_fn, x0, params, dev) -> dict:
    """Sizes and overheads from one pass of every operation (:func:`_memory_pass`), each
    backward letting autograd free d_{i+1} and the tape as it goes (what a plain
    ``loss.backward()`` does).  Where a backward's peak then falls below held + x_size[i],
    which the operation table cannot express (an over-prediction: a ReLU's or a Linear's
    backward frees d_{i+1} before it allocates d_i), a second pass holds them to the end of
    that backward, as the table says, and the stage's backward is measured (and run by the
    executor) that way: ``bwd_release``.  ``bwd_below_table``: bytes by which B_i's peak
    stays below the table's in the mode chosen (the profile then clamps its overhead to 0)."""
    L = len(stages)
    mem = _memory_pass(stages, loss_fn, x0, params, dev, (True,) * L)
    release = tuple(b >= 0 for b in mem["bwd_raw"][:L])
    if not all(release):
        held = _memory_pass(stages, loss_fn, x0, params, dev, release)
        # a stage held only where holding makes its backward exact (else: released, the
        # plain backward's behaviour, the smaller over-prediction)
        final = tuple(r or h < 0 for r, h in zip(release, held["bwd_raw"]))
        if final == release:
            mem = held
        elif not all(final):
            mem = _memory_pass(stages, loss_fn, x0, params, dev, final)
        release = final
    mem["bwd_release"] = list(release)
    mem["bwd_below_table"] = [max(0, -b) for b in mem["bwd_raw"]]
    return mem


def _memory_pass(stages, loss_fn, x0, params, dev, release) -> dict:
    """One pass of every operation under an :class:`AllocatorMeter`: Fck_0..Fck_{L-1}, then
    Fall_0..Fall_{L-1}, Loss, B_{L-1}..B_0; sizes and overheads from its per-operation bytes."""
    L = len(stages)
    resident = {p.untyped_storage().data_ptr() for p in params}
    resident |= {b.untyped_storage().data_ptr() for b in stage_buffers(stages)}
    clear_grads(params)
    meter = AllocatorMeter(dev, persistent=lambda: [p.grad for p in params],
                           prime=lambda: prime_forward(stages, x0, dev))
    storage_x = [storage_bytes(x0)]
    hook_tape = []
    with meter:
        ex = ScheduleExecutor(stages, loss_fn, x0, tracker=meter, release=release)
        draws = []
        for i in range(L):
            with meter.paused():
                rng = rng_state(dev)
            with meter.op(f"Fck{i}"):
                ex.step(Op.parse(f"Fck{i}"))
            with meter.paused():
                draws.append(rng_changed(rng, dev))
                del rng
            storage_x.append(storage_bytes(ex.available(i + 1)))
        for i in range(L):
            ex.saved_log = []
            with meter.op(f"Fall{i}"):
                ex.step(Op.parse(f"Fall{i}"))
            out = ex._values.tapes[i + 1].output
            ptrs = {}
            carried = {t.untyped_storage().data_ptr() for t in carried_tensors(stages)}
            for t in ex.saved_log + [out]:
                st = t.untyped_storage()
                if st.data_ptr() and st.data_ptr() not in resident | carried:
                    ptrs[st.data_ptr()] = st.nbytes()
            ex.saved_log.clear()  # the pack hook holds this list until the graph dies
            ex.saved_log = None
            # nothing of the tape may stay referenced here: a backward that lets autograd
            # free it as it goes would be measured holding it
            del out, t, st
            hook_tape.append(sum(ptrs.values()))
        for i in range(1, L + 1):
            ex.step(Op.parse(f"Dropx{i}"))
        # this pass ran without output_saved (it is what it measures): the tapes still hold
        # the outputs no backward reads, which a run of the chain has released by now
        # (executor, unsaved outputs); release them too, or a backward that lets autograd
        # free its tape as it goes would be measured freeing them
        saved_now = output_saved([ex.saves[i] for i in range(L)])
        for i in range(L - 1):  # x_L: the Loss op (release_loss_input below)
            if not saved_now[i]:
                ex._release(ex._values.tapes[i + 1].output)
        # x_L unsaved (no backward of the chain reads it): autograd frees it after the loss's
        # forward, before the loss's backward, and so does the executor (the Loss op is
        # measured as it will run)
        ex.release_loss_input = not ex.saves[L - 1].output
        with meter.op("Loss"):
            ex.step(Op.parse("Loss"))
        loss_bytes = ex.loss_storage_bytes
        if not ex.saves[L - 1].output:  # a run releases an unsaved x_L at the Loss op, also
            ex._release(ex._values.tapes[L].output)  # when the loss read it (it is done)
        for i in range(L - 1, -1, -1):
            with meter.op(f"B{i}"):
                ex.step(Op.parse(f"B{i}"))
        saves = [ex.saves[i] for i in range(L)]
        del ex
    clear_grads(params)
    ops = {r.label: r for r in meter.results()}
    x_size = [storage_x[0]] + [max(storage_x[i + 1], ops[f"Fck{i}"].after - ops[f"Fck{i}"].before)
                               for i in range(L)]
    alloc_tape = [ops[f"Fall{i}"].after - ops[f"Fall{i}"].before for i in range(L)]
    tape_size = [max(h, a, x_size[i + 1]) for i, (h, a) in enumerate(zip(hook_tape, alloc_tape))]

    def raw(label, made):
        r = ops[label]
        return r.peak - r.before - made

    def over(label, made):
        return max(0, raw(label, made))

    return {"x_size": x_size, "tape_size": tape_size, "hook_tape": hook_tape,
            "output_saved": output_saved(saves), "saves_input": [s.input for s in saves],
            "saves_output": [s.output for s in saves],
            "allocator_tape": alloc_tape,
            "fwd_overhead": [over(f"Fck{i}", x_size[i + 1]) for i in range(L)],
            "fall_overhead": [over(f"Fall{i}", tape_size[i]) for i in range(L)],
            "bwd_overhead": [over(f"B{i}", x_size[i]) for i in range(L)] + [over("Loss", x_size[L])],
            "bwd_raw": [raw(f"B{i}", x_size[i]) for i in range(L)] + [raw("Loss", x_size[L])],
            "param_grad_bytes": meter.persistent_bytes, "ops": [vars(r) for r in meter.results()],
            "draws_random": draws, "loss_bytes": loss_bytes}


def _input_grad_bytes(stages, x0, params, dev, release0: bool) -> int:
    """Bytes by which B_0's peak is lower when x_0 needs no gradient, as in a training step
    (the drop-in's ``ck(x)`` on a batch): the table's B_0 makes d_0 of x_size[0] bytes, and
    a stage can also skip work for it (a convolution's backward does not compute, nor make
    room for, the gradient of its input).  Stage 0's recording forward and backward alone,
    under the allocator meter, with and without d_0 (the same release mode as the profile's
    B_0; the incoming gradient made outside the count), and the difference of the two
    backward transients.  0 for an input without gradients (token ids), and for a stage 0
    without trainable parameters (without d_0 autograd does not run its backward at all;
    no saving is claimed there: the table's B_0 stays an upper bound)."""
    if not (x0.is_floating_point() or x0.is_complex()):
        return 0
    if not any(p.requires_grad for p in stages[0].parameters()):
        return 0
    rises = []
    for grad in (True, False):
        clear_grads(params)
        meter = AllocatorMeter(dev, persistent=lambda: [p.grad for p in params],
                               prime=lambda: prime_forward(stages[:1], x0, dev))
        with meter:
            ex = ScheduleExecutor(stages[:1], None, x0, tracker=meter, release=(release0,),
                                  input_grad=grad)
            with meter.op("Fall0"):
                ex.step(Op.parse("Fall0"))
            d = torch.ones_like(ex.available(1))  # counted, as d_1 is before B_0
            ex.set_loss_grad(d)
            del d
            with meter.op("B0"):
                ex.step(Op.parse("B0"))
            del ex
        r = meter.results()[-1]
        rises.append(r.peak - r.before)
    clear_grads(params)
    return max(0, rises[0] - rises[1])


def stage_draws(stages, x0: torch.Tensor, device=None) -> list:
    """Per stage, whether its forward draws random numbers (one no-grad forward of the
    stages in order, model state and generators restored after): what
    ``ProfileResult.draws_random`` says, for a chain profiled elsewhere."""
    dev = torch.device(device) if device is not None else x0.device
    draws = []
    with model_state_kept(stages, dev), torch.no_grad():
        x = x0.to(dev)
        for s in stages:
            before = rng_state(dev)
            x = s(x)
            draws.append(rng_changed(before, dev))
    return draws


def output_saved(saves) -> list:
    """``output_saved[i]`` from what each stage's recording forward saved
    (:class:`~remat_theory.torch.run.executor.StageSaves`, one per stage): x_{i+1} is read by a
    backward when stage i saved it as its output or stage i+1 as its input.  x_L is read
    after its stage's forward only by the loss, which runs its backward at once."""
    L = len(saves)
    return [saves[i].output or (i + 1 < L and saves[i + 1].input) for i in range(L)]


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
