"""Capture a model at its own seams: the layers of its repeated stack, run eagerly.

:func:`~remat_theory.torch.capture.to_stages` first tries this capture (``method="auto"``
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

import contextlib
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils import _pytree as pytree

from remat_theory.model.errors import RematError

CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)
_GC_LAYER = "GradientCheckpointingLayer"


class CaptureError(RematError):
    """A model cannot be captured as a chain of stages (untraceable, no valid cut, bad input)."""


class SeamError(Exception):
    """The model has no usable repeated stack (the caller falls back to a graph capture)."""


class _Stop(BaseException):
    """Raised at a replay's exit point, carrying the hidden state found there.  A
    BaseException, so that no ``except Exception`` inside a model's forward swallows it."""

    def __init__(self, value):
        super().__init__()
        self.value = value


# ------------------------------------------------------------------------ probe
@dataclass
class _Call:
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
    handles = []

    def pre(mod, a, kw):
        c = _Call(names.get(id(mod), "?"), mod, clock[0], args=a, kwargs=dict(kw), depth=len(stack))
        h = _hidden_of(c)
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

    try:
        for m in model.modules():
            handles.append(m.register_forward_pre_hook(pre, with_kwargs=True))
            handles.append(m.register_forward_hook(post, with_kwargs=True))
        with torch.enable_grad():
            out = model(*args, **kwargs)
    finally:
        for h in handles:
            h.remove()
    return calls, out


def _grad_tensors(value) -> list:
    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor) and t.requires_grad]


def hidden_slot(c: _Call):
    """Where the call's first activation is: ('a', 0) or ('k', name); None if none."""
    if c.args and isinstance(c.args[0], torch.Tensor):
        return ("a", 0) if c.args[0].requires_grad else None
    for k, v in c.kwargs.items():
        if isinstance(v, torch.Tensor) and v.requires_grad:
            return ("k", k)
    return None


def _hidden_of(c: _Call):
    slot = hidden_slot(c)
    return None if slot is None else (c.args[0] if slot[0] == "a" else c.kwargs[slot[1]])


def _in_place(c: _Call) -> bool:
    """The call returns (a view of) its input's storage: an in-place ReLU, a flatten; such a
    module is no layer of its own (its output is no new activation)."""
    h = _hidden_of(c)
    ptr = h.untyped_storage().data_ptr()
    return any(isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() == ptr
               for t in pytree.tree_leaves(c.output))


def inside(a: _Call, b: _Call) -> bool:
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
        sout = _grad_tensors(s.output)
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
def _spec(value):
    """What a stand-in returns: the structure of ``value`` with each tensor as its metadata."""
    def one(v):
        if isinstance(v, torch.Tensor):
            return ("__tensor__", tuple(v.shape), v.dtype, v.device)
        return v
    return pytree.tree_map(one, value)


def _standin(spec, dense: bool, cache: dict | None = None):
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
        value = pytree.tree_map(one, spec, is_leaf=_is_spec)
        if _is_spec(spec) or (type(spec) is tuple and all(  # nothing a forward can mutate
                _is_spec(v) or v is None or isinstance(v, (bool, int, float, str)) for v in spec)):
            leaves = [value] if _is_spec(spec) else [t for t in value if isinstance(t, torch.Tensor)]
            cache[("tree", id(spec))] = (spec, value, [(t, t._version) for t in leaves])
        return value
    return pytree.tree_map(one, spec, is_leaf=_is_spec)


def _is_spec(v) -> bool:
    return isinstance(v, tuple) and len(v) == 4 and v[0] == "__tensor__"


def _with_leaf(value, index: int, x):
    """``value`` with its tensor leaf number ``index`` (pytree order) replaced by ``x``."""
    leaves, spec = pytree.tree_flatten(value)
    leaves = list(leaves)
    leaves[index] = x
    return pytree.tree_unflatten(leaves, spec)


def _leaf(value, index: int):
    return pytree.tree_leaves(value)[index]


def _rng_state(device):
    return torch.get_rng_state(), (torch.cuda.get_rng_state(device) if device.type == "cuda" else None)


