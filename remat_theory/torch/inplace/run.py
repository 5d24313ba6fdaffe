"""Run a plan inside the model's own forward: checkpointed segments opened and closed by
hooks on its layers.

A checkpointed segment [s, k) of the nested form is torch's non-reentrant checkpoint
(``torch.utils.checkpoint``'s generator form, as torch's composable ``checkpoint(module)``
uses it), entered in layer s's forward pre-hook and left in layer k-1's forward hook: the
model's own code runs the layers in between, nothing of theirs is saved, and when the
backward first needs one of their tensors the checkpoint calls the segment's recomputation.
That recomputation calls the layers s..k-1 one after the other with the arguments the model
gave them in this forward (masks, positions, encoder states: this call's, never another
batch's), each layer's hidden state the previous one's output, in the segment's own nested
form (:func:`remat_theory.torch.run.nested.run_nested`).  In the forward, the hooks open the
inner segments the same way, so the forward and the recomputation save the same tensors
in the same order, as the checkpoint requires.

What a recomputation never touches: a key/value cache (passed as None: recomputing a layer
must not append to it again), the running statistics of normalisation layers (restored
after each recomputed call), the random generators (replayed by the checkpoint).
"""
from __future__ import annotations

import contextlib

import torch
from torch.utils.checkpoint import _checkpoint_without_reentrant_generator

from remat_theory.model.errors import RematError
from remat_theory.model.schedule import FALL, FCK, FN
from remat_theory.torch.capture.stages import running_stat_buffers
from remat_theory.torch.inplace.layers import is_cache, leaf_of, with_hidden
from remat_theory.torch.plan.nested_form import nested_schedule, opened_segments
from remat_theory.torch.run.nested import run_nested


__all__ = ["StepRun"]


class StepRun:
    """One training forward under a plan: which layer call comes next, the arguments each
    has been given (hidden state and caches left out), the open checkpoints."""

    def __init__(self, plan, layers) -> None:
        self.layers = layers
        self.plan = plan
        self.calls: list = [None] * len(layers)
        self.index = 0
        self.open: list = []  # (segment, generator), innermost last
        self.starts, remaining = _layout(plan, len(layers))
        self.remaining = list(remaining)
        self.last_out = None

    # ------------------------------------------------------------------ hooks
    def before(self, module, args, kwargs) -> None:
        j = self.index
        if j >= len(self.layers):
            raise RematError(f"the model called its layers more than the {len(self.layers)} "
                             f"times it did when profiled on this input shape")
        lc = self.layers[j]
        if lc.module is not module:
            raise RematError(f"layer call {j} is {type(module).__name__}, not "
                             f"{lc.path} as when profiled: the model's forward takes another path "
                             f"on this call (a layer skipped at random, e.g. layerdrop: set the "
                             f"config's layerdrop to 0)")
        x = args[lc.slot[1]] if lc.slot[0] == "a" else kwargs.get(lc.slot[1])
        if self.open and j > 0 and not (self.last_out is not None and x is self.last_out):
            raise RematError(f"layer {lc.path} does not read the previous layer's output inside a "
                             f"checkpointed segment: the model changed how its layers hand on")
        if self.remaining[j] > 0:
            a, kw = with_hidden(lc.slot, args, kwargs, None)
            kw = {k: (None if is_cache(v) else v) for k, v in kw.items()}
            self.calls[j] = (a, kw)
        for seg in self.starts.get(j, ()):
            fn = self._segment_function(seg)
            gen = _checkpoint_without_reentrant_generator(fn, True, _no_context, "default",
                                                          False, True, x)
            next(gen)
            self.open.append((seg, gen))

    def after(self, module, output) -> None:
        j = self.index
        self.index += 1
        self.last_out = leaf_of(output, self.layers[j].out_leaf)
        while self.open and self.open[-1][0].k - 1 == j:
            seg, gen = self.open.pop()
            try:
                next(gen)
            except StopIteration:
                pass
            else:
                raise RematError("internal error (this is a bug): a checkpoint did not end")

    def finish(self) -> None:
        """After the model's forward: every layer called, every checkpoint closed."""
        pending, self.open = self.open, []
        for _, gen in reversed(pending):
            gen.close()
        self.last_out = None
        if pending or self.index != len(self.layers):
            raise RematError(f"the model called {self.index} of the {len(self.layers)} layers it "
                             f"called when profiled on this input shape: its forward takes "
                             f"another path (e.g. layerdrop: turn it off in the config)")

    def abort(self) -> None:
        """The forward raised: leave no checkpoint open (its saved-tensor hooks would stay)."""
        pending, self.open = self.open, []
        for _, gen in reversed(pending):
            gen.close()

    # ------------------------------------------------------------------ recomputation
    def _run_layer(self, i: int, x):
        lc = self.layers[i]
        if self.calls[i] is None:
            raise RematError(
                f"layer {lc.path} is recomputed more often than its plan says: a second "
                f"backward through the same forward (backward(retain_graph=True), then "
                f"backward again) is not supported by rematerialize(), which lets a layer's "
                f"arguments go after its last planned recomputation; run the forward again")
        a, kw = self.calls[i]
        a, kw = with_hidden(lc.slot, a, kw, x)
        buffers = running_stat_buffers(lc.module)
        if buffers:
            with torch.no_grad():
                saved = [b.clone() for b in buffers]
        self.remaining[i] -= 1
        if self.remaining[i] <= 0:  # its last recomputation: let its arguments go
            self.calls[i] = None
        try:
            return leaf_of(lc.module(*a, **kw), lc.out_leaf)
        finally:
            if buffers:
                with torch.no_grad():
                    for b, s in zip(buffers, saved):
                        b.copy_(s)

    def _segment_function(self, seg):
        inner, run_layer = seg.inner, self._run_layer

        def recompute(x):
            return run_nested(inner, x, run_layer, True, None)
        return recompute


def _layout(plan, n: int) -> tuple:
    """``(starts, remaining)`` of a plan, worked out on its first step and kept on it (every
    step of one plan opens the same segments): the segments opened at each layer, and how
    many times a recomputation calls each layer (its arguments are kept until then and no
    longer; a kept layer's are never kept: nothing recomputes it)."""
    got = plan.__dict__.get("_run_layout")
    if got is None:
        starts: dict = {}
        for seg in opened_segments(plan.tree):
            starts.setdefault(seg.s, []).append(seg)
        forwards = [0] * n
        for op in nested_schedule(plan.tree, n):
            if op.kind in (FALL, FCK, FN):
                forwards[op.index] += 1
        got = plan.__dict__["_run_layout"] = (starts, tuple(f - 1 for f in forwards))
    return got


def _no_context():
    return contextlib.nullcontext(), contextlib.nullcontext()
