"""One real plain step of a model, measured by live tensors at its layers: what a layer's
backward and the loss stage add to what they start with in the step itself (autograd lets a
tape go as it goes, which a backward measured alone does not show), where each parameter's
gradient is made, and what the model's code between two layers leaves held.  Used by
:mod:`.profile`; the plan (:func:`.plan.step_peak`) places these on the step's timeline."""
from __future__ import annotations

import contextlib

import torch

from remat_theory.torch.inplace.layers import hidden_of, leaf_of
from remat_theory.torch.tracker import MemoryTracker


__all__ = ["RiseTracker", "real_step"]


class RiseTracker(MemoryTracker):
    """Also, from :meth:`watch_rise` to :meth:`stop_rise`: the most bytes of storages made
    since then live at once (``rise``): what a stage adds, whatever the model's code lets
    go of meanwhile (OPT's decoder lets its embeddings and mask go once its last layer has
    run, after its final norm: 0.59 MB that a rise counted from the start would take off the
    loss stage's)."""

    def __init__(self) -> None:
        super().__init__()
        self._old = None
        self.rise = 0

    def watch_rise(self) -> None:
        self.refresh()
        self._old = set(self._live)
        self.rise = 0

    def stop_rise(self) -> int:
        self._old = None
        return self.rise

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if self._old is not None:
            new = sum(b for r, b in self._live.items() if r not in self._old)
            self.rise = max(self.rise, new)
        return out


def real_step(model, layers, args, kwargs, loss_of, step_meter=None) -> list:
    """Per layer, bytes its backward rose above the memory held when it started, its
    parameters' gradients included, in one real step of the model (live tensors,
    :class:`~remat_theory.torch.tracker.MemoryTracker`; the step's gradient of each layer's
    output marks where its backward starts).  In a real step autograd has already let go of
    what the layer above no longer needs, which a backward measured alone still holds.
    Also, per layer j, the bytes the model's own code between layer j and j+1 leaves held
    (a downsampling between two stages of a convolutional network, Swin's patch merging):
    And where each parameter's gradient is made (its first accumulation): in the loss
    stage's backward, in layer i's, or in the prefix's at the step's end (the embeddings'):
    bytes by phase, ``{"loss": b, "end": b, i: b}``, or None where the marks are not as
    expected: ``(rises, glue, made)``."""
    tracker = RiseTracker()
    loss_rise = [None]
    marks: list = []
    calls = [0]
    after: dict = {}
    glue = [0] * len(layers)
    first: dict = {}  # id(parameter) -> (marks seen when its gradient was made, bytes)
    x0_done = [False]

    def mark(g):
        if not marks:
            loss_rise[0] = tracker.stop_rise()
        # what is live now: autograd let the tape of the layer above go after its last
        # operation, which ``current`` (as of that operation) still counts; a rise measured
        # from it came out too low (Llama's by 0.46 MB, half a layer's tape)
        peak = tracker.peak
        marks.append((tracker.refresh(), peak))
        tracker.reset_peak()

    def x0_mark(g):  # the gradient of the first layer's input: B_0 is over
        x0_done[0] = True

    def made(p):
        if id(p) not in first:
            first[id(p)] = ("end" if x0_done[0] else len(marks), p.numel() * p.element_size())

    n = len(layers)
    inside = [False]
    used: dict = {}  # id(parameter) -> the last forward phase whose code called its module

    def phase_now() -> int:  # -1 the prefix, j layer j (and the code after it), n the suffix
        j = calls[0]
        return j if inside[0] else (j - 1 if j < n else n)

    def uses(mod, a, kw):
        ph = phase_now()
        for q in mod.parameters(recurse=False):
            if q.requires_grad:
                used[id(q)] = max(used.get(id(q), -1), ph)

    def pre(mod, a, kw):
        j = calls[0]
        if j < n and layers[j].module is mod:
            inside[0] = True
        if j == 0 and layers[0].module is mod and not after:
            x = hidden_of(layers[0].slot, a, kw)
            if isinstance(x, torch.Tensor) and x.requires_grad:
                x.register_hook(x0_mark)
        if 0 < j < len(layers) and layers[j].module is mod and j - 1 in after:
            glue[j - 1] = tracker.refresh() - after[j - 1]

    def post(mod, a, kw, out):
        if calls[0] < len(layers) and layers[calls[0]].module is mod:
            inside[0] = False
            y = leaf_of(out, layers[calls[0]].out_leaf)
            after[calls[0]] = tracker.refresh()
            calls[0] += 1
            if calls[0] == n:  # the loss stage starts: its rise from here
                tracker.watch_rise()
            if y.requires_grad:
                y.register_hook(mark)
        return None

    modules = {id(lc.module): lc.module for lc in layers}.values()
    handles = [m.register_forward_hook(post, with_kwargs=True) for m in modules]
    handles += [m.register_forward_pre_hook(pre, with_kwargs=True) for m in modules]
    handles += [p.register_post_accumulate_grad_hook(made) for p in model.parameters()
                if p.requires_grad]
    # the owners' pre-hooks after the layers' own (a layer that owns parameters counts
    # them inside itself)
    handles += [m.register_forward_pre_hook(uses, with_kwargs=True) for m in model.modules()
                if any(q.requires_grad for q in m.parameters(recurse=False))]
    try:
        with contextlib.ExitStack() as stack:
            if step_meter is not None:  # the plain step's peak, as the allocator saw it
                stack.enter_context(step_meter)
                stack.enter_context(step_meter.op("step"))
            with tracker, torch.enable_grad():
                loss = loss_of(model(*args, **kwargs))
                loss.backward()
                del loss
                marks.append((tracker.current, tracker.peak))
    finally:
        for h in handles:
            h.remove()
    # marks: d_n, d_{n-1}, ..., d_1, end; B_i runs from mark of d_{i+1} to that of d_i
    if len(marks) != n + 1:
        return [None] * (n + 1), glue, None
    starts = marks[:-1][::-1]  # starts[i]: the mark of d_{i+1}
    ends = marks[1:][::-1]  # ends[i]: the peak up to d_i
    # a gradient's memory is there from the first backward that makes a share of it: where
    # it was accumulated, or earlier, the backward of the last forward phase that called
    # its module (a tied head's share is held by autograd from the loss on, although the
    # embedding's backward at the end accumulates it: OPT's every-layer step 8.6% above its
    # prediction without this)
    by_phase: dict = {"loss": 0, "end": 0}
    for pid, (phase, size) in first.items():
        # rank in the backward: 0 the loss stage, k marks seen: layer n-k's, n+1 the prefix
        rank = n + 1 if phase == "end" else min(phase, n)
        if pid in used:
            ph = used[pid]
            rank = min(rank, 0 if ph >= n else n + 1 if ph < 0 else n - ph)
        key = "loss" if rank == 0 else "end" if rank == n + 1 else n - rank
        by_phase[key] = by_phase.get(key, 0) + size
    # the loss stage's rise (its forward and backward up to the last layer's output
    # gradient): the most of what it made live at once, its gradients included
    return ([max(0, ends[i][1] - starts[i][0]) for i in range(n)] + [loss_rise[0]], glue,
            by_phase if x0_done[0] else None)