def _set_rng_state(state, device):
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


# ------------------------------------------------------------------------ the plan
@dataclass
class _Seam:
    path: str
    module: nn.Module
    slot: tuple  # where its hidden input is: ('a', 0) or ('k', name)
    out_spec: object  # stand-in structure of its output
    out_leaf: int  # leaf index (pytree order) of the hidden state in its output
    direct: bool  # the next seam (or nothing, for the last) reads that leaf itself


class _Runner:
    """What every stage of one chain shares: the model, the seams, the stand-ins, the
    values the prefix hands on (``ctx``), and the current inputs."""

    def __init__(self, model, args, kwargs, x0_slot, seams, stubs, out_index, dense):
        self.model = model
        self.args = tuple(args)
        self.kwargs = dict(kwargs)
        self.x0_slot = x0_slot  # ('a', i) or ('k', name)
        self.seams = seams
        self.stubs = stubs  # entry key -> [(module, spec)] of the modules run before it
        self.out_index = out_index
        self.dense = dense
        self.fixed: dict = {}  # name -> tensor; set by the chain (its fixed inputs)
        self.ctx: dict = {}  # "x0": input; k: (args, kwargs) of seam k
        self.shape = None  # (shape, dtype) of the example x_0
        self.standins: dict = {}  # spec leaf -> (expanded zero, its version): made once
        # the suffix as its module calls alone (_direct_suffix), or None: it replays
        self.direct = None
        self._fill_standins()

    def _fill_standins(self):
        """Make every stand-in the stages return now, at capture (or after a move), so that
        no step allocates one (a zero scalar per stand-in, held with the chain)."""
        self.standins = {}
        if self.dense:
            return
        for s in self.seams:
            _standin(s.out_spec, False, self.standins)
        for lst in self.stubs.values():
            for _, spec in lst:
                for one in spec:
                    _standin(one, False, self.standins)

    # inputs --------------------------------------------------------------
    def inputs(self, x0):
        args, kwargs = list(self.args), dict(self.kwargs)
        for name, t in self.fixed.items():
            if name.startswith("input "):
                args[int(name.split()[1])] = t
            else:
                kwargs[name] = t
        kind, key = self.x0_slot
        if kind == "a":
            args[key] = x0
        else:
            kwargs[key] = x0
        return args, kwargs

    def check_input(self, x):
        if self.shape is not None and (tuple(x.shape) != self.shape[0] or x.dtype != self.shape[1]):
            raise CaptureError(f"this chain was captured at the model's layers for inputs of "
                               f"shape {list(self.shape[0])} and dtype {self.shape[1]}; got shape "
                               f"{list(x.shape)}, dtype {x.dtype} (capture again with an example "
                               f"of the new shape)")

    def retarget(self, old, new):
        """The chain moved from device ``old`` to ``new``: the stand-ins follow."""
        def swap(v):
            if isinstance(v, tuple) and len(v) == 4 and v[0] == "__tensor__" and v[3] == old:
                return (v[0], v[1], v[2], new)
            return v

        def spec(value):
            return pytree.tree_map(swap, value, is_leaf=_is_spec)
        for s in self.seams:
            s.out_spec = spec(s.out_spec)
        self.stubs = {k: [(m, spec(v)) for m, v in lst] for k, lst in self.stubs.items()}
        self._fill_standins()

    # patching ------------------------------------------------------------
    @contextlib.contextmanager
    def _patched(self, patches):
        """Set ``module.forward`` of each (module, fn) for the block; restore after."""
        done = []
        try:
            for m, fn in patches:
                if "forward" in m.__dict__:
                    raise RuntimeError(f"module {type(m).__name__} is already patched")
                m.__dict__["forward"] = fn  # what nn.Module.__setattr__ does for a function
                done.append(m)
            yield done
        finally:
            for m in done:
                m.__dict__.pop("forward", None)

    def _stub(self, specs):
        """A forward returning the stand-ins of the module's calls, one after the other."""
        dense, calls, cache = self.dense, [0], self.standins

        def fn(*a, **kw):
            k = min(calls[0], len(specs) - 1)
            calls[0] += 1
            return _standin(specs[k], dense, cache)
        return fn

    # stages --------------------------------------------------------------
    def prefix(self, x):
        """Run the forward to the first seam; record every seam's other arguments."""
        self.check_input(x)
        self.ctx = {"x0": x.detach()}
        args, kwargs = self.inputs(x)
        dev = x.device
        n = len(self.seams)
        found, rng = {}, {}

        def seam_fn(k):
            seam = self.seams[k]

            def fn(*a, **kw):
                kind, key = seam.slot
                if kind == "a":
                    hidden, rest = a[0], (tuple(a[1:]), dict(kw))
                else:
                    kw = dict(kw)
                    hidden = kw.pop(key)
                    rest = (tuple(a), kw)
                self.ctx[k] = rest
                if k == 0:
                    found["x"] = hidden
                    rng["state"] = _rng_state(dev)
                    torch._C._set_grad_enabled(False)
                if k == n - 1:
                    raise _Stop(None)
                return _standin(seam.out_spec, self.dense, self.standins)
            return fn

        grad = torch.is_grad_enabled()
        try:
            with self._patched([(s.module, seam_fn(k)) for k, s in enumerate(self.seams)]):
                self.model(*args, **kwargs)
        except _Stop:
            pass
        finally:
            torch._C._set_grad_enabled(grad)
            if "state" in rng:
                _set_rng_state(rng["state"], dev)
        if "x" not in found or len(self.ctx) < n + 1:
            raise RuntimeError("the forward did not reach every layer of the stack")
        return found["x"]

    def call_seam(self, k, x):
        seam = self.seams[k]
        a, kw = self.ctx[k]
        if seam.slot[0] == "a":
            out = seam.module(x, *a, **kw)
        else:
            out = seam.module(*a, **{seam.slot[1]: x}, **kw)
        return _leaf(out, seam.out_leaf)

    def replay(self, k, x):
        """From seam k (called with x; k == len(seams): the last seam's output is x) to the
        next seam's input, or to the model's output."""
        n = len(self.seams)
        dev = x.device
        grad = torch.is_grad_enabled()
        state = _rng_state(dev)
        patches = [(m, self._stub(spec)) for m, spec in self.stubs[k]]
        live = []

        def enter():
            _set_rng_state(state, dev)
            torch._C._set_grad_enabled(grad)
            for m in live:
                m.__dict__.pop("forward", None)
            live.clear()

        if k < n:
            seam = self.seams[k]

            def entry(*a, **kw):
                enter()
                if seam.slot[0] == "a":
                    a = (x,) + tuple(a[1:])
                else:
                    kw = dict(kw, **{seam.slot[1]: x})
                return type(seam.module).forward(seam.module, *a, **kw)
        else:
            seam = self.seams[n - 1]

            def entry(*a, **kw):
                enter()
                return _with_leaf(_standin(seam.out_spec, self.dense, self.standins), seam.out_leaf, x)
        patches.append((seam.module, entry))
        if k + 1 < n:
            nxt = self.seams[k + 1]

            def stop(*a, **kw):
                raise _Stop(a[0] if nxt.slot[0] == "a" else kw[nxt.slot[1]])
            patches.append((nxt.module, stop))
        args, kwargs = self.inputs(self.ctx["x0"])
        try:
            with torch.no_grad(), self._patched(patches) as done:
                live.extend(done[:len(self.stubs[k])])  # the stand-ins, gone at the entry
                out = self.model(*args, **kwargs)
        except _Stop as s:
            return s.value
        finally:
            torch._C._set_grad_enabled(grad)
        return pytree.tree_leaves(out)[self.out_index]


