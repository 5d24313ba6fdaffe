"""Capture a model at its own seams: the layers of its repeated stack, run eagerly.

:func:`~remat_theory.torch.capture.chain.to_stages` first tries this capture (``method="auto"``
with the default granularity, or ``method="modules"``).  It does not record a graph: the
stages run the model's OWN eager code, so the chain computes, holds and frees exactly
what the model does (the same kernels, the same masks, the same saved tensors).

1. **Probe.**  One eager forward with a pre-hook and a hook on every module (keyword
   arguments included) records every module call: its arguments, its output, when it
   started and ended.
2. **Seams.**  The repeated stack is found from that record: the layers a user would
   checkpoint by hand.  Where the model marks them (transformers' ``GradientCheckpointingLayer``:
   ``model.layers.i``, ``transformer.h.i``, ``encoder.layer.i``, Swin's blocks), those,
   innermost first; otherwise the children of an ``nn.Sequential``/``nn.ModuleList`` that
   take a tensor needing a gradient as their first argument, outermost first, refined into
   the children of a container whose output is the block's own output (a ResNet stage into
   its blocks, a ConvNeXt stage into its layers).  Every seam is called once, its other
   arguments (masks, position embeddings, rotary caches) need no gradient, and no seam
   holds another.
3. **Stages.**  ``n`` seams give ``n + 2`` stages:

   * the *prefix* runs the model's forward up to the first seam and returns its hidden
     state (where the input goes straight into the first layer, the prefix and that layer
     are one stage); on the way it records the arguments the parent passes to every seam (the
     other seams are not run: they return stand-ins, and the forward is stopped at the
     last seam);
   * seam ``k`` calls the layer itself, ``layer(x, *args, **kwargs)`` with the arguments
     the prefix recorded, when the next seam reads its output directly (``x_{k+1}`` is
     then the output, or the element of the output tuple, that the next seam receives);
     otherwise (code between two seams: Swin's patch merging) the stage *replays* the
     model's forward from the seam to the next one (below);
   * the *suffix* goes from the last seam's output to the model's output (final norm,
     head): where the probe's record shows that the modules called after the last layer
     are the whole computation (each reads, as its only tensor, the previous one's output
     or a view of it, not written in place since, and the model's output is the last one's
     output or a view of it; checked bit for bit on the example), it calls those modules
     directly; otherwise it replays the forward (below), which runs the model's prelude
     (masks, positions) again.

   A replay runs the model's forward with every module that ran entirely before the
   stage's entry point replaced by a stand-in that returns zeros of the recorded shape
   (``expand``: no memory), without grad and with the random generators restored at the
   entry point, then the rest for real, and stops at the next seam (an exception caught
   by the stage).  Values the prefix computes without gradient and the seams read (an
   attention mask, rotary ``cos``/``sin``) are handed to the later stages, like the
   parameters: they are held by the chain from one prefix run to the next and are not
   activations of the chain (``SeamChain.carried_bytes`` says how much).

The chain is checked against the model: same output bit for bit on the example (and the
tests compare gradients).  What it fixes: the shapes of the example (the stand-ins have
them; another input shape raises, naming it), and the branches the forward takes.
Nothing is recorded as a graph, so tensors a forward creates (GPT-Neo's mask value),
``*args/**kwargs`` forwards and dict or tuple outputs need nothing special.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils import _pytree as pytree


CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)
_GC_LAYER = "GradientCheckpointingLayer"


class SeamError(Exception):
    """The model has no usable repeated stack (the caller falls back to a graph capture)."""


class Stop(BaseException):
    """Raised at a replay's exit point, carrying the hidden state found there.  A
    BaseException, so that no ``except Exception`` inside a model's forward swallows it."""

    def __init__(self, value):
        super().__init__()
        self.value = value


# ------------------------------------------------------------------------ probe
@dataclass
class LayerCall:
    path: str
    module: nn.Module
    enter: int
    exit: int = -1
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    output: object = None
    depth: int = 0
    hidden_version: int | None = None  # the hidden input's version counter at the call
    out_versions: tuple = ()  # each output leaf's version counter at the return (None: no tensor)


