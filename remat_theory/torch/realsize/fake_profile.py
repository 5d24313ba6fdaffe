"""The in-place profile of a model, taken on fake tensors: nothing allocated, nothing timed.

The same measurements as :func:`remat_theory.torch.inplace.profile.profile_layers`, made by
:class:`.meter.FakeMeter` instead of the allocator: each layer call alone on the arguments
the model gave it (a no-grad forward, a recording forward, its backward), the code before
the first layer (the prefix) and after the last (the loss stage), and one plain step of the
model, run by the in-place profile's own step code (each backward's rise above what it
starts with, the loss stage's rise, where each parameter's gradient is made, what the
model's code between two unchained layers holds and the rest of its findings on the code
between layers, read by storage, the step's peak).  The chain's fields
follow from them by the same rules; its times are zero here and come from a device's cost
model (:mod:`.devices`), one :class:`~.meter.Work` per operation.

Run it inside ``FakeTensorMode`` on a model built there (:mod:`.presets`);
tests/test_realsize.py compares it with the in-place profile of the same small model on
real tensors.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
from torch.utils import _pytree as pytree

from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError
from remat_theory.torch.capture.seams import run_hooked
from remat_theory.torch.inplace.layers import hidden_of, is_cache, leaf_of, with_hidden
from remat_theory.torch.inplace.records import (LayerProfile, gradients_made, held_beside,
                                                own_gradient_bytes, sizes_from_ops)
from remat_theory.torch.realsize.layers import find_layers_fake
from remat_theory.torch.realsize.meter import FakeMeter, Work


__all__ = ["FakeProfile", "profile_fake"]


@dataclass
class FakeProfile:
    """A :class:`LayerProfile` (times zero) and the work of every operation, per layer:
    ``fck``, ``fall``, ``bwd`` (lists of :class:`Work`), ``loss`` (the loss stage, forward
    and backward), ``prefix`` (forward and backward); ``paths`` the layers' module paths;
    ``chained`` as :class:`~remat_theory.torch.inplace.layers.LayerCall`'s;
    ``own_grad`` the bytes of each layer's parameters' gradients (at the module's last call);
    ``other_grad`` the rest; ``glue`` per layer, bytes the model's code after it holds."""

    layer: LayerProfile
    fck: list
    fall: list
    bwd: list
    loss: Work
    prefix: Work
    paths: list
    chained: list
    own_grad: list
    other_grad: int
    glue: list = field(default_factory=list)
    plain_step: int = 0  # the plain step's peak, gradients included (bytes)
    # (first reader, bytes): what layers made that later layers read (in ``layer.held``);
    # (first reader, bytes): values taken off ``layer.held`` as an unchained layer's output
    layer_made: list = field(default_factory=list)
    moved: list = field(default_factory=list)


def _storage_bytes(t) -> int:
    return int(t.untyped_storage().nbytes())


def _sid(t):
    return t.untyped_storage()._cdata


def _record(model, layers, args, kwargs) -> list:
    """Each layer call's arguments (detached) and the positions of the other tensors that
    need a gradient."""
    rec = []

    def pre(mod, a, kw):
        if len(rec) >= len(layers) or layers[len(rec)].module is not mod:
            return
        lc = layers[len(rec)]
        grads = [("a", i) for i, v in enumerate(a) if isinstance(v, torch.Tensor)
                 and v.requires_grad and ("a", i) != lc.slot]
        grads += [("k", k) for k, v in kw.items() if isinstance(v, torch.Tensor)
                  and v.requires_grad and ("k", k) != lc.slot]
        det = tuple(v.detach() if isinstance(v, torch.Tensor) else v for v in a)
        dkw = {k: (None if is_cache(v) else v.detach() if isinstance(v, torch.Tensor) else v)
               for k, v in kw.items()}
        rec.append((det, dkw, grads))

    outs = []  # each layer's output (detached: its storage, which the next layer may read)

    def post(mod, a, kw, out):
        if len(outs) < len(rec) and layers[len(outs)].module is mod:
            outs.append(leaf_of(out, layers[len(outs)].out_leaf).detach())

    run_hooked(model, list({id(lc.module): lc.module for lc in layers}.values()), args, kwargs,
               pre, post)
    if len(rec) != len(layers) or len(outs) != len(layers):
        raise RematError(f"the model called {len(rec)} of its {len(layers)} layers")
    return [r + (y,) for r, y in zip(rec, outs)]


def _inputs(lc, r):
    a0, kw0, grads = r[:3]
    h = hidden_of(lc.slot, a0, kw0).detach().requires_grad_(True)
    a, kw = with_hidden(lc.slot, a0, kw0, h)
    a, kw = list(a), dict(kw)
    extra = []
    for kind, key in grads:
        t = (a[key] if kind == "a" else kw[key]).detach().requires_grad_(True)
        extra.append(t)
        if kind == "a":
            a[key] = t
        else:
            kw[key] = t
    return h, tuple(a), kw, extra


def _layer(meter, lc, r):
    h, a, kw, extra = _inputs(lc, r)
    with meter.op("fck"):
        with torch.no_grad():
            y = lc.module(*a, **kw)
        del y
    saved = []

    def pack(t):
        saved.append(_sid(t))
        return t

    with meter.op("fall"):
        with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = lc.module(*a, **kw)
        y = leaf_of(out, lc.out_leaf)
        del out
    saves = _sid(y) in saved
    del saved
    seed = torch.ones_like(y)
    out_bytes = _storage_bytes(y)
    params = gradients_made(lc.module)  # as the in-place profile measures it
    with meter.op("bwd"), meter.fresh() as fresh:
        torch.autograd.backward(y, seed, inputs=[h] + extra + params)
    live = fresh[0]
    shared = sum(_storage_bytes(t) for t in extra)
    del y, seed, h, a, kw, extra, params
    return out_bytes, shared, saves, live


class _Stop(BaseException):
    def __init__(self, value):
        super().__init__("stop")
        self.value = value


def _prefix(meter, model, first, args, kwargs):
    def stop(mod, a, kw):
        raise _Stop((a, kw))

    handle = first.module.register_forward_pre_hook(stop, with_kwargs=True)
    try:
        with meter.op("prefix"):
            try:
                with torch.enable_grad():
                    model(*args, **kwargs)
                raise RematError("the model returned without calling its first layer")
            except _Stop as s:
                a, kw = s.value
    finally:
        handle.remove()
    h = hidden_of(first.slot, a, kw)
    backward = h.requires_grad
    if backward:
        seed = torch.ones_like(h)
        with meter.op("prefix_bwd"):
            torch.autograd.backward(h, seed)
        del seed
    del h, a, kw
    return backward


def _suffix(meter, model, layers, args, kwargs, loss_of):
    last = layers[-1]
    n = sum(lc.module is last.module for lc in layers)
    stack = contextlib.ExitStack()
    seen, held = [0], {}

    def post(mod, a, kw, out):
        seen[0] += 1
        if seen[0] != n:
            return None
        leaves, spec = pytree.tree_flatten(out)
        h = leaves[last.out_leaf].detach().requires_grad_(True)
        held["h"] = h
        leaves[last.out_leaf] = h
        stack.enter_context(torch.enable_grad())
        stack.enter_context(meter.op("suffix"))
        return pytree.tree_unflatten(leaves, spec)

    handle = last.module.register_forward_hook(post, with_kwargs=True)
    try:
        with torch.no_grad(), stack:
            out = model(*args, **kwargs)
            loss = loss_of(out)
            del out
    finally:
        handle.remove()
    with meter.op("suffix_bwd"):
        loss.backward()
    x_last = _storage_bytes(held["h"])
    del loss, held
    return x_last


def _step(real_step, model, layers, args, kwargs, loss_of, workspace=None):
    """One plain step, run by the in-place profile's own code
    (:func:`~remat_theory.torch.inplace.realstep.real_step`) with this module's meter as its
    live-byte readings (fake tensors have no addresses; the meter tells storages apart by
    object): where each parameter's gradient is made (its post-accumulate-grad hooks run
    under ``FakeTensorMode`` as on real tensors), per layer its backward's rise above what is
    live when it starts, the loss stage's rise, the glue and ``detail`` findings, and the
    step's peak.  Returns ``(rises + [loss rise], glue, grads made, step peak, detail)``."""
    meter = FakeMeter(workspace=workspace)
    detail: dict = {}
    with meter, meter.op("step"):
        rises, glue, made = real_step(model, layers, args, kwargs, loss_of, detail=detail,
                                      tracker=meter)
    return rises, glue, made, meter.results()[-1].peak, detail


def profile_fake(model, args, kwargs, loss_of, *, real_step, name: str = "", layers=None,
                 workspace=None) -> FakeProfile:
    """Profile ``model`` (training mode) at its layers on (args, kwargs); see the module
    docstring.  ``layers``: the layer calls (default: found by
    :func:`.layers.find_layers_fake`); ``workspace``: the kernels' own allocations
    (:class:`~.meter.FakeMeter`'s; default none); ``real_step``: the in-place profile's
    step, :func:`remat_theory.torch.inplace.realstep.real_step`, which the caller imports
    (this module's own import of it would stack the torch layer's imports six deep)."""
    if layers is None:
        layers = find_layers_fake(model, args, kwargs)
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.grad = None
    rec = _record(model, layers, args, kwargs)
    meter = FakeMeter(persistent=lambda: [p.grad for p in params if p.grad is not None],
                      workspace=workspace)
    with meter:
        per = [_layer(meter, lc, r) for lc, r in zip(layers, rec)]
        has_prefix_bwd = _prefix(meter, model, layers[0], args, kwargs)
        x_last = _suffix(meter, model, layers, args, kwargs, loss_of)
    for p in params:
        p.grad = None
    real, glue, grads_made, plain, found = _step(real_step, model, layers, args, kwargs,
                                                 loss_of, workspace)
    loss_rise, real = real[-1], real[:-1]
    for p in params:
        p.grad = None
    by: dict = {}
    for o in meter.results():
        by.setdefault(o.label, []).append(o)
    n = len(layers)
    x = [_storage_bytes(hidden_of(lc.slot, r[0], r[1])) for lc, r in zip(layers, rec)] + [x_last]
    tape, f_ovh, a_ovh, b_ovh, rise = sizes_from_ops(
        by, x, [per[i][0] for i in range(n)], layers, [per[i][3] for i in range(n)], real,
        live_without_grads=True)
    # layer j's tape holds its own output; where the next layer's input is another tensor
    # (made by the model's code between them), it is held beside it until B_{j+1}
    tape = [t + a for t, a in zip(tape, found["inputs_apart"])]
    s, sb = by["suffix"][0], by["suffix_bwd"][0]
    own = own_gradient_bytes(layers)
    zeros = [0.0] * n
    chain = Chain(fwd_time=zeros, bwd_time=zeros + [0.0], x_size=x, tape_size=tape,
                  fwd_overhead=f_ovh, bwd_overhead=b_ovh, fall_time=zeros,
                  fall_overhead=a_ovh, name=name)
    p = by["prefix"][0]
    prefix_tape = max(0, p.after - p.before)
    end_peak = by["prefix_bwd"][0].peak - p.before if has_prefix_bwd else prefix_tape
    values: dict = {}  # storage -> [first reader, last reader, bytes]
    for i, r in enumerate(rec):
        for kind, key in r[2]:
            t = r[0][key] if kind == "a" else r[1][key]
            v = values.setdefault(_sid(t), [i, i, _storage_bytes(t)])
            v[1] = i
    shared = sum(v[2] for v in values.values()) + max((per[i][1] for i in range(n)), default=0)
    held, between, value_grads = held_beside(values, glue, x, layers, apart=True)
    # as the in-place profile places them (inplace/profile.py): what a layer made that later
    # layers read, from its first reader; an unchained layer's output the code after it keeps
    held += found["layer_made"]
    between += sum(b for _, b in found["layer_made"])
    outputs_kept = [(j, b) for j, b in enumerate(found["outputs_kept"]) if b]
    between += sum(b for _, b in outputs_kept)
    moved = []  # values that are an unchained layer's own output: inside its tape while held
    for j in range(n - 1):
        v = values.get(_sid(rec[j][3]))
        if not layers[j].chained and v is not None and v[0] == j + 1 and (j + 1, v[2]) in held:
            held.remove((j + 1, v[2]))
            outputs_kept.append((j, v[2]))
            moved.append((j + 1, v[2]))
    lp = LayerProfile(chain, max(0, prefix_tape - x[0]) + between, max(end_peak, 0), 0.0, shared,
                      [by["fall"][i].work.random for i in range(n)], rise,
                      [bool(per[i][2]) for i in range(n)], plain,
                      prefix_only=max(0, prefix_tape - x[0]), held=held, value_grads=value_grads,
                      grads_made=grads_made, loss_rise=loss_rise, outputs_kept=outputs_kept,
                      forward_only=found["forward_only"])
    loss = Work()
    loss.add(s.work)
    loss.add(sb.work)
    prefix = Work()
    prefix.add(p.work)
    if has_prefix_bwd:
        prefix.add(by["prefix_bwd"][0].work)
    total = sum(q.numel() * q.element_size() for q in params)
    return FakeProfile(lp, [o.work for o in by["fck"]], [o.work for o in by["fall"]],
                       [o.work for o in by["bwd"]], loss, prefix, [lc.path for lc in layers],
                       [lc.chained for lc in layers], own, total - sum(own), glue, plain,
                       found["layer_made"], moved)