class SeamStage(nn.Module):
    """One stage of a chain captured at the model's seams (see the module docstring):
    ``kind`` is ``prefix``, ``layer`` (the layer called directly), ``first`` (the prefix
    run to record the layers' arguments, then the first layer, for a model whose input goes
    straight into its first layer), ``replay`` or ``suffix``; ``label`` names the modules it runs.  Its submodules are those modules
    (shared with the model), so ``parameters()`` are the ones it trains."""

    def __init__(self, runner: _Runner, kind: str, k: int, label: str, modules: list, index: int):
        super().__init__()
        object.__setattr__(self, "runner", runner)
        self.kind = kind
        self.k = k
        self.label = label
        self.index = index
        self.parts = nn.ModuleList(modules)

    def forward(self, x):
        r = self.runner
        if self.kind == "prefix":
            return r.prefix(x)
        if self.kind == "layer":
            return r.call_seam(self.k, x)
        if self.kind == "first":  # the input goes straight into the first layer
            return r.call_seam(0, r.prefix(x))
        if self.kind == "suffix" and r.direct is not None:
            return _run_direct(r.direct, x)
        return r.replay(self.k, x)

    def extra_repr(self) -> str:
        return f"{self.kind}: {self.label}"


# ------------------------------------------------------------------------ building
def _maximal(calls, lo: int, hi: int, exclude) -> list:
    """Outermost calls that start after ``lo`` and end before ``hi`` (clock values), the
    calls in ``exclude`` (ancestors of an entry point) left out."""
    within = [c for c in calls if lo < c.enter and c.exit < hi and c.exit >= 0 and c not in exclude]
    return [c for c in within if not any(inside(c, o) for o in within if o is not c)]