def probe(model: nn.Module, args, kwargs) -> list:
    """One eager forward; every module call with its arguments and output, in order."""
    names = {}
    for path, m in model.named_modules(remove_duplicate=False):
        names.setdefault(id(m), path)
    calls, stack, clock = [], [], [0]

    def pre(mod, a, kw):
        c = LayerCall(names.get(id(mod), "?"), mod, clock[0], args=a, kwargs=dict(kw), depth=len(stack))
        h = hidden_of(c)
        c.hidden_version = None if h is None else h._version
        clock[0] += 1
        calls.append(c)
        stack.append(c)

    def post(mod, a, kw, out):
        c = stack.pop()
        c.exit = clock[0]
        clock[0] += 1
        c.output = out
        c.out_versions = tuple(t._version if isinstance(t, torch.Tensor) else None
                               for t in pytree.tree_leaves(out))

    out = run_hooked(model, list(model.modules()), args, kwargs, pre, post)
    return calls, out


def run_hooked(model, modules, args, kwargs, pre=None, post=None):
    """Run ``model(*args, **kwargs)`` with grad enabled and forward ``pre``/``post`` hooks
    (with kwargs) on ``modules``, removed afterwards whatever happens; returns the output.
    The one way the harness watches a model's own forward (capture at the seams, the in-place
    profile's recording, the real-size layer finder)."""
    handles = []
    try:
        for m in modules:
            if pre is not None:
                handles.append(m.register_forward_pre_hook(pre, with_kwargs=True))
            if post is not None:
                handles.append(m.register_forward_hook(post, with_kwargs=True))
        with torch.enable_grad():
            return model(*args, **kwargs)
    finally:
        for h in handles:
            h.remove()


def grad_tensors(value) -> list:
    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor) and t.requires_grad]


def hidden_slot(c: LayerCall):
    """Where the call's first activation is: ('a', 0) or ('k', name); None if none."""
    if c.args and isinstance(c.args[0], torch.Tensor):
        return ("a", 0) if c.args[0].requires_grad else None
    for k, v in c.kwargs.items():
        if isinstance(v, torch.Tensor) and v.requires_grad:
            return ("k", k)
    return None


def hidden_of(c: LayerCall):
    slot = hidden_slot(c)
    return None if slot is None else (c.args[0] if slot[0] == "a" else c.kwargs[slot[1]])


def _in_place(c: LayerCall) -> bool:
    """The call returns (a view of) its input's storage: an in-place ReLU, a flatten; such a
    module is no layer of its own (its output is no new activation)."""
    h = hidden_of(c)
    ptr = h.untyped_storage().data_ptr()
    return any(isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() == ptr
               for t in pytree.tree_leaves(c.output))


def inside(a: LayerCall, b: LayerCall) -> bool:
    """Call a happens inside call b."""
    return b.enter < a.enter and a.exit < b.exit


def _is_gc_layer(m: nn.Module) -> bool:
    return any(t.__name__ == _GC_LAYER for t in type(m).__mro__)


def _parent(model, path: str):
    if "." not in path:
        return model if path else None
    try:
        return model.get_submodule(path.rpartition(".")[0])
    except AttributeError:
        return None


def find_seams(model: nn.Module, calls: list) -> list:
    """The calls of the repeated stack's layers, in call order (see the module docstring)."""
    count: dict = {}
    for c in calls:
        count[id(c.module)] = count.get(id(c.module), 0) + 1
    cand = [c for c in calls if count[id(c.module)] == 1 and c.exit >= 0
            and hidden_slot(c) is not None and not isinstance(c.module, CONTAINERS)
            and not _in_place(c)]
    gc = [c for c in cand if _is_gc_layer(c.module)]
    if gc:
        seams = [c for c in gc if not any(inside(o, c) for o in gc if o is not c)]
    else:
        in_cont = [c for c in cand if isinstance(_parent(model, c.path), CONTAINERS)]
        kinds: dict = {}
        for c in in_cont:  # a stack repeats its layers: a class seen once is not one
            kinds[type(c.module)] = kinds.get(type(c.module), 0) + 1
        in_cont = [c for c in in_cont if kinds[type(c.module)] >= 2]
        seams = [c for c in in_cont if not any(inside(c, o) for o in in_cont if o is not c)]
        seams = _refine(seams, [c for c in cand if isinstance(_parent(model, c.path), CONTAINERS)],
                        calls)
    seams.sort(key=lambda c: c.enter)
    return seams


