"""What the executor keeps per value and per tape: the slots of x_i and d_i, the autograd
functions that start a stage's graph at a kept value (``Source``) and seed a backward
(``Seed``), the references that let an unsaved output go, and the checks of the executor's
arguments."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.utils.checkpoint

from remat_theory.model.errors import RematError


class Slot:
    """Receives the gradient with respect to a stage input during B_i."""

    __slots__ = ("grad",)

    def __init__(self) -> None:
        self.grad = None


class Source(torch.autograd.Function):
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


class Seed(torch.autograd.Function):
    """Hands the incoming gradient d_{i+1} of B_i to autograd's engine as the gradient of
    the stage output ``y``, so that the engine holds the only reference to it.

    ``torch.autograd.backward(y, d)`` keeps ``d`` (and ``y``) referenced by its caller for
    the whole call, so both stay allocated until B_i ends.  Autograd's own backward (one
    ``loss.backward()``, the drop-in) frees the incoming gradient as soon as the node that
    reads it has run, and each saved tensor (the stage output among them) as soon as the
    node that saved it has run.  Rooting B_i at this node's empty output instead, the
    gradient reaches the stage's graph from inside the engine, and the caller drops ``y``
    first: B_i frees d_{i+1} and the tape t_{i+1} as the drop-in's backward does.
    """

    @staticmethod
    def forward(ctx, y, box):  # noqa: D401 - autograd signature
        ctx.box = box
        return y.new_empty(0)

    @staticmethod
    def backward(ctx, _):
        d = ctx.box.pop()
        ctx.box = None
        return d, None


def discard(t):
    """Pack hook of a forward that keeps no tape: nothing is saved."""
    return None


def unreachable(_):  # pragma: no cover - the graph of a discarded forward is never run
    raise RematError("internal: a forward that keeps no tape was differentiated")


class InputRef:
    """What the pack hook stores instead of (a view of) the stage input."""

    __slots__ = ("values", "index", "size", "stride", "offset", "dtype")

    def __init__(self, values, index, size, stride, offset, dtype):
        self.values = values  # weak reference to the executor's Values
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
class Tape:
    output: torch.Tensor  # x_{i+1} with its autograd graph
    slot: Slot
    # weak references to the tensors the graph saved (the stage input aside): what an
    # offload of the tape moves (:mod:`.offload_executor`); dead once the backward ran
    saved: list = field(default_factory=list)


class Values:
    """The values held: plain activations and tapes, by index.  ``saved[i]``: whether x_i
    can be read out of the tape t_i (``output_saved[i-1]``; an unsaved x_i is only plain)."""

    def __init__(self, saved) -> None:
        self.plain: dict = {}
        self.tapes: dict = {}
        self.saved = saved

    def available(self, i: int):
        if i in self.plain:
            return self.plain[i]
        tape = self.tapes.get(i)
        return None if tape is None or not self.saved[i] else tape.output


@dataclass(frozen=True)
class StageSaves:
    """What one recording forward of stage i saved for its backward, by storage: its input
    x_i (or a view of it), its output x_{i+1} (or a view of its storage)."""

    input: bool
    output: bool


def same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    sa, sb = a.untyped_storage(), b.untyped_storage()
    return sa.nbytes() > 0 and sa.data_ptr() == sb.data_ptr() and a.device == b.device


def check_output_saved(output_saved, length: int) -> tuple:
    """``output_saved`` as a tuple of ``length`` bools; misuse raises naming the entry."""
    if isinstance(output_saved, (str, bytes)) or not hasattr(output_saved, "__len__"):
        raise RematError(f"output_saved must be a list of {length} booleans, got "
                         f"{type(output_saved).__name__}")
    flags = list(output_saved)
    if len(flags) != length:
        raise RematError(f"output_saved has length {len(flags)}, expected {length} (one per stage)")
    for k, f in enumerate(flags):
        if not (isinstance(f, bool) or type(f).__name__ == "bool_"):
            raise RematError(f"output_saved[{k}] = {f!r} is not a boolean")
    return tuple(bool(f) for f in flags)


def check_release(release, length: int) -> tuple:
    if release is None:
        return (True,) * length
    release = tuple(release)
    if len(release) != length or not all(isinstance(v, (bool, int)) for v in release):
        raise RematError(f"release must be {length} booleans (one per stage), got {list(release)}")
    return tuple(bool(v) for v in release)


def has_gradient(x: torch.Tensor) -> bool:
    """A network input of integer type (token ids) has no gradient: d_0 is None."""
    return x.is_floating_point() or x.is_complex()


def device_list(device: torch.device) -> list:
    return [device] if device.type == "cuda" else []