def _ancestors(calls, c) -> list:
    return [o for o in calls if inside(c, o)]


def plan(model, args, kwargs, x0_slot, out_index):
    """Probe the model and lay out its seam stages.  Returns (runner, stage specs) or
    raises :class:`SeamError` saying why the model has no usable stack."""
    if isinstance(model, CONTAINERS):
        raise SeamError("the model is a container: its children are its stages")
    calls, out = probe(model, args, kwargs)
    seams = find_seams(model, calls)
    if not seams:
        raise SeamError("no repeated stack of layers found")
    x0 = args[x0_slot[1]] if x0_slot[0] == "a" else kwargs[x0_slot[1]]
    straight = _hidden_of(seams[0]) is x0  # no prefix: the first stage is the first layer
    for a, b in zip(seams, seams[1:]):
        if inside(a, b) or inside(b, a) or a.exit > b.enter:
            raise SeamError(f"layers {a.path} and {b.path} overlap")
    made = []
    for k, s in enumerate(seams):
        slot = hidden_slot(s)
        hidden = _hidden_of(s)
        others = [t for t in _grad_tensors((s.args, s.kwargs)) if t is not hidden]
        if others:
            raise SeamError(f"layer {s.path} receives another tensor that needs a gradient "
                            f"besides its input")
        leaves = pytree.tree_leaves(s.output)
        grads = [i for i, t in enumerate(leaves) if isinstance(t, torch.Tensor) and t.requires_grad]
        if k + 1 < len(seams):
            nxt = _hidden_of(seams[k + 1])
            direct = [i for i, t in enumerate(leaves) if t is nxt]
            leaf = direct[0] if direct else (grads[0] if grads else -1)
            is_direct = bool(direct)
        else:  # the leaf the next module call reads (a final norm), else the first
            later = [_hidden_of(c) for c in calls if c.enter > s.exit and hidden_slot(c)]
            read = [i for i in grads if any(leaves[i] is t for t in later)]
            leaf, is_direct = (read or grads or [-1])[0], True
        if leaf < 0:
            raise SeamError(f"layer {s.path} returns no tensor needing a gradient")
        made.append(_Seam(s.path, s.module, slot, _spec(s.output), leaf, is_direct))
    # stand-ins of every replay: the modules run entirely before its entry point
    stubs = {}
    for k in range(len(seams) + 1):
        if k < len(seams):
            at, anc = seams[k].enter, set(map(id, _ancestors(calls, seams[k])))
            anc.add(id(seams[k]))
        else:
            at, anc = seams[-1].exit, set(map(id, _ancestors(calls, seams[-1])))
            anc.add(id(seams[-1]))
        by_module: dict = {}
        for c in _maximal(calls, -1, at, ()):
            if id(c) not in anc:
                by_module.setdefault(id(c.module), (c.module, []))[1].append(_spec(c.output))
        stubs[k] = list(by_module.values())
    runner_seams = made
    # what each stage runs, for its label and its parameters
    first, last = seams[0], seams[-1]
    pre = [c for c in _maximal(calls, -1, first.enter, ()) if c not in _ancestors(calls, first)]
    if straight and (pre or not made[0].direct):
        raise SeamError(f"the input goes straight into the first layer {first.path}, and "
                        f"other code runs before it")
    specs = [] if straight else [("prefix", 0, pre)]
    for k, s in enumerate(seams):
        if straight and k == 0:
            specs.append(("first", 0, [s]))
        elif made[k].direct:
            specs.append(("layer", k, [s]))
        else:
            nxt = seams[k + 1]
            glue = [c for c in _maximal(calls, s.exit, nxt.enter, ()) if c not in _ancestors(calls, nxt)]
            specs.append(("replay", k, [s] + glue))
    post = _maximal(calls, last.exit, float("inf"), ())
    direct = None
    if pytree.tree_leaves(out)[out_index] is pytree.tree_leaves(last.output)[made[-1].out_leaf]:
        pass  # the last layer's output is the model's: no suffix stage
    else:
        specs.append(("suffix", len(seams), post))
        direct = _direct_suffix(last, made[-1].out_leaf, post, out, out_index)
    del out
    return runner_seams, stubs, specs, direct


