"""One real plain step of a model, measured by live tensors at its layers: what a layer's
backward and the loss stage add to what they start with in the step itself (autograd lets a
tape go as it goes, which a backward measured alone does not show), where each parameter's
gradient is made, and what the model's code between two layers leaves held.  Used by
:mod:`.profile`; the plan (:func:`.plan.step_peak`) places these on the step's timeline."""
from __future__ import annotations

import contextlib

import torch

from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils import _pytree as pytree

from remat_theory.torch.inplace.layers import hidden_of, leaf_of
from remat_theory.torch.tracker import MemoryTracker, storage_bytes


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

    def live_storages(self) -> set:
        """The storages live now (weak references), to compare with later."""
        self.refresh()
        return set(self._live)

    def new_storages(self, old: set) -> dict:
        """The storages live now that were not in ``old`` (weak reference -> bytes): what
        was made since and is still held, whatever was let go meanwhile."""
        self.refresh()
        return {r: b for r, b in self._live.items() if r not in old}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if self._old is not None:
            new = sum(b for r, b in self._live.items() if r not in self._old)
            self.rise = max(self.rise, new)
        return out


def real_step(model, layers, args, kwargs, loss_of, step_meter=None, detail=None,
              tracker=None) -> list:
    """Per layer, bytes its backward rose above the memory held when it started, its
    parameters' gradients included, in one real step of the model (live tensors,
    :class:`~remat_theory.torch.tracker.MemoryTracker`; the step's gradient of each layer's
    output marks where its backward starts).  In a real step autograd has already let go of
    what the layer above no longer needs, which a backward measured alone still holds.

    Also, per layer j, the bytes the model's own code between layer j and j+1 leaves held
    (a downsampling between two stages of a convolutional network, Swin's patch merging,
    T5's final norm and dropout after its encoder): what it made that is still live when
    the backward reaches the last layer or that a later layer reads (a rematerialized step
    keeps a layer's arguments for its recomputations), but for the next layer's input and
    the values it reads (the chain and the values count them).  What it let go of
    meanwhile is not taken off: T5's encoder lets its embeddings and position bias go when
    it returns, which is no part of the chain, and a rematerialized step keeps the position
    bias for the recomputations; taking them off put T5's loss stage 0.56 MB below the
    measurement.

    With ``detail`` (a dict), more findings go into it:

    * ``"outputs_kept"``, per layer: the bytes of an unchained layer j's output still live
      when the backward reaches the last layer and read by no later layer (held by the
      code after it: T5's final norm saves the encoder's last output), else 0;
    * ``"inputs_apart"``, per layer: the bytes of layer j+1's input where it is not layer
      j's output (nor a view of it): made by the code between them, so not inside layer
      j's tape (T5's decoder input after its encoder), else 0;
    * ``"forward_only"``, ``[(first, until, bytes)]``: what the prefix (first 0) or the code
      after layer first-1 made that is live when layer ``first`` starts, read by no layer,
      and let go before layer ``until`` starts (``until`` the chain's length: before the
      backward reaches the last layer): the model's locals (T5's encoder holds its
      embeddings through its layers);
    * ``"layer_made"``, ``[(first reader, bytes)]``: tensors needing no gradient that a
      layer made and later layers read (T5's cross-attention position bias, made by the
      decoder's first layer): a rematerialized step keeps them for the recomputations of
      the layers that read them.

    And where each parameter's gradient is made (its first accumulation): in the loss
    stage's backward, in layer i's, or in the prefix's at the step's end (the embeddings'):
    bytes by phase, ``{"loss": b, "end": b, i: b}``, or None where the marks are not as
    expected: ``(rises, glue, made)``.

    ``tracker``: the live-byte readings' source, already entered by the caller (default: a
    :class:`RiseTracker` entered here); the fake-tensor profile gives its meter, which tells
    storages apart by object where fake tensors have no addresses."""
    own_tracker = tracker is None
    if own_tracker:
        tracker = RiseTracker()
    loss_rise = [None]
    marks: list = []
    calls = [0]
    after: dict = {}  # layer j -> the storages live when it ended
    outputs: dict = {}  # an unchained layer j -> (its output's storage, bytes)
    born: dict = {}  # storage made by the prefix or between layers -> (first layer, bytes)
    gone: dict = {}  # such a storage -> the layer before whose start it was let go
    read: set = set()  # the storages of every tensor a layer was given
    apart: dict = {}  # unchained layer j -> bytes of layer j+1's input, not j's output
    chain_held: dict = {}  # layer j -> storages of its hidden state and the values it reads
    layer_made: dict = {}  # a tensor (no gradient) a layer made and a later one reads
    end_live: set = set()  # the storages live when the backward reaches the last layer
    first: dict = {}  # id(parameter) -> (marks seen when its gradient was made, bytes)
    x0_done = [False]

    def mark(g):
        if not marks:  # the loss stage's forward is over and its backward has run
            loss_rise[0] = tracker.stop_rise()
            let_go(n)
            end_live.update(tracker.live_storages())
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

    def let_go(j: int) -> None:  # what was made outside the layers and is gone by now
        for r in born:
            if r not in gone and r.expired():
                gone[r] = j

    def pre(mod, a, kw):
        j = calls[0]
        if not (j < n and layers[j].module is mod):
            return
        inside[0] = True
        let_go(j)
        x = hidden_of(layers[j].slot, a, kw)
        if j == 0 and not after:
            if isinstance(x, torch.Tensor) and x.requires_grad:
                x.register_hook(x0_mark)
            born.update((r, (0, b)) for r, b in tracker.new_storages(set()).items())
        elif j - 1 in after:
            born.update((r, (j, b)) for r, b in tracker.new_storages(after[j - 1]).items())
            y_ref = outputs.get(j - 1)
            if (isinstance(x, torch.Tensor) and y_ref is not None
                    and StorageWeakRef(x.untyped_storage()) != y_ref[0]):
                apart[j - 1] = storage_bytes(x)
        for t in pytree.tree_leaves((a, kw)):
            if not isinstance(t, torch.Tensor):
                continue
            r = StorageWeakRef(t.untyped_storage())
            if t is x or t.requires_grad:  # in the chain, or a value the layers read
                chain_held.setdefault(j, set()).add(r)
            if r not in read and r not in born and t is not x and not t.requires_grad:
                layer_made[r] = (j, storage_bytes(t))  # made by a layer, handed to this one
            read.add(r)

    def post(mod, a, kw, out):
        if calls[0] < len(layers) and layers[calls[0]].module is mod:
            inside[0] = False
            y = leaf_of(out, layers[calls[0]].out_leaf)
            after[calls[0]] = tracker.live_storages()
            if not layers[calls[0]].chained and calls[0] < n - 1:
                outputs[calls[0]] = (StorageWeakRef(y.untyped_storage()), storage_bytes(y))
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
            with tracker if own_tracker else contextlib.nullcontext(), torch.enable_grad():
                loss = loss_of(model(*args, **kwargs))
                loss.backward()
                del loss
                marks.append((tracker.current, tracker.peak))
    finally:
        for h in handles:
            h.remove()
    glue = [0] * n
    spans: dict = {}  # (first, until) -> bytes of the model's locals held in the forward
    for r, (f, b) in born.items():
        if r in read or r not in gone:  # a layer's argument, or held into the loss stage
            if f > 0 and r not in chain_held.get(f, ()):
                glue[f - 1] += b
        else:
            spans[f, gone[r]] = spans.get((f, gone[r]), 0) + b
    if detail is not None:
        detail["outputs_kept"] = [
            b if j in outputs and ref in end_live and ref not in read else 0
            for j, (ref, b) in ((j, outputs.get(j, (None, 0))) for j in range(n))]
        detail["forward_only"] = sorted((f, u, b) for (f, u), b in spans.items() if b and u > f)
        detail["inputs_apart"] = [apart.get(j, 0) for j in range(n)]
        by_reader: dict = {}
        for f, b in layer_made.values():
            by_reader[f] = by_reader.get(f, 0) + b
        detail["layer_made"] = sorted(by_reader.items())
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
