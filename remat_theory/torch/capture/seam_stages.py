"""Capture at the model's layers, second step: the stages of a chain cut at the seams that
:mod:`.seams` found.  One runner per chain (the model, its seams, the stand-ins, the values the
prefix records in the chain's :class:`~remat_theory.torch.capture.carried.Carried` store); each
:class:`SeamStage` is the prefix, one layer called directly, a replay between seams or the suffix."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils import _pytree as pytree

from remat_theory.model.errors import CaptureError
from remat_theory.torch.capture.carried import Carried
from remat_theory.torch.capture.seams import (CONTAINERS, LayerCall, SeamError, Stop, find_seams,
                                              grad_tensors, hidden_of, hidden_slot, inside, is_spec,
                                              leaf_at, probe, standin, value_spec, with_leaf)
from remat_theory.torch.capture.stages import rng_state, set_rng_state


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
    values the prefix hands on (``carried``), and the current inputs."""

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
        self.carried = Carried(step_held=True)  # "x0": input; k: (args, kwargs) of seam k
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
            standin(s.out_spec, False, self.standins)
        for lst in self.stubs.values():
            for _, spec in lst:
                for one in spec:
                    standin(one, False, self.standins)

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
            return pytree.tree_map(swap, value, is_leaf=is_spec)
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
            return standin(specs[k], dense, cache)
        return fn

    # stages --------------------------------------------------------------
    def prefix(self, x):
        """Run the forward to the first seam; record every seam's other arguments."""
        self.check_input(x)
        self.carried.clear()
        self.carried.put("x0", x.detach())
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
                self.carried.put(k, rest)
                if k == 0:
                    found["x"] = hidden
                    rng["state"] = rng_state(dev)
                    torch._C._set_grad_enabled(False)
                if k == n - 1:
                    raise Stop(None)
                return standin(seam.out_spec, self.dense, self.standins)
            return fn

        grad = torch.is_grad_enabled()
        try:
            with self._patched([(s.module, seam_fn(k)) for k, s in enumerate(self.seams)]):
                self.model(*args, **kwargs)
        except Stop:
            pass
        finally:
            torch._C._set_grad_enabled(grad)
            if "state" in rng:
                set_rng_state(rng["state"], dev)
        if "x" not in found or len(self.carried.values) < n + 1:
            raise RuntimeError("the forward did not reach every layer of the stack")
        return found["x"]

    def call_seam(self, k, x):
        seam = self.seams[k]
        a, kw = self.carried.get(k)
        if seam.slot[0] == "a":
            out = seam.module(x, *a, **kw)
        else:
            out = seam.module(*a, **{seam.slot[1]: x}, **kw)
        return leaf_at(out, seam.out_leaf)

    def replay(self, k, x):
        """From seam k (called with x; k == len(seams): the last seam's output is x) to the
        next seam's input, or to the model's output."""
        n = len(self.seams)
        dev = x.device
        grad = torch.is_grad_enabled()
        state = rng_state(dev)
        patches = [(m, self._stub(spec)) for m, spec in self.stubs[k]]
        live = []

        def enter():
            set_rng_state(state, dev)
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
                return with_leaf(standin(seam.out_spec, self.dense, self.standins), seam.out_leaf, x)
        patches.append((seam.module, entry))
        if k + 1 < n:
            nxt = self.seams[k + 1]

            def stop(*a, **kw):
                raise Stop(a[0] if nxt.slot[0] == "a" else kw[nxt.slot[1]])
            patches.append((nxt.module, stop))
        args, kwargs = self.inputs(self.carried.get("x0"))
        try:
            with torch.no_grad(), self._patched(patches) as done:
                live.extend(done[:len(self.stubs[k])])  # the stand-ins, gone at the entry
                out = self.model(*args, **kwargs)
        except Stop as s:
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
        self.carried = runner.carried  # the store the prefix fills (shared by every stage)

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
    straight = hidden_of(seams[0]) is x0  # no prefix: the first stage is the first layer
    for a, b in zip(seams, seams[1:]):
        if inside(a, b) or inside(b, a) or a.exit > b.enter:
            raise SeamError(f"layers {a.path} and {b.path} overlap")
    made = []
    for k, s in enumerate(seams):
        slot = hidden_slot(s)
        hidden = hidden_of(s)
        others = [t for t in grad_tensors((s.args, s.kwargs)) if t is not hidden]
        if others:
            raise SeamError(f"layer {s.path} receives another tensor that needs a gradient "
                            f"besides its input")
        leaves = pytree.tree_leaves(s.output)
        grads = [i for i, t in enumerate(leaves) if isinstance(t, torch.Tensor) and t.requires_grad]
        if k + 1 < len(seams):
            nxt = hidden_of(seams[k + 1])
            direct = [i for i, t in enumerate(leaves) if t is nxt]
            leaf = direct[0] if direct else (grads[0] if grads else -1)
            is_direct = bool(direct)
        else:  # the leaf the next module call reads (a final norm), else the first
            later = [hidden_of(c) for c in calls if c.enter > s.exit and hidden_slot(c)]
            read = [i for i in grads if any(leaves[i] is t for t in later)]
            leaf, is_direct = (read or grads or [-1])[0], True
        if leaf < 0:
            raise SeamError(f"layer {s.path} returns no tensor needing a gradient")
        made.append(_Seam(s.path, s.module, slot, value_spec(s.output), leaf, is_direct))
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
                by_module.setdefault(id(c.module), (c.module, []))[1].append(value_spec(c.output))
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


def _direct_suffix(last: LayerCall, last_leaf: int, post: list, out, out_index: int):
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
        h = hidden_of(c)
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
        nxt = [hidden_of(o) for o in post[post.index(c) + 1:post.index(c) + 2]]
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