def _view_of(src: torch.Tensor, dst: torch.Tensor):
    """How ``dst`` reads ``src``: ``()`` when it is ``src`` or has its storage, shape, strides
    and offset (the same values); ``(size, stride, offset)`` when it is another view of the
    same storage (an ``as_strided`` of ``src`` gives its values); None otherwise."""
    if not (isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor)):
        return None
    if dst is src:
        return ()
    if (dst.dtype != src.dtype or dst.device != src.device or src.is_sparse or dst.is_sparse
            or dst.untyped_storage().data_ptr() != src.untyped_storage().data_ptr()):
        return None
    if (dst.shape == src.shape and dst.stride() == src.stride()
            and dst.storage_offset() == src.storage_offset()):
        return ()
    return (tuple(dst.shape), tuple(dst.stride()), dst.storage_offset() - src.storage_offset())


def _apply_view(x: torch.Tensor, view):
    if not view:
        return x
    size, stride, delta = view
    return x.as_strided(size, stride, x.storage_offset() + delta)


@dataclass
class _PostStep:
    module: nn.Module
    slot: tuple  # where its hidden input is: ('a', 0) or ('k', name)
    args: tuple  # the other arguments, as recorded (no tensors)
    kwargs: dict
    view: tuple  # how its hidden input reads the previous output (_view_of)
    out_leaf: int  # the leaf of its output the next step (or the model's output) reads


