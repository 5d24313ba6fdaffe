"""Run any schedule of the chain model on a real network, with autograd.

The executor holds exactly the values the schedule says (DESIGN section 1, operation
table), and frees them when the table says so:

* x_i (plain): a tensor computed without autograd recording (``torch.no_grad()``).
* t_{i+1} (the tape of F_i): the output of stage i computed *with* recording, from a
  detached copy-free alias of x_i; the autograd graph hanging from it holds everything the
  stage saved for its backward.  What the stage saves of its own input x_i is *not* kept in
  the tape: a ``saved_tensors_hooks`` pack hook replaces it by a reference "x_i, this
  shape/stride/offset", and the unpack hook fetches whatever x_i is available when B_i runs
  (plain x_i, or the output inside t_i).  That is the model's rule "B_i needs t_{i+1} and
  x_i", and it is why freeing a plain x_i really frees its memory even while t_{i+1} lives.
* d_i: the one live gradient.  The gradient with respect to a stage input is caught by a
  tiny autograd function (:class:`_Source`) placed in front of the stage, which hands it to
  the executor without the graph keeping a reference to the input tensor.

Operations (tokens as in :mod:`remat_theory.model.schedule`):

* ``Fn{i}`` / ``Fck{i}``: ``y = stage_i(x_i)`` under ``torch.no_grad()``; Fn then frees the
  plain x_i if one is held, otherwise the tape t_i it read x_i from (never x_0).
* ``Fall{i}``: stage i with autograd recording; keeps the graph as t_{i+1}.
* ``Loss``: ``loss_fn(x_L)`` forward and backward; keeps d_L, frees a plain x_L.
* ``B{i}``: ``torch.autograd.backward(t_{i+1}.output, d_{i+1})``: gives d_i and accumulates
  the stage's parameter gradients into ``.grad``; frees d_{i+1}, t_{i+1} and a plain x_i.
* ``Dropx{i}`` / ``Dropt{i}`` (the explicit-deletion extension): free the value.

Every operation is first checked with the simulator's own transition function, and what is
freed is read off the simulator's next state, so the executor cannot drift from the model.

Randomness and running statistics.  The first forward of stage i records the CPU (and
CUDA) random generator states; every later forward of stage i (a recomputation) runs
inside ``torch.random.fork_rng`` with those states restored, so dropout draws the same
masks and the global generators advance exactly as in plain backpropagation (the approach
of ``torch.utils.checkpoint``).  Recomputations also save and restore the running
statistics of BatchNorm-like modules (:func:`running_stat_buffers`), so they are updated
once per training step, by the first forward, as without checkpointing.
"""
from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass

import torch

from remat_theory.model.chain import Chain
from remat_theory.model.errors import InvalidScheduleError, RematError
from remat_theory.model.schedule import B, DROP, FALL, FCK, FN, LOSS, Op, Schedule
from remat_theory.model.simulator import State, transition
from remat_theory.torch.stages import running_stat_buffers, split_stages


class _Slot:
    """Receives the gradient with respect to a stage input during B_i."""

    __slots__ = ("grad",)

    def __init__(self) -> None:
        self.grad = None


class _Source(torch.autograd.Function):
    """Identity on x that makes the stage input differentiable without being a leaf.

    ``dummy`` is an empty tensor that requires grad (so that the output requires grad);
    the backward stores the incoming gradient, d_i, in ``slot`` and propagates nothing.
    The graph holds no reference to x itself.
    """

    @staticmethod
    def forward(ctx, dummy, x, slot):  # noqa: D401 - autograd signature
        ctx.slot = slot
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        ctx.slot.grad = grad
        ctx.slot = None
        return None, None, None


class _InputRef:
    """What the pack hook stores instead of (a view of) the stage input."""

    __slots__ = ("values", "index", "size", "stride", "offset", "dtype")

    def __init__(self, values, index, size, stride, offset, dtype):
        self.values = values  # weak reference to the executor's _Values
        self.index = index
        self.size = size
        self.stride = stride
        self.offset = offset
        self.dtype = dtype

    def unpack(self) -> torch.Tensor:
        values = self.values()
        if values is None:
            raise RematError(f"the executor holding x{self.index} is gone; cannot run B{self.index}")
        x = values.available(self.index)
        if x is None:
            raise RematError(f"x{self.index} is not available for the backward of stage {self.index}")
        x = x.detach()
        return x.as_strided(self.size, self.stride, x.storage_offset() + self.offset)


@dataclass
class _Tape:
    output: torch.Tensor  # x_{i+1} with its autograd graph
    slot: _Slot


class _Values:
    """The values held: plain activations and tapes, by index."""

    def __init__(self) -> None:
        self.plain: dict = {}
        self.tapes: dict = {}

    def available(self, i: int):
        if i in self.plain:
            return self.plain[i]
        tape = self.tapes.get(i)
        return None if tape is None else tape.output


def _has_gradient(x: torch.Tensor) -> bool:
    """A network input of integer type (token ids) has no gradient: d_0 is None."""
    return x.is_floating_point() or x.is_complex()


def _device_list(device: torch.device) -> list:
    return [device] if device.type == "cuda" else []


def _rng_state(device: torch.device):
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda


def _set_rng_state(state, device: torch.device) -> None:
    cpu, cuda = state
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state(cuda, device)


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
        loss is run by the caller (:meth:`set_loss_grad`, used by CheckpointedSequential).
    x0 : the network input (never freed).
    tracker : optional :class:`MemoryTracker`; its bookkeeping copies are not counted.
    allow_drop : accept the explicit-deletion ops Dropx/Dropt.
    """

    def __init__(self, stages, loss_fn, x0: torch.Tensor, *, tracker=None, allow_drop: bool = True):
        self.stages = stages if isinstance(stages, list) else split_stages(stages)
        self.L = len(self.stages)
        self.loss_fn = loss_fn
        self.tracker = tracker
        self.allow_drop = allow_drop
        self.device = x0.device
        self._unit = Chain.homogeneous(self.L, name="executor")
        self._state = State.initial(self._unit)
        self._values = _Values()
        self._values.plain[0] = x0.detach()
        self._dummy = torch.empty(0, device=x0.device, requires_grad=True)
        self._grad = None  # the live gradient d_{bwd_next+1}
        self._rng: dict = {}
        self._steps = 0
        self.loss = None
        self.saved_log = None  # list to record (storage weak ref, nbytes) of saved tensors

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
        """Free what the simulator's next state no longer holds."""
        plain, tapes = self._values.plain, self._values.tapes
        for j in [j for j in plain if not new_state.plain >> j & 1]:
            del plain[j]
        for j in [j for j in tapes if not new_state.tapes >> j & 1]:
            del tapes[j]
        self._state = new_state
        self._steps += 1

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
                self._rng[i] = _rng_state(self.device)
            yield
            return
        buffers = running_stat_buffers(self.stages[i])
        with self._paused(), torch.no_grad():
            saved = [b.clone() for b in buffers]
        with contextlib.ExitStack() as fork:
            with self._paused():  # the generator state fork_rng saves is bookkeeping too
                fork.enter_context(torch.random.fork_rng(devices=_device_list(self.device)))
                _set_rng_state(self._rng[i], self.device)
            yield
        with self._paused(), torch.no_grad():
            for b, s in zip(buffers, saved):
                b.copy_(s)

    def _forward(self, i: int, record: bool):
        src = self._values.available(i)
        stage = self.stages[i]
        if not record:
            with self._replay(i), torch.no_grad():
                return stage(src)
        slot = _Slot()
        storage = src.untyped_storage()
        # The hooks live as long as the graph: they must not capture the input tensor.
        in_ptr, in_off, in_dev, in_dtype = (storage.data_ptr(), src.storage_offset(),
                                            src.device, src.dtype)
        del storage
        values_ref = weakref.ref(self._values)
        log = self.saved_log

        def pack(t):
            if in_ptr and t.device == in_dev and t.dtype == in_dtype \
                    and t.untyped_storage().data_ptr() == in_ptr:
                return _InputRef(values_ref, i, tuple(t.size()), tuple(t.stride()),
                                 t.storage_offset() - in_off, t.dtype)
            if log is not None:
                log.append(t.detach())
            return t.detach()

        def unpack(p):
            return p.unpack() if isinstance(p, _InputRef) else p

        with self._replay(i), torch.enable_grad(), \
                torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            z = _Source.apply(self._dummy, src.detach(), slot)
            y = stage(z)
            del z
        if not isinstance(y, torch.Tensor):
            raise RematError(f"stage {i} ({type(stage).__name__}) returned "
                             f"{type(y).__name__}; a stage must return one tensor")
        if not y.requires_grad:
            raise RematError(f"the output of stage {i} ({type(stage).__name__}) does not depend "
                             f"differentiably on its input or parameters")
        return _Tape(y, slot)

    def _loss(self) -> None:
        if self.loss_fn is None:
            raise RematError("this executor has no loss_fn; use set_loss_grad")
        L = self.L
        src = self._values.available(L)
        slot = _Slot()
        with torch.enable_grad():
            z = _Source.apply(self._dummy, src.detach(), slot)
            loss = self.loss_fn(z)
            del z, src
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                raise RematError("loss_fn must return a tensor with one element")
            torch.autograd.backward(loss)
        # A fresh 4-byte scalar: the loss's own storage can be a larger reduction buffer.
        with self._paused():  # the executor's record of the loss, not an activation
            self.loss = loss.detach().clone()
        del loss
        if slot.grad is None:
            raise RematError("the loss does not depend on the network output")
        self._grad = slot.grad
        slot.grad = None

    def _backward(self, i: int) -> None:
        tape = self._values.tapes[i + 1]
        d = self._grad
        self._grad = None
        torch.autograd.backward(tape.output, d)
        del d
        grad = tape.slot.grad
        tape.slot.grad = None
        if grad is None and not (i == 0 and not _has_gradient(self._values.plain[0])):
            raise RematError(f"the output of stage {i} does not depend differentiably on its input")
        self._grad = grad
        del tape


def execute(model, schedule, x0: torch.Tensor, loss_fn, *, tracker=None) -> ExecutionResult:
    """Run ``schedule`` on ``model`` (nn.Sequential or list of stage modules) for input
    ``x0``; parameter gradients accumulate into ``.grad``.  See :class:`ScheduleExecutor`."""
    return ScheduleExecutor(model, loss_fn, x0, tracker=tracker).run(schedule)


def plain_backprop(model, x0: torch.Tensor, loss_fn) -> ExecutionResult:
    """The reference: ordinary forward and backward with autograd, no checkpointing."""
    stages = model if isinstance(model, list) else split_stages(model)
    x = x0.detach().requires_grad_(_has_gradient(x0))
    y = x
    for s in stages:
        y = s(y)
    loss = loss_fn(y)
    loss.backward()
    return ExecutionResult(loss.detach(), x.grad)
