"""Profile a model at its layers, in place, for one input shape: the chain the plan solves.

The chain's stages are the model's layer calls (:mod:`.layers`); its input x_0 is the first
layer's hidden state and its loss stage is everything after the last layer (final norm,
head, the loss the model computes from ``labels``), forward and backward together.  What
runs before the first layer (embeddings, masks, positions) is not a stage: it runs once,
its tape is held to the end of the step (``prefix_bytes`` beside the chain) and its backward
is the step's last operation (``end_peak``).

Measured with :class:`~remat_theory.torch.tracker.AllocatorMeter` (the allocator's own
accounting, kernels' allocations included), one profiler session for the whole profile
(on the CPU, a forward of more than :data:`ALLOCATOR_METER_OPS` operations is measured by
live tensors instead: the profiler's event log would cost far more than the step), on
the user's own model and batch: each layer called with the arguments the model gave it
(recorded by one forward), its hidden state a fresh leaf.  Per layer: a no-grad forward
(``fwd_time``, ``fwd_overhead``), a recording forward (``fall_time``, ``tape_size``: what it
leaves allocated, ``fall_overhead``) and its backward from a seed gradient (``bwd_time``,
``bwd_overhead``).  Then one real plain step of the model, by live tensors
(:func:`.realstep.real_step`): how far each backward and the loss stage rise above what they start
with, where each parameter's gradient is made, what the code between unchained layers
leaves held; and its peak by the allocator (the calibration).  Times are a separate,
unmetered pass (the profiler's bookkeeping would
inflate them).  The model's state is left as it was: parameter gradients, buffers, the
random generators, torch's (:func:`~remat_theory.torch.capture.stages.model_state_kept`),
numpy's and Python's.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import torch
from torch.utils import _pytree as pytree

from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError
from remat_theory.torch.capture.seams import run_hooked
from remat_theory.torch.capture.stages import model_state_kept
from remat_theory.torch.inplace.layers import hidden_of, is_cache, leaf_of, with_hidden
from remat_theory.torch.inplace.realstep import real_step
from remat_theory.torch.inplace.records import (LayerProfile, gradients_made, held_beside,
                                                sizes_from_ops)
from remat_theory.torch.tracker import AllocatorMeter, MemoryTracker, OpMemory, storage_bytes


__all__ = ["LayerProfile", "profile_layers", "device_of", "host_generators_kept"]


class _Stop(BaseException):
    def __init__(self, value):
        super().__init__("stop")
        self.value = value


def device_of(model, args, kwargs) -> torch.device:
    for t in pytree.tree_leaves((args, kwargs)):
        if isinstance(t, torch.Tensor):
            return t.device
    p = next(iter(model.parameters()), None)
    return p.device if p is not None else torch.device("cpu")


def _rng(dev) -> list:
    states = [torch.get_rng_state()]
    if dev.type == "cuda":
        states.append(torch.cuda.get_rng_state(dev))
    return states


def _draws(before, after) -> bool:
    return any(not torch.equal(a, b) for a, b in zip(before, after))


@dataclass
class _Recorded:
    args: tuple
    kwargs: dict
    grad_names: list  # positions/keys (besides the hidden state) of tensors needing a gradient
    draws: bool = False
    out_storage: int | None = None  # the data pointer of the output the next layer reads


def _record(model, layers, args, kwargs, dev) -> list:
    """One recording forward; each layer call's arguments, detached (hidden state included),
    and whether it draws random numbers."""
    modules = {id(lc.module) for lc in layers}
    rec, pending, glue, after = [], [], [], [None]

    def pre(mod, a, kw):
        if id(mod) not in modules:
            return
        lc = layers[len(rec) + len(pending)] if len(rec) + len(pending) < len(layers) else None
        if lc is None or lc.module is not mod:
            return
        grads = []
        for i, v in enumerate(a):
            if isinstance(v, torch.Tensor) and v.requires_grad and ("a", i) != lc.slot:
                grads.append(("a", i))
        for k, v in kw.items():
            if isinstance(v, torch.Tensor) and v.requires_grad and ("k", k) != lc.slot:
                grads.append(("k", k))
        if rec and not pending and _draws(after[0], _rng(dev)):
            glue.append(len(rec) - 1)  # the model's own code drew random numbers since
        det = tuple(v.detach() if isinstance(v, torch.Tensor) else v for v in a)
        dkw = {k: (None if is_cache(v) else v.detach() if isinstance(v, torch.Tensor) else v)
               for k, v in kw.items()}
        pending.append((_Recorded(det, dkw, grads), _rng(dev)))

    def post(mod, a, kw, out):
        if pending and layers[len(rec)].module is mod:
            r, before = pending.pop()
            after[0] = _rng(dev)
            r.draws = _draws(before, after[0])
            r.out_storage = leaf_of(out, layers[len(rec)].out_leaf).untyped_storage().data_ptr()
            rec.append(r)

    run_hooked(model, list({id(lc.module): lc.module for lc in layers}.values()), args, kwargs,
               pre, post)
    if len(rec) != len(layers):
        raise RematError(f"the model called {len(rec)} of its {len(layers)} layers on this input "
                         f"(a forward that skips layers, e.g. layerdrop, cannot be planned: turn "
                         f"it off in the model's config)")
    glue = [j for j in glue if layers[j].chained]  # elsewhere no segment spans the glue
    if glue:
        j = glue[0]
        switch = _random_switch(model)
        raise RematError(
            f"{type(model).__name__} draws random numbers between its layers {layers[j].path} "
            f"and {layers[j + 1].path} (a layer skipped at random: layerdrop): a recomputed "
            f"segment would not replay them; turn it off"
            + (f" ({switch})" if switch else " in the model's config"))
    return rec


def _random_switch(model) -> str:
    config = getattr(model, "config", None)
    for name in ("layerdrop", "encoder_layerdrop", "decoder_layerdrop", "drop_path_rate"):
        if getattr(config, name, 0):
            return f"config.{name} = {getattr(config, name)}: set it to 0"
    return ""


def _layer_inputs(lc, r: _Recorded):
    h = hidden_of(lc.slot, r.args, r.kwargs).detach().requires_grad_(True)
    a, kw = with_hidden(lc.slot, r.args, r.kwargs, h)
    a, kw = list(a), dict(kw)
    extra = []
    for kind, key in r.grad_names:
        t = (a[key] if kind == "a" else kw[key]).detach().requires_grad_(True)
        extra.append(t)
        if kind == "a":
            a[key] = t
        else:
            kw[key] = t
    return h, tuple(a), kw, extra


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _measure_layer(lc, r, op, sync):
    """No-grad forward, recording forward, backward of one layer call; returns times and
    the output size.  ``op(label)`` is a meter's context (or a no-op for timing)."""
    h, a, kw, extra = _layer_inputs(lc, r)
    times = {}
    with op("fck"):
        t0 = time.perf_counter()
        with torch.no_grad():
            y = lc.module(*a, **kw)
        del y
        sync()
        times["fck"] = time.perf_counter() - t0
    saved: list = []

    def pack(t):
        saved.append(t.untyped_storage().data_ptr())
        return t

    with op("fall"):
        t0 = time.perf_counter()
        with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = lc.module(*a, **kw)
        y = leaf_of(out, lc.out_leaf)
        del out
        sync()
        times["fall"] = time.perf_counter() - t0
    times["saves_output"] = y.untyped_storage().data_ptr() in saved
    del saved
    seed = torch.ones_like(y)
    out_bytes = storage_bytes(y)
    params = gradients_made(lc.module)
    tracker = MemoryTracker()
    with op("bwd"), tracker:
        t0 = time.perf_counter()
        torch.autograd.backward(y, seed, inputs=[h] + extra + params)
        sync()
        times["bwd"] = time.perf_counter() - t0
    times["bwd_live"] = tracker.peak
    shared = sum(storage_bytes(t) for t in extra)
    del y, seed, h, a, kw, extra
    return times, out_bytes, shared