def _direct_suffix(last: _Call, last_leaf: int, post: list, out, out_index: int):
    """The suffix as its module calls alone, where the record shows that the code after the
    last layer does nothing else to the hidden state: each module after the last layer (the
    outermost calls: a final norm, a head) reads, as its only tensor argument, the previous
    one's output (the last layer's first) or a view of it, unchanged since (its version
    counter: no in-place write between), and the model's output is the last module's output
    or a view of it.  Then calling those modules on x reproduces the model's output without
    running the model's forward again (its prelude of masks and positions, the transformers
    ``forward`` Python).  None (the suffix replays the forward) where any of that fails,
    where a module keeps running statistics (a second call would update them), or where the
    modules called so do not give the model's output bit for bit on the example."""
    if not post:
        return None
    src_call, src_leaf = last, last_leaf
    steps = []
    for c in post:
        slot = hidden_slot(c)
        if slot is None or c.exit < 0:
            return None
        h = _hidden_of(c)
        rest = (c.args[1:], {k: v for k, v in c.kwargs.items() if k != slot[1]}) \
            if slot[0] == "a" else (c.args, {k: v for k, v in c.kwargs.items() if k != slot[1]})
        if any(isinstance(t, torch.Tensor) for t in pytree.tree_leaves(rest)):
            return None  # it reads another tensor (a mask): the forward's code makes it
        if any(getattr(m, "track_running_stats", False) and m.training
               for m in c.module.modules()):
            return None
        src = pytree.tree_leaves(src_call.output)[src_leaf]
        view = _view_of(src, h)
        if view is None or src_call.out_versions[src_leaf] != c.hidden_version:
            return None
        leaves = pytree.tree_leaves(c.output)
        if slot[0] == "k" and c.args:
            return None  # keep the calls simple: a keyword hidden state with positional others
        steps.append([c.module, slot, tuple(rest[0]), dict(rest[1]), view, -1])
        src_call = c
        # the leaf the next call (or the model's output) reads
        nxt = [_hidden_of(o) for o in post[post.index(c) + 1:post.index(c) + 2]]
        target = nxt[0] if nxt else pytree.tree_leaves(out)[out_index]
        found = [i for i, t in enumerate(leaves) if _view_of(t, target) is not None]
        if not found:
            return None
        src_leaf = steps[-1][5] = found[0]
    final = pytree.tree_leaves(out)[out_index]
    src = pytree.tree_leaves(src_call.output)[src_leaf]
    last_view = _view_of(src, final)
    if last_view is None or src._version != src_call.out_versions[src_leaf]:
        return None
    direct = ([_PostStep(*st) for st in steps], last_view)
    x = pytree.tree_leaves(last.output)[last_leaf]
    dev = x.device
    try:  # the check: the same values, bit for bit, generators untouched
        with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []), torch.no_grad():
            got = _run_direct(direct, x.detach())
    except Exception:  # noqa: BLE001 - any failure: the suffix replays the forward instead
        return None
    if not (got.shape == final.shape and got.dtype == final.dtype and torch.equal(got, final)):
        return None
    return direct


def _run_direct(direct, x):
    steps, last_view = direct
    v = x
    for st in steps:
        h = _apply_view(v, st.view)
        if st.slot[0] == "a":
            out = st.module(h, *st.args, **st.kwargs)
        else:
            out = st.module(*st.args, **{st.slot[1]: h}, **st.kwargs)
        v = pytree.tree_leaves(out)[st.out_leaf]
    return _apply_view(v, last_view)


def _label(calls) -> str:
    paths = [c.path for c in calls if c.path]
    return ", ".join(paths) if paths else "(top level)"


def build_stages(model, args, kwargs, x0_slot, out_index, dense=False):
    """(stages, runner) of ``model`` captured at its seams; SeamError if it has none.
    ``x0_slot``: where x_0 is among the inputs, ('a', i) or ('k', name).  ``dense``: the
    stand-ins are zeros of full size (for a forward that cannot read an expanded tensor)
    instead of one expanded zero."""
    x0 = args[x0_slot[1]] if x0_slot[0] == "a" else kwargs[x0_slot[1]]
    seams, stubs, specs, direct = plan(model, args, kwargs, x0_slot, out_index)
    runner = _Runner(model, args, kwargs, x0_slot, seams, stubs, out_index, dense=dense)
    runner.shape = (tuple(x0.shape), x0.dtype)
    stages = []
    covered = set()
    for idx, (kind, k, calls) in enumerate(specs):
        mods = []
        for c in calls:
            mods.append(c.module)
            covered.update(id(p) for p in c.module.parameters())
        label = (seams[k].path if kind in ("layer", "first") else _label(calls[:1]) + " + " + _label(calls[1:])
                 if kind == "replay" and len(calls) > 1 else _label(calls))
        stages.append(SeamStage(runner, kind, k, label, mods, idx))
    rest = [p for p in model.parameters() if id(p) not in covered]
    if rest:  # parameters the ancestors' own code uses: the suffix trains them
        stages[-1].extra = nn.ParameterList(rest)
        direct = None  # that code is more than the modules' calls: it replays
    runner.direct = direct
    return stages, runner
