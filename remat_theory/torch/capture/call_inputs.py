"""A captured chain's other inputs, per call: every tensor of a call belongs to that call.

A chain captured from a dict example (``{"input_ids": ..., "attention_mask": ...,
"labels": ...}``) runs on x_0 (its first tensor); the other tensors are read by the stages
from where the chain installs them (a graph stage's ``_remat_input_*`` buffer, a seam
capture's runner).  :class:`ChainInputs` is that place's keeper, one per chain, shared by
its stages and kept beside them (a weak map from stage to keeper, as torch's composable
``checkpoint(module)`` keeps its state beside the module, not in it), so that the chain and
:class:`~remat_theory.torch.modules.checkpointed.CheckpointedSequential` (given the chain or its stage
list) enforce one rule:

* ``chain(x, attention_mask=..., labels=...)`` / ``ck(x, ...)`` take them per call, of the
  captured shapes and dtypes (the chain is for one shape);
* a call without all of them raises :class:`~remat_theory.model.errors.RematError`, naming
  the missing ones, whether it trains or not; ``chain.set_inputs(...)`` installs inputs
  for the NEXT call only (one-shot), so nothing of one batch silently reaches another;
* a recomputation in the backward of a call (the drop-in's checkpointed segments) checks
  that the installed inputs are still that call's: a second call's forward before the
  first call's backward is refused there (the masks and the values the first stage hands
  on are the second call's by then).

Tools that run the stages one by one (``profile``, the executor, ``confirm``) read what is
installed: the example's inputs until a call installs others (:meth:`ChainInputs.example`
gives them, to pass explicitly).
"""
from __future__ import annotations

import weakref

import torch

from remat_theory.model.errors import RematError
from remat_theory.torch.capture.stages import Staged


KEEPERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
"""stage -> the :class:`ChainInputs` of its chain (kept beside the stage, not in it)."""


class ChainInputs:
    """The other tensor inputs of one chain: the captured ones (the example's) and the
    installed ones (``values``, a dict shared with a seam capture's runner)."""

    def __init__(self, values: dict, stages, error=RematError):
        self.values = values  # name -> tensor installed now (shared, updated in place)
        self.example = dict(values)  # the example's, as captured
        self.captured = {n: (tuple(t.shape), t.dtype) for n, t in values.items()}
        self.stages = list(stages)
        self.error = error
        self.armed: set = set()  # names set_inputs installed for the next call
        self.call = 0  # the number of the call whose inputs are installed
        for s in self.stages:
            KEEPERS[s] = self

    @property
    def names(self) -> list:
        return list(self.captured)

    @staticmethod
    def _buffer(name: str) -> str:
        return f"_remat_input_{name}".replace(" ", "_")

    def current(self, name: str):
        buf = self._buffer(name)
        for s in self.stages:
            if buf in s._buffers:
                return s._buffers[buf]
        return self.values[name]

    def check(self, tensors: dict) -> None:
        for name, t in tensors.items():
            if name not in self.captured:
                raise self.error(f"{name!r} is not a fixed input of this chain (its other "
                                 f"inputs: {', '.join(self.captured) or 'none'})")
            if not isinstance(t, torch.Tensor):
                raise self.error(f"input {name} must be a tensor, got {type(t).__name__}")
            shape, dtype = self.captured[name]
            if tuple(t.shape) != shape or t.dtype != dtype:
                raise self.error(f"input {name} has shape {list(t.shape)}, {t.dtype}; the chain "
                                 f"was captured for shape {list(shape)}, {dtype} (a chain is "
                                 f"for one shape: capture again with an example of the new one)")

    def install(self, tensors: dict) -> None:
        """Install ``tensors`` (checked) where the stages read them."""
        self.check(tensors)
        for name, t in tensors.items():
            buf = self._buffer(name)
            for s in self.stages:
                if buf in s._buffers:
                    s._buffers[buf] = t
            self.values[name] = t

    def moved(self, fn) -> None:
        """The chain moved (``.to``, ``.half``): its example and installed inputs follow."""
        self.example = {n: fn(t) for n, t in self.example.items()}
        for n, t in list(self.values.items()):
            self.values[n] = fn(t)
        self.captured = {n: (tuple(t.shape), t.dtype) for n, t in self.example.items()}

    def set_next(self, tensors: dict) -> None:
        """``set_inputs``: install now, for the next call only."""
        self.install(tensors)
        self.armed.update(tensors)

    def take(self, given: dict, caller: str = "chain") -> int:
        """One call's other inputs: install ``given``; every input must be given or set by
        ``set_inputs`` for this call, else RematError naming the missing ones.  Returns the
        call's number (see :meth:`guard`)."""
        self.check(given)
        missing = [n for n in self.captured if n not in given and n not in self.armed]
        if missing:
            how = ", ".join(f"{n}=..." for n in self.captured)
            raise RematError(
                f"this chain has other inputs besides x, which belong to each call: "
                f"{', '.join(missing)} not given. Pass them with every call: "
                f"{caller}(x, {how}) (a value of an earlier call is never reused; "
                f"chain.set_inputs(...) installs them for the next call only)")
        self.install(given)
        self.armed.clear()
        self.call += 1
        return self.call

    def guard(self, token: int) -> None:
        """A recomputation of call ``token``: its inputs must still be installed."""
        if token != self.call:
            raise RematError("a recomputation in the backward of a call found the inputs of a "
                             "later call installed: with a chain that has other inputs, run "
                             "each call's backward before the next call's forward")


def inputs_of(stages) -> ChainInputs | None:
    """The other-inputs keeper of a captured chain's stages (None: a chain without any, or
    stages not captured)."""
    for s in stages:
        keeper = KEEPERS.get(s)
        original = s._modules.get("_orig_mod")  # a stage compiled by torch.compile
        if keeper is None and original is not None:
            keeper = KEEPERS.get(original)
        if keeper is not None:
            return keeper if keeper.captured else None
    return None


def example_inputs(stages) -> dict:
    """The example's other inputs of a captured chain (or of its stages), to pass to a call
    on the example: ``ck(x0, **example_inputs(stages))``; {} when it has none."""
    keeper = inputs_of(stages.stages if isinstance(stages, Staged) else stages)
    return {} if keeper is None else dict(keeper.example)


class GuardedRunner:
    """A stage runner (``run_stage(i, x)``) that checks, before each stage, that the call's
    inputs are still the installed ones (:meth:`ChainInputs.guard`)."""

    __slots__ = ("runner", "keeper", "token")

    def __init__(self, runner, keeper: ChainInputs, token: int):
        self.runner, self.keeper, self.token = runner, keeper, token

    def __call__(self, i: int, x):
        self.keeper.guard(self.token)
        return self.runner(i, x)
