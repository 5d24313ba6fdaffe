"""What a captured chain carries from one stage to the later ones of the same call.

A chain captured from a whole model hands values on beside the hidden state: a graph
capture's constants (masks, position ids computed once and read by later stages) and a
seam capture's recorded layer arguments (the input, rotary tables, attention masks: the
prefix stage records them, every layer stage reads its own).  Both live in one
:class:`Carried` store per chain, a submodule of every stage that reads it, so that the
harness finds them by type (:func:`carried_of`), lets them go (:func:`release_carried`) and
counts their bytes (:func:`carried_tensors`) without reaching into a stage's internals.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.utils._pytree import tree_leaves

from remat_theory.model.errors import CaptureError


class Carried(nn.Module):
    """The values one call of a captured chain hands from the stage computing them to later
    stages.  ``step_held``: the values stay held from one run of the computing stage to the
    next, above every schedule's peak (a seam capture's recorded arguments, counted by
    :func:`carried_tensors`); a graph capture's constants are not counted there (their
    bytes are measured with the stages that read them).  ``keep_first``: :meth:`put` keeps
    the first value of a key until :meth:`clear` (set for ``torch.compile``, whose nested
    checkpoints cannot carry a second put out of their regions; see
    :func:`~remat_theory.torch.modules.traceable.traceable_prelude`)."""

    def __init__(self, step_held: bool) -> None:
        super().__init__()
        self.values: dict = {}
        self.step_held = step_held
        self.keep_first = False

    def put(self, key, value) -> None:
        if self.keep_first and key in self.values:
            return
        self.values[key] = value

    def get(self, key):
        if key not in self.values:
            raise CaptureError(f"value {key!r} is read before the stage computing it ran "
                               f"(run the stages in order from stage 0)")
        return self.values[key]

    def clear(self) -> None:
        self.values.clear()

    def extra_repr(self) -> str:
        return f"{len(self.values)} values, step_held={self.step_held}"


def carried_of(stages) -> list:
    """The :class:`Carried` stores of ``stages`` (each once, in stage order)."""
    seen: dict = {}
    for s in stages:
        for m in s.modules():
            if isinstance(m, Carried):
                seen.setdefault(id(m), m)
    return list(seen.values())


def release_carried(stages) -> None:
    """Let the step-held values of ``stages`` go, as the model's own forward lets them go
    once its layers ran (the next call's first stage makes them anew).  A graph capture's
    constants stay: their stage overwrites them at its next run."""
    for c in carried_of(stages):
        if c.step_held:
            c.clear()


def carried_tensors(stages) -> list:
    """Tensors a seam-captured chain hands from its first stage to the others (attention
    masks, rotary tables), held from one run of that stage to the next like the parameters;
    a stage saving one for its backward adds nothing to its tape."""
    return [t for c in carried_of(stages) if c.step_held
            for t in tree_leaves(c.values) if isinstance(t, torch.Tensor)]