def _refine(seams, in_cont, calls) -> list:
    """Replace a seam by the layers of a stack inside it when its output is the last of
    those layers' output (a ResNet or ConvNeXt stage that is its blocks, maybe after a
    downsampling)."""
    out = []
    for s in seams:
        sout = grad_tensors(s.output)
        last = [c for c in calls if inside(c, s) and sout and c.output is sout[0]]
        inner = None
        for c in sorted(last, key=lambda c: c.depth):
            parent = c.path.rpartition(".")[0]
            kids = [o for o in in_cont if inside(o, s) and o.path.rpartition(".")[0] == parent]
            if kids and c in kids:
                inner = kids
                break
        out.extend(_refine(inner, in_cont, calls) if inner else [s])
    return out


# ------------------------------------------------------------------------ stand-ins
def value_spec(value):
    """What a stand-in returns: the structure of ``value`` with each tensor as its metadata."""
    def one(v):
        if isinstance(v, torch.Tensor):
            return ("__tensor__", tuple(v.shape), v.dtype, v.device)
        return v
    return pytree.tree_map(one, value)


def standin(spec, dense: bool, cache: dict | None = None):
    """The stand-in value of ``spec``: full-size zeros (``dense``), else one zero expanded
    to the shape (no memory).  With ``cache`` (spec leaf -> (view, version)), the expanded
    zero is made once and reused while nothing wrote to it or marked it as needing a
    gradient: a stand-in costs no aten call per step (a fresh one costs five: zeros, empty,
    zero_, expand, as_strided), and the values it yields are the same zeros.  A stand-in
    that is one tensor or a tuple (nothing a forward can add to) is kept whole (key
    ``("tree", id(spec))``), so a step walks no pytree for it."""
    def one(v):
        if isinstance(v, tuple) and len(v) == 4 and v[0] == "__tensor__":
            _, shape, dtype, device = v
            if dense:
                return torch.zeros(shape, dtype=dtype, device=device)
            if cache is not None:
                hit = cache.get(v)
                if hit is not None and hit[0]._version == hit[1] and not hit[0].requires_grad:
                    return hit[0]
            if cache is None:
                return torch.zeros((), dtype=dtype, device=device).expand(shape)
            base = cache.get(("zero", dtype, device))  # one zero scalar per dtype and device
            if base is None or base._version != 0 or base.requires_grad:
                base = cache[("zero", dtype, device)] = torch.zeros((), dtype=dtype, device=device)
            with torch.no_grad():
                t = base.expand(shape)
            cache[v] = (t, t._version)
            return t
        return v
    if cache is not None and not dense:  # the whole value, where it is a tensor or a tuple
        hit = cache.get(("tree", id(spec)))
        if hit is not None and hit[0] is spec and all(
                t._version == ver and not t.requires_grad for t, ver in hit[2]):
            return hit[1]
        value = pytree.tree_map(one, spec, is_leaf=is_spec)
        if is_spec(spec) or (type(spec) is tuple and all(  # nothing a forward can mutate
                is_spec(v) or v is None or isinstance(v, (bool, int, float, str)) for v in spec)):
            leaves = [value] if is_spec(spec) else [t for t in value if isinstance(t, torch.Tensor)]
            cache[("tree", id(spec))] = (spec, value, [(t, t._version) for t in leaves])
        return value
    return pytree.tree_map(one, spec, is_leaf=is_spec)


def is_spec(v) -> bool:
    return isinstance(v, tuple) and len(v) == 4 and v[0] == "__tensor__"


def with_leaf(value, index: int, x):
    """``value`` with its tensor leaf number ``index`` (pytree order) replaced by ``x``."""
    leaves, spec = pytree.tree_flatten(value)
    leaves = list(leaves)
    leaves[index] = x
    return pytree.tree_unflatten(leaves, spec)


def leaf_at(value, index: int):
    return pytree.tree_leaves(value)[index]


