"""Run any schedule of the chain model on a real network, with autograd.

The executor holds exactly the values the schedule says (docs/model.md, operation
table), and frees them when the table says so:

* x_i (plain): a tensor computed without keeping a tape (autograd mode, every saved
  tensor discarded, the output detached: see ``Fn``).
* t_{i+1} (the tape of F_i): the output of stage i computed *with* recording, from a
  detached copy-free alias of x_i; the autograd graph hanging from it holds everything the
  stage saved for its backward.  What the stage saves of its own input x_i is *not* kept in
  the tape: a ``saved_tensors_hooks`` pack hook replaces it by a reference "x_i, this
  shape/stride/offset", and the unpack hook fetches whatever x_i is available when B_i runs
  (plain x_i, or the output inside t_i).  That is the model's rule "B_i needs t_{i+1} and
  x_i", and it is why freeing a plain x_i really frees its memory even while t_{i+1} lives.
* d_i: the one live gradient.  The gradient with respect to a stage input is caught by a
  tiny autograd function (:class:`Source`) placed in front of the stage, which hands it to
  the executor without the graph keeping a reference to the input tensor.

Operations (tokens as in :mod:`remat_theory.model.schedule`):

* ``Fn{i}`` / ``Fck{i}``: ``y = stage_i(x_i)`` keeping no tape; Fn then frees the plain
  x_i if one is held, otherwise the tape t_i it read x_i from (never x_0).  It runs as a
  non-reentrant checkpoint's forward does (autograd mode, a ``saved_tensors_hooks`` pack
  hook that keeps nothing, the output detached), not under ``torch.no_grad()``: a stage can
  pick other kernels without grad (Swin's masked window attention does, and its gradients
  then differed from the eager model's in the last bits), so this is the eager computation.
* ``Fall{i}``: stage i with autograd recording; keeps the graph as t_{i+1}.  When x_{i+1}
  is unsaved (``output_saved[i]`` false: no backward reads it, see below), the output also
  becomes the plain x_{i+1} (sharing its storage), or, when a plain x_{i+1} is already held,
  the new copy's storage is released at once; when x_i is unsaved, Fall_i frees the plain
  x_i it read.
* ``Loss``: ``loss_fn(x_L)`` forward and backward; keeps d_L, frees a plain x_L.
* ``B{i}``: the backward of t_{i+1}'s graph from d_{i+1}: gives d_i and accumulates the
  stage's parameter gradients into ``.grad``; frees d_{i+1}, t_{i+1} and a plain x_i.  By
  default (``release[i]`` true) the executor hands d_{i+1} and the tape over to autograd's
  engine before it starts (:class:`Seed`), so that each is freed as soon as the node that
  reads it has run, as in the plain ``loss.backward()`` the drop-in runs: the backward's
  peak is then what autograd's is, and the profiler measures it so.  Where that peak falls
  below "held + x_size[i]", which the operation table cannot express, the profiler holds
  them to the end of B_i instead (``release[i]`` false: ``torch.autograd.backward(output,
  d_{i+1})``), where the table is exact (``ProfileResult.bwd_release``).
* ``Dropx{i}`` / ``Dropt{i}`` (the explicit-deletion extension): free the value.

Unsaved outputs (``output_saved``, docs/model.md).  A Linear saves its input for its
backward, not its output; a ReLU saves its output, not its input.  So the output of a Linear
followed by a ReLU is read by no backward, and plain autograd frees it as soon as the ReLU
has read it.  The chain says so with ``output_saved[i] = False``; the executor then holds
x_{i+1} only as a plain value: the tape t_{i+1} keeps the output tensor as the root of the
backward (its shape, dtype and ``grad_fn``, all ``torch.autograd.backward`` reads of it),
and when the plain value is freed while the tape lives, the storage they share is released
with ``untyped_storage().resize_(0)`` (as FSDP releases its parameters), so the memory is
really returned.  That is safe exactly when no saved tensor lives on that storage; every
recording forward checks it (comparing storages, not tensors: a view saves its base's
storage) and refuses a chain that says otherwise, naming the stage, rather than computing a
wrong gradient.

Every operation is first checked with the simulator's own transition function, and what is
freed is read off the simulator's next state, so the executor cannot drift from the model.

Randomness and running statistics.  The first forward of stage i records the CPU (and
CUDA) random generator states; every later forward of stage i (a recomputation) runs
inside ``torch.random.fork_rng`` with those states restored, so dropout draws the same
masks and the global generators advance exactly as in plain backpropagation (the approach
of ``torch.utils.checkpoint``).  Recomputations also save and restore the running
statistics of BatchNorm-like modules (:func:`running_stat_buffers`), so they are updated
once per training step, by the first forward, as without checkpointing.

Two ways to run a schedule.  :class:`ScheduleExecutor` runs any schedule (non-persistent
ones and explicit deletions included) operation by operation, each checked against the
simulator: the referee that the profiler and ``remat confirm`` use.  A persistent schedule
(every one the DP finds) also has a *nested form*
(:func:`remat_theory.torch.run.nested.nested_form`): each stage is kept
(``Fall .. B``) or starts a checkpointed segment (``Fck Fn ..``, replayed later), and
:func:`~remat_theory.torch.run.nested.run_nested` runs it as ordinary autograd with one non-reentrant
``torch.utils.checkpoint`` per checkpointed segment, so that autograd's own engine runs the
backward.  That is what :class:`~remat_theory.torch.modules.checkpointed.CheckpointedSequential` runs: it
adds nothing to the stages it keeps, and everything autograd offers (``retain_graph``,
``torch.autograd.grad``, autocast) keeps working.
"""
from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass

import torch
import torch.utils.checkpoint
from torch.multiprocessing.reductions import StorageWeakRef

from remat_theory.model.chain import Chain
from remat_theory.model.errors import InvalidScheduleError, RematError
from remat_theory.model.schedule import DROP, FALL, FCK, FN, LOSS, B, Op, Schedule
from remat_theory.model.simulator import State, transition
from remat_theory.torch.capture.stages import (rng_state, running_stat_buffers, set_rng_state,
                                               split_stages)
from remat_theory.torch.run.values import (InputRef, Seed, Slot, Source, StageSaves, Tape, Values,
                                           check_output_saved, check_release, device_list, discard,
                                           has_gradient, same_storage, unreachable)


@dataclass
class ExecutionResult:
    """Outcome of a full schedule: the loss value and d_0, the gradient of the input.

    Parameter gradients were accumulated into the parameters' ``.grad``."""

    loss: torch.Tensor
    input_grad: torch.Tensor


class ScheduleExecutor:
    """Execute a schedule operation by operation on ``stages`` (see the module docstring).

    Parameters
    ----------
    stages : an ``nn.Sequential`` (flattened) or a list of modules, one per stage.
    loss_fn : callable mapping x_L (the last stage's output) to a scalar loss; None when the
        loss is run by the caller (:meth:`set_loss_grad`).
    x0 : the network input (never freed).
    tracker : optional :class:`MemoryTracker`; its bookkeeping copies are not counted.
    allow_drop : accept the explicit-deletion ops Dropx/Dropt.
    output_saved : L booleans, optional (default all true): the chain's ``output_saved``
        (pass ``chain.output_saved`` of the chain the schedule was made for); where false,
        x_{i+1} is held only as a plain value, as the operation table says.
    release : L booleans, optional (default all true): per stage, whether B_i hands d_{i+1}
        and the tape to autograd's engine (``ProfileResult.bwd_release``; module docstring).
    input_grad : bool (default True): a float x_0 is differentiable and B_0 computes d_0,
        as the operation table says; False: x_0 needs no gradient, as a training batch does,
        and B_0 computes none (the profiler measures how much that saves,
        ``ProfileResult.input_grad_bytes``).

    Attributes: ``saves`` (dict: stage -> :class:`StageSaves` of its latest recording
    forward), which the profiler reads to decide ``output_saved``.
    """

    def __init__(self, stages, loss_fn, x0: torch.Tensor, *, tracker=None, allow_drop: bool = True,
                 output_saved=None, release=None, input_grad: bool = True):
        self._x0_grad = bool(input_grad)
        self.stages = stages if isinstance(stages, list) else split_stages(stages)
        self.L = len(self.stages)
        self.loss_fn = loss_fn
        self.tracker = tracker
        self.allow_drop = allow_drop
        self.device = x0.device
        self._unit = Chain.homogeneous(self.L, name="executor")
        if output_saved is not None:
            self._unit = self._unit.replace(output_saved=check_output_saved(output_saved, self.L))
        self.output_saved = self._unit.output_saved
        self.release = check_release(release, self.L)
        self._state = State.initial(self._unit)
        self._values = Values((True,) + self.output_saved)
        self.saves: dict = {}
        self._values.plain[0] = x0.detach()
        self._dummy = torch.empty(0, device=x0.device, requires_grad=True)
        self._grad = None  # the live gradient d_{bwd_next+1}
        self._rng: dict = {}
        self._steps = 0
        self.loss = None
        self.loss_storage_bytes = 0  # the last Loss op's loss storage and seed (bytes)
        self.saved_log = None  # list to record (storage weak ref, nbytes) of saved tensors
        # the profiler's pass reads x_L out of the tape t_L; when x_L is unsaved it tells the
        # executor to release it at the Loss as a run holding it plain does
        self.release_loss_input = False
        # the caller's view of x_L (a weak reference, set by the offload run): while the
        # caller still holds it, its storage is not released under it (reading a tensor whose
        # storage was resized to nothing crashes the process); the executor drops its own
        # references, and the memory goes back when the caller lets go, as in plain autograd
        self.caller_output = None

    # ------------------------------------------------------------------ public
    @property
    def state(self) -> State:
        return self._state

    @property
    def done(self) -> bool:
        return self._state.is_final()

    @property
    def input_grad(self):
        """d_0 once the schedule has finished, else None."""
        return self._grad if self.done else None

    def available(self, i: int):
        """x_i as held (plain, or the output inside t_i), or None."""
        return self._values.available(i)

    def run(self, schedule) -> ExecutionResult:
        """Run every operation of ``schedule`` (a Schedule or its token text) to the end."""
        if isinstance(schedule, str):
            schedule = Schedule.parse(schedule)
        for op in schedule:
            self.step(op)
        if not self.done:
            raise InvalidScheduleError("the schedule ends without computing d0")
        return ExecutionResult(self.loss, self._grad)

    def step(self, op: Op) -> None:
        """Run one operation (after checking it against the model's rules)."""
        if isinstance(op, str):
            op = Op.parse(op)
        new_state = self._check(op)
        kind, i = op.kind, op.index
        if kind in (FN, FCK):
            y = self._forward(i, record=False)
            self._values.plain[i + 1] = y
            del y
        elif kind == FALL:
            tape = self._forward(i, record=True)
            self._values.tapes[i + 1] = tape
            if not self.output_saved[i]:
                if new_state.plain >> (i + 1) & 1 and i + 1 not in self._values.plain:
                    self._values.plain[i + 1] = tape.output.detach()  # the same storage
                else:  # the table keeps no new plain copy: nothing will read it
                    self._release(tape.output)
            del tape
        elif kind == LOSS:
            self._loss()
        elif kind == B:
            self._backward(i)
        elif kind != DROP:  # pragma: no cover - Op validates kinds
            raise RematError(f"unknown operation {op}")
        self._commit(new_state)

    def set_loss_grad(self, grad: torch.Tensor) -> None:
        """Perform the Loss operation with a gradient d_L computed by the caller."""
        new_state = self._check(Op(LOSS))
        self._grad = grad
        self._commit(new_state)

    # ------------------------------------------------------------------ internals
    def _check(self, op: Op) -> State:
        r = transition(self._unit, self._state, 0, op, allow_drop=self.allow_drop)
        if isinstance(r, str):
            raise InvalidScheduleError(r, self._steps, op.token)
        return r.state

    def _commit(self, new_state: State) -> None:
        """Free what the simulator's next state no longer holds.  A plain x_j that shares
        its storage with the output kept in a tape t_j still held (x_j unsaved) has that
        storage released: the tape keeps only the root of its backward."""
        plain, tapes = self._values.plain, self._values.tapes
        for j in [j for j in plain if not new_state.plain >> j & 1]:
            x = plain.pop(j)
            tape = tapes.get(j)
            if tape is not None and new_state.tapes >> j & 1 and same_storage(x, tape.output):
                self._release(x)
            del x
        for j in [j for j in tapes if not new_state.tapes >> j & 1]:
            del tapes[j]
        self._state = new_state
        self._steps += 1

    def _release(self, t: torch.Tensor) -> None:
        """Return the memory behind ``t`` to the allocator, keeping the tensor (its shape,
        dtype and autograd graph) as a root of the backward; only for a storage no saved
        tensor lives on (an unsaved output, see the module docstring), and none the caller
        still holds (:attr:`caller_output`)."""
        held = None if self.caller_output is None else self.caller_output()
        if held is not None and same_storage(held, t):
            return
        released = getattr(self.tracker, "released", None)
        if released is not None:  # a MemoryTracker cannot see a storage resized
            released(t)
        t.untyped_storage().resize_(0)

    @contextlib.contextmanager
    def _paused(self):
        if self.tracker is None:
            yield
        else:
            with self.tracker.paused():
                yield

    @contextlib.contextmanager
    def _replay(self, i: int):
        """First forward of stage i: record RNG states.  Later ones: replay them, and keep
        the running statistics unchanged."""
        if i not in self._rng:
            with self._paused():  # bookkeeping: not activation memory
                self._rng[i] = rng_state(self.device)
            yield
            return
        buffers = running_stat_buffers(self.stages[i])
        with self._paused(), torch.no_grad():
            saved = [b.clone() for b in buffers]
        with contextlib.ExitStack() as fork:
            with self._paused():  # the generator state fork_rng saves is bookkeeping too
                fork.enter_context(torch.random.fork_rng(devices=device_list(self.device)))
                set_rng_state(self._rng[i], self.device)
            yield
        with self._paused(), torch.no_grad():
            for b, s in zip(buffers, saved):
                b.copy_(s)

    def _forward(self, i: int, record: bool):
        src = self._values.available(i)
        stage = self.stages[i]
        if not record:
            # The same computation as a recording forward (the kernels a stage picks can
            # depend on grad mode: Swin's masked window attention gives other bits without
            # it), keeping nothing: autograd mode, as a non-reentrant checkpoint's first
            # forward, with every saved tensor discarded, and the output detached
            with self._replay(i), torch.enable_grad(), \
                    torch.autograd.graph.saved_tensors_hooks(discard, unreachable):
                z = self._input(i, src, Slot())
                y = stage(z)
                del z
            return y.detach() if isinstance(y, torch.Tensor) else y
        slot = Slot()
        storage = src.untyped_storage()
        # The hooks live as long as the graph: they must not capture the input tensor.
        in_ptr, in_off, in_dev, in_dtype = (storage.data_ptr(), src.storage_offset(),
                                            src.device, src.dtype)
        del storage
        values_ref = weakref.ref(self._values)
        log = self.saved_log
        saved_refs = []  # weak references to the storages saved (not the input's)
        saved_tensors = []  # weak references to the tensors saved (not the input's)
        saves_input = False

        def pack(t):
            nonlocal saves_input
            if in_ptr and t.device == in_dev and t.dtype == in_dtype \
                    and t.untyped_storage().data_ptr() == in_ptr:
                saves_input = True
                return InputRef(values_ref, i, tuple(t.size()), tuple(t.stride()),
                                 t.storage_offset() - in_off, t.dtype)
            if log is not None:
                log.append(t.detach())
            saved_refs.append(StorageWeakRef(t.untyped_storage()))
            d = t.detach()
            saved_tensors.append(weakref.ref(d))
            return d

        def unpack(p):
            return p.unpack() if isinstance(p, InputRef) else p

        with self._replay(i), torch.enable_grad(), \
                torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            z = self._input(i, src, slot)
            y = stage(z)
            del z
        if not isinstance(y, torch.Tensor):
            raise RematError(f"stage {i} ({type(stage).__name__}) returned "
                             f"{type(y).__name__}; a stage must return one tensor")
        if not y.requires_grad:
            raise RematError(f"the output of stage {i} ({type(stage).__name__}) does not depend "
                             f"differentiably on its input or parameters")
        out = StorageWeakRef(y.untyped_storage())
        saves_output = y.untyped_storage().nbytes() > 0 and any(
            r.cdata == out.cdata and not r.expired() for r in saved_refs)
        del saved_refs
        self.saves[i] = StageSaves(saves_input, saves_output)
        self._check_saves(i, saves_input, saves_output)
        return Tape(y, slot, saved_tensors)

    def _input(self, i: int, src: torch.Tensor, slot: Slot) -> torch.Tensor:
        """The stage input: differentiable through :class:`Source`, except x_0 when the
        executor was made with ``input_grad=False`` (as a training batch: no d_0)."""
        if i == 0 and not self._x0_grad:
            return src.detach()
        return Source.apply(self._dummy, src.detach(), slot)

    def _check_saves(self, i: int, saves_input: bool, saves_output: bool) -> None:
        """Refuse a chain whose ``output_saved`` says no backward reads a value that stage
        i's backward does read: releasing its storage would corrupt the gradient."""
        name = type(self.stages[i]).__name__
        if saves_output and not self.output_saved[i]:
            raise RematError(f"stage {i} ({name}) saves its output x{i + 1} for its backward, "
                             f"but output_saved[{i}] is false; profile the chain of these "
                             f"stages again")
        if saves_input and i >= 1 and not self.output_saved[i - 1]:
            raise RematError(f"stage {i} ({name}) saves its input x{i} for its backward, "
                             f"but output_saved[{i - 1}] is false; profile the chain of these "
                             f"stages again")

    def _loss(self) -> None:
        if self.loss_fn is None:
            raise RematError("this executor has no loss_fn; use set_loss_grad")
        L = self.L
        src = self._values.available(L)
        slot = Slot()
        ptr = src.untyped_storage().data_ptr()
        saved = []

        def pack(t):
            if t.untyped_storage().data_ptr() == ptr:
                saved.append(True)
            return t

        with torch.enable_grad():
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                z = Source.apply(self._dummy, src.detach(), slot)
                loss = self.loss_fn(z)
            z_view = src.detach()
            del z, src
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                raise RematError("loss_fn must return a tensor with one element")
            # a loss that is x_L itself (or a view of it: ``loss_fn=lambda y: y`` on a last
            # stage returning a scalar) lives on x_L's storage: releasing it would free the
            # loss under the backward
            self._free_loss_input(L, bool(saved) or same_storage(loss, z_view))
            del z_view
            torch.autograd.backward(loss)
        # A fresh 4-byte scalar: the loss's own storage can be a larger reduction buffer
        # (MSE on the CPU: the size of x_L), which a caller's ``loss.backward()`` holds to
        # the end of the step (the profiler reports it: ``ProfileResult.loss_bytes``)
        self.loss_storage_bytes = loss.untyped_storage().nbytes() + loss.element_size()
        with self._paused():  # the executor's record of the loss, not an activation
            self.loss = loss.detach().clone()
        del loss
        if slot.grad is None:
            raise RematError("the loss does not depend on the network output")
        self._grad = slot.grad
        slot.grad = None

    def _free_loss_input(self, L: int, read: bool) -> None:
        """The Loss op frees a plain x_L (operation table).  Autograd frees it as soon as
        the loss's forward has read it, before the loss's backward, when the caller holds
        it no longer (``loss = f(model(x)); loss.backward()``) and nothing saved it: so does
        the executor (the profile then measures the loss's backward without x_L).  A plain
        x_L on the storage of the tape t_L's output (an unsaved x_L) has that storage
        released, unless the loss saved it."""
        x = self._values.plain.get(L)
        tape = self._values.tapes.get(L)
        if x is None:
            if self.release_loss_input and tape is not None and not read:
                self._release(tape.output)
            return
        if tape is not None and same_storage(x, tape.output):
            if read:
                return
            self._values.plain.pop(L)
            self._release(x)
        else:
            self._values.plain.pop(L)
        del x

    def _backward(self, i: int) -> None:
        # B_i frees d_{i+1} and t_{i+1} (operation table).  Released (``release[i]``, the
        # default): the executor lets go of both before the backward, so that autograd frees
        # each part as soon as it has been read, as in a plain ``loss.backward()``
        # (:class:`Seed`); held: they stay allocated until B_i ends.
        tape = self._values.tapes.pop(i + 1)
        slot = tape.slot
        if self.release[i]:
            box = [self._grad]
            self._grad = None
            with torch.enable_grad():
                root = Seed.apply(tape.output, box)
            del tape
            torch.autograd.backward(root, torch.empty(0, device=root.device))
            del root
        else:
            d = self._grad
            self._grad = None
            torch.autograd.backward(tape.output, d)
            del d, tape
        grad = slot.grad
        slot.grad = None
        if grad is None and not (i == 0 and (not self._x0_grad
                                             or not has_gradient(self._values.plain[0]))):
            raise RematError(f"the output of stage {i} does not depend differentiably on its input")
        self._grad = grad


def execute(model, schedule, x0: torch.Tensor, loss_fn, *, tracker=None,
            output_saved=None, release=None) -> ExecutionResult:
    """Run ``schedule`` on ``model`` (nn.Sequential or list of stage modules) for input
    ``x0``; parameter gradients accumulate into ``.grad``.  ``output_saved``: the chain's
    (``chain.output_saved``).  See :class:`ScheduleExecutor`."""
    return ScheduleExecutor(model, loss_fn, x0, tracker=tracker, output_saved=output_saved,
                            release=release).run(schedule)


def plain_backprop(model, x0: torch.Tensor, loss_fn) -> ExecutionResult:
    """The reference: ordinary forward and backward with autograd, no checkpointing."""
    stages = model if isinstance(model, list) else split_stages(model)
    x = x0.detach().requires_grad_(has_gradient(x0))
    y = x
    for s in stages:
        y = s(y)
    loss = loss_fn(y)
    loss.backward()
    return ExecutionResult(loss.detach(), x.grad)