def _prefix(model, first, args, kwargs, op, sync):
    """The code before the first layer, stopped at it; then its backward."""
    def stop(mod, a, kw):
        raise _Stop((a, kw))

    handle = first.module.register_forward_pre_hook(stop, with_kwargs=True)
    t = {}
    try:
        with op("prefix"):
            t0 = time.perf_counter()
            try:
                with torch.enable_grad():
                    model(*args, **kwargs)
                raise RematError("the model returned without calling its first layer")
            except _Stop as s:
                a, kw = s.value
            sync()
            t["fwd"] = time.perf_counter() - t0
    finally:
        handle.remove()
    h = hidden_of(first.slot, a, kw)
    if h.requires_grad:
        seed = torch.ones_like(h)
        with op("prefix_bwd"):
            t0 = time.perf_counter()
            torch.autograd.backward(h, seed)
            sync()
            t["bwd"] = time.perf_counter() - t0
        del seed
    del h, a, kw
    return t


def _suffix(model, layers, args, kwargs, loss_of, op, sync):
    """Everything after the last layer with the loss, forward (recording) and backward; the
    layers before run without grad."""
    last = layers[-1]
    n = sum(lc.module is last.module for lc in layers)  # the last layer's module's calls
    stack = contextlib.ExitStack()
    seen, held = [0], {}
    t = {}

    def post(mod, a, kw, out):
        seen[0] += 1
        if seen[0] != n:
            return None
        leaves, spec = pytree.tree_flatten(out)
        h = leaves[last.out_leaf].detach().requires_grad_(True)
        held["h"] = h
        leaves[last.out_leaf] = h
        stack.enter_context(torch.enable_grad())
        stack.enter_context(op("suffix"))
        held["t0"] = time.perf_counter()
        return pytree.tree_unflatten(leaves, spec)

    handle = last.module.register_forward_hook(post, with_kwargs=True)
    try:
        with torch.no_grad():
            with stack:  # the hook enters grad mode and the meter's op; both end here
                out = model(*args, **kwargs)
                loss = loss_of(out)
                del out
                sync()
                t["fwd"] = time.perf_counter() - held["t0"]
    finally:
        handle.remove()
    with op("suffix_bwd"):
        t0 = time.perf_counter()
        loss.backward()
        sync()
        t["bwd"] = time.perf_counter() - t0
    x_last = storage_bytes(held["h"])
    del loss, held
    return t, x_last


def _pass(model, layers, rec, args, kwargs, loss_of, op, sync):
    """Every measurement once (the layers alone, the prefix, the suffix)."""
    per = [_measure_layer(lc, r, op, sync) for lc, r in zip(layers, rec)]
    pre = _prefix(model, layers[0], args, kwargs, op, sync)
    suf, x_last = _suffix(model, layers, args, kwargs, loss_of, op, sync)
    return per, pre, suf, x_last


ALLOCATOR_METER_OPS = 2_000
"""Above this many aten operations in a no-grad forward, the CPU profile counts live
tensors (:class:`_TrackerMeter`) instead of the allocator's events (:class:`AllocatorMeter`,
a ``torch.profiler`` session whose event log grows with every operation: 5.0 GB of RSS for
the 60,009 events of one step of a small Mamba, whose reference scan is a loop of small
operations, against 0.8 GB for the step itself)."""


class _TrackerMeter:
    """:class:`AllocatorMeter`'s interface over :class:`MemoryTracker` (live tensor storages;
    its memory stays that of the live tensors, whatever the number of operations).  What it
    does not see: an allocation made and freed inside one kernel.  The parameters'
    gradients are made before it starts and accumulated in place, so they are not counted,
    as the allocator meter's ``persistent`` leaves them out."""

    def __init__(self, params) -> None:
        self.params = params
        self.tracker = None
        self._ops: list = []

    def __enter__(self):
        for p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        self.tracker = MemoryTracker()
        self.tracker.__enter__()
        return self

    def __exit__(self, *exc):
        self.tracker.__exit__(*exc)

    @contextlib.contextmanager
    def op(self, label: str):
        t = self.tracker
        before = t.refresh()
        t.reset_peak()
        yield
        after = t.refresh()
        self._ops.append(OpMemory(label, before, max(t.peak, after, before), after))

    def results(self) -> list:
        return list(self._ops)


def _forward_ops(model, args, kwargs) -> int:
    """aten operations of one no-grad forward."""
    tracker = MemoryTracker()
    with tracker, torch.no_grad():
        model(*args, **kwargs)
    return tracker.ops


@contextlib.contextmanager
def host_generators_kept():
    """Python's and numpy's generators as they were: a model may draw from them in its
    forward (wav2vec2's SpecAugment draws its masks with numpy), and a profile made inside
    a user's call must not change what that call draws."""
    import random

    import numpy as np
    py, npy = random.getstate(), np.random.get_state()
    try:
        yield
    finally:
        random.setstate(py)
        np.random.set_state(npy)


def profile_layers(model, layers, args, kwargs, loss_of, *, name: str = "") -> LayerProfile:
    """Profile ``model`` (in training mode) at ``layers`` on the inputs (args, kwargs)."""
    dev = device_of(model, args, kwargs)
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    params = [p for p in model.parameters() if p.requires_grad]
    with model_state_kept([model], dev), host_generators_kept():
        for p in params:
            p.grad = None
        rec = _record(model, layers, args, kwargs, dev)
        nop = lambda label: contextlib.nullcontext()  # noqa: E731
        # a timing pass, which is also the warm-up (lazily built caches exist before memory
        # is measured), the metered pass, a second timing pass; each time the faster one
        per, pre, suf, x_last = _pass(model, layers, rec, args, kwargs, loss_of, nop, sync)
        for p in params:
            p.grad = None
        if dev.type == "cpu" and _forward_ops(model, args, kwargs) > ALLOCATOR_METER_OPS:
            meter = _TrackerMeter(params)
        else:
            meter = AllocatorMeter(dev, persistent=lambda: [p.grad for p in params if p.grad is not None])
        with meter:
            metered = _pass(model, layers, rec, args, kwargs, loss_of, meter.op, sync)[0]
        ops = meter.results()
        for p in params:
            p.grad = None
        step_meter = None if isinstance(meter, _TrackerMeter) else AllocatorMeter(dev)
        found: dict = {}
        real, glue, grads_made = real_step(model, layers, args, kwargs, loss_of, step_meter,
                                           found)
        loss_rise, real = real[-1], real[:-1]
        plain_step = None if step_meter is None else step_meter.peak
        for p in params:
            p.grad = None
        per2, pre2, suf2, _ = _pass(model, layers, rec, args, kwargs, loss_of, nop, sync)
        per = [({k: min(a[0][k], b[0][k]) for k in a[0]},) + a[1:] for a, b in zip(per, per2)]
        for a, b in zip(per, per2):
            a[0]["saves_output"] = b[0]["saves_output"]
        pre = {k: min(pre[k], pre2[k]) for k in pre}
        suf = {k: min(suf[k], suf2[k]) for k in suf}
    by = {}
    for o in ops:
        by.setdefault(o.label, []).append(o)
    n = len(layers)
    x = [storage_bytes(hidden_of(lc.slot, r.args, r.kwargs)) for lc, r in zip(layers, rec)]
    x.append(x_last)
    tape, f_ovh, a_ovh, b_ovh, rise = sizes_from_ops(
        by, x, [per[i][1] for i in range(n)], layers,
        [metered[i][0]["bwd_live"] for i in range(n)], real, live_without_grads=True)
    # layer j's tape holds its own output; where the next layer's input is another tensor
    # (made by the model's code between them), it is held beside it until B_{j+1}
    tape = [t + a for t, a in zip(tape, found["inputs_apart"])]
    bwd_time = [per[i][0]["bwd"] for i in range(n)] + [suf["fwd"] + suf["bwd"]]
    chain = Chain(fwd_time=[per[i][0]["fck"] for i in range(n)], bwd_time=bwd_time,
                  x_size=x, tape_size=tape, fwd_overhead=f_ovh, bwd_overhead=b_ovh,
                  fall_time=[per[i][0]["fall"] for i in range(n)], fall_overhead=a_ovh,
                  name=name)
    p = by["prefix"][0]
    prefix_tape = max(0, p.after - p.before)
    if "prefix_bwd" in by:
        end_peak = by["prefix_bwd"][0].peak - p.before
    else:
        end_peak = prefix_tape
    # values needing a gradient that layers read besides their hidden state (T5's position
    # bias, the encoder's states): each is held from where it is made to the step's end
    # (the layers' recorded arguments keep it for their recomputations), and its gradient
    # builds up in the backward
    values: dict = {}  # storage -> [first reader, last reader, bytes]
    for i, r in enumerate(rec):
        for kind, key in r.grad_names:
            t = r.args[key] if kind == "a" else r.kwargs[key]
            v = values.setdefault(t.untyped_storage().data_ptr(), [i, i, storage_bytes(t)])
            v[1] = i
    shared = sum(v[2] for v in values.values()) + max((per[i][2] for i in range(n)), default=0)
    held, between, value_grads = held_beside(values, glue, x, layers, apart=True)
    held += found["layer_made"]  # as a value: from its first reader until the backward passes it
    between += sum(b for _, b in found["layer_made"])
    outputs_kept = [(j, b) for j, b in enumerate(found["outputs_kept"]) if b]
    between += sum(b for _, b in outputs_kept)
    # a value that is an unchained layer's own output (BART's encoder states, its last
    # layer's output): inside that layer's tape while the tape is held
    for j in range(n - 1):
        v = values.get(rec[j].out_storage)
        if not layers[j].chained and v is not None and v[0] == j + 1 and (j + 1, v[2]) in held:
            held.remove((j + 1, v[2]))
            outputs_kept.append((j, v[2]))
    return LayerProfile(chain, max(0, prefix_tape - x[0]) + between, max(end_peak, 0),
                        pre.get("fwd", 0.0) + pre.get("bwd", 0.0), shared,
                        [r.draws for r in rec], rise,
                        [bool(per[i][0]["saves_output"]) for i in range(n)], plain_step,
                        grads_made=grads_made, loss_rise=loss_rise,
                        prefix_only=max(0, prefix_tape - x[0]), held=held,
                        value_grads=value_grads, outputs_kept=outputs_kept,
                        forward_only=found["forward_only"])
