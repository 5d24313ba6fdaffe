"""Capture any torch model as a chain of stages, without hand-written wrappers.

By default (``granularity="block"``, ``method="auto"``) a model with a repeated stack of
layers is cut at every layer and its stages run the model's own eager code
(:mod:`.seams`, method ``"modules"``): the chain is then the user's model, kernels, saved
tensors and masks included.  A model without one, and ``granularity="fine"`` or an
integer, are captured as a graph, as follows.

The chain model (docs/model.md) needs a network as a sequence of stages, each mapping one
activation x_i to the next, x_{i+1}.  A real model is a graph: residual branches, masks
and position ids built from the input, tuples passed between submodules, ``torch.flatten``
in a ``forward``.  :func:`to_stages` records that graph and cuts it where the chain model
holds:

1. **Capture.**  ``torch.fx.symbolic_trace`` first (submodules of ``torch.nn`` stay whole,
   the graph is shape-generic), ``torch.export.export`` when fx fails (transformers models,
   Python control flow on shapes; the graph is then specialised to the example's shapes and
   train/eval mode).  The traced graph is run on the example inputs and must give the
   model's own output bit for bit, or the next method is tried.
2. **Classify.**  That run records, for every node, whether its value needs a gradient (an
   *activation*: it depends on the input or on a parameter through differentiable ops),
   which inputs it modifies in place, which earlier value it is a view of, and whether it
   draws random numbers.  Everything else is a *constant*: parameters and buffers (read by
   each stage that uses them), the model's other inputs (attention masks, token type ids:
   *fixed inputs*, kept by the chain), and values computed without gradient (position ids,
   an extended attention mask, the shape of a tensor), which the stage computing them hands
   to the later stages that read them.
3. **Cut.**  A cut between two nodes is valid when exactly one activation crosses it, it is
   a tensor, and no later node modifies it (or a crossed constant) in place.  Stages are
   the nodes between chosen cuts; inside a stage anything goes (tuples, several live
   branches, in-place ops).  A stage must produce new memory: a stage that would return a
   view of its input (a lone ``flatten``) is merged with its neighbour.

``granularity`` chooses among the valid cuts: ``"block"`` (default) cuts between the
children of containers (``nn.Sequential``, ``nn.ModuleList``) and between modules outside
any repeated block, never inside one block (one stage per transformer layer or residual
block) except at the edge of a layer of a stack nested in it (Swin's and ConvNeXt's stages
hold their layers in a ``ModuleList``: one stage per layer there too); a layer whose output
is a view of its last result (OPT's ``(residual + h).view(shape)``) is cut after the view; ``"fine"`` takes every valid cut (mid-block cuts included: more freedom for the
solver, more stages); an integer n takes at most n stages of balanced size (the size of a
stage: the elements of the new tensors its nodes produce).

The stages call the ORIGINAL submodules and read the original parameters and buffers (no
copies): training the chain trains the model.  :class:`StageChain` presents the model's
own parameters, buffers and submodules under their own names, so ``state_dict`` keys are
the model's and load both ways.

What the chain does not see: Python-level decisions made while tracing are fixed (the
branches taken for the example; with export also the shapes and ``self.training``); a
chain captured by export answers in another mode (``chain.eval()``) with the model's own
forward, its stages refuse to run in it (:mod:`.export_mode`), and it refuses
inputs of other shapes, and rewrites the devices its graph names when moved with ``.to()``.
Constants handed between stages and fixed inputs live outside the chain's activations,
like the parameters.  A stage's recomputation replays its random draws and BatchNorm
statistics (:mod:`.executor`); other in-place updates of buffers would run again.
"""
from __future__ import annotations

import contextlib
import inspect
import warnings
from dataclasses import dataclass, field

import torch
from torch import fx, nn
from torch.utils import _pytree as pytree

from remat_theory.model.errors import RematError
from remat_theory.torch import seams
from remat_theory.torch.call_inputs import ChainInputs
from remat_theory.torch.capture_guard import capture_errors, detached_inputs, refuses_grad_input
from remat_theory.torch.export_mode import guard_stages, in_other_mode
from remat_theory.torch.seams import CaptureError

GRANULARITIES = ("block", "fine")
METHODS = ("auto", "modules", "fx", "export")
_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)
_OUTPUT_KEYS = ("logits", "last_hidden_state")
_CTX = "_remat_ctx"




# ------------------------------------------------------------------------ small helpers
def _tensors(value) -> list:
    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def _ptrs(value) -> set:
    out = set()
    for t in _tensors(value):
        p = t.untyped_storage().data_ptr()
        if p:
            out.add(p)
    return out


def _stack(node) -> list:
    """Qualified names of the modules whose forward produced ``node``, outermost first."""
    stack = node.meta.get("nn_module_stack") or {}
    out = []
    for v in stack.values():
        path = v[0] if isinstance(v, tuple) else v
        # a shared module (an unrolled RNN cell) is named where first registered: keep
        # only the entries nested in the previous one
        if isinstance(path, str) and path and (not out or path.startswith(out[-1] + ".")):
            out.append(path)
    return out


def _submodule(model: nn.Module, path: str):
    if not path:
        return model
    try:
        return model.get_submodule(path)
    except AttributeError:
        return None


def _attr(obj, target: str):
    for item in target.split("."):
        obj = getattr(obj, item)
    return obj


@contextlib.contextmanager
def _kept(model: nn.Module, device, seed: int):
    """Run a block from random seed ``seed``, then restore the RNG states and the buffers."""
    buffers = list(model.buffers())
    with torch.no_grad():
        saved = [b.clone() for b in buffers]
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        try:
            yield
        finally:
            with torch.no_grad():
                for b, s in zip(buffers, saved):
                    b.copy_(s)


def _check_input(x, shape, dtype):
    """Guard of an export-captured chain: its graph holds only for the example's shape."""
    if tuple(x.shape) != shape or x.dtype != dtype:
        raise CaptureError(f"this chain was captured by torch.export for inputs of shape "
                           f"{list(shape)} and dtype {dtype}; got shape {list(x.shape)}, dtype "
                           f"{x.dtype} (capture again with an example of the new shape)")
    return x


class _Context(nn.Module):
    """Constants handed from the stage computing them to later stages (one per chain)."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict = {}

    def put(self, key, value):
        self.values[key] = value

    def get(self, key):
        if key not in self.values:
            raise CaptureError(f"constant {key!r} is read before the stage computing it ran "
                               f"(run the stages in order from stage 0)")
        return self.values[key]


# ------------------------------------------------------------------------ inputs
def _inputs(model, example_inputs):
    """(args, kwargs, name of x_0, x_0): x_0 is the first positional input, or the first
    keyword one; the other tensors are fixed inputs, other values are baked constants."""
    if isinstance(example_inputs, torch.Tensor):
        args, kwargs = (example_inputs,), {}
    elif isinstance(example_inputs, (tuple, list)):
        args, kwargs = tuple(example_inputs), {}
    elif isinstance(example_inputs, dict):
        args, kwargs = (), dict(example_inputs)
    else:
        raise CaptureError(f"example_inputs must be a tensor, a tuple of inputs or a dict of "
                           f"keyword inputs; got {type(example_inputs).__name__}")
    if not args and not kwargs:
        raise CaptureError("example_inputs is empty: the chain needs one input tensor x_0")
    try:
        names = list(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        names = []
    first_name = next(iter(kwargs)) if not args else (names[0] if names else "input")
    first = args[0] if args else kwargs[first_name]
    if not isinstance(first, torch.Tensor):
        raise CaptureError(f"the first example input ({first_name}) is a {type(first).__name__}, "
                           f"not a tensor: the chain's input x_0 must be one tensor")
    plain = (type(None), bool, int, float, str, torch.dtype, torch.device)
    named = [(f"input {k}", v) for k, v in enumerate(args)] + list(kwargs.items())
    for name, v in named:
        if not isinstance(v, (torch.Tensor,) + plain):
            raise CaptureError(f"example input {name} is a {type(v).__name__}; each input must "
                               f"be a tensor or a plain constant (None, bool, int, float, str)")
    return args, kwargs, first_name, first


def _clone_inputs(args, kwargs, x0):
    """Fresh copies of the tensor inputs (a model may modify them in place); x_0 requires
    grad when it can (a float input), so that what depends on it is an activation."""
    def fresh(v):
        if not isinstance(v, torch.Tensor):
            return v
        c = v.detach().clone()
        if v is x0 and (c.is_floating_point() or c.is_complex()):
            c.requires_grad_(True)
        return c
    return tuple(fresh(a) for a in args), {k: fresh(v) for k, v in kwargs.items()}


def _primary_index(out, output) -> int:
    """Index, among the tensor leaves of the model output, of the chain's last activation."""
    leaves = pytree.tree_leaves(out)
    if isinstance(output, int) and not isinstance(output, bool):
        if not 0 <= output < len(leaves) or not isinstance(leaves[output], torch.Tensor):
            raise CaptureError(f"output = {output}: the model output has {len(leaves)} leaves; "
                               f"leaf {output} is not a tensor")
        return output
    if output is not None and not isinstance(output, str):
        raise CaptureError(f"output = {output!r} must be None, a key (str) or a leaf index (int)")
    keys = (output,) if isinstance(output, str) else _OUTPUT_KEYS
    chosen = None
    if isinstance(out, torch.Tensor):
        chosen = out
    else:
        for key in keys:
            v = out.get(key) if isinstance(out, dict) else getattr(out, key, None)
            if isinstance(v, torch.Tensor):
                chosen = v
                break
        if chosen is None and isinstance(output, str):
            raise CaptureError(f"output = {output!r}: the model output "
                               f"({type(out).__name__}) has no tensor of that name")
        if chosen is None:
            chosen = next((t for t in leaves if isinstance(t, torch.Tensor)), None)
    if chosen is None:
        raise CaptureError(f"the model output ({type(out).__name__}) holds no tensor")
    index = next((k for k, t in enumerate(leaves) if t is chosen), None)
    if index is None:
        raise CaptureError(f"the model output is a {type(out).__name__}, which torch's pytree "
                           f"does not open; return a tensor, a tuple or a dict from forward")
    return index


# ------------------------------------------------------------------------ tracing
@dataclass
class _Traced:
    gm: fx.GraphModule
    method: str
    ph_values: dict  # placeholder node -> example value
    x0: fx.Node
    fixed: dict  # placeholder node -> input name (tensor inputs other than x_0)
    outputs: list  # flat output leaves (nodes or constants), in pytree order


def _trace_fx(model, args, kwargs, x0) -> _Traced:
    sig = inspect.signature(model.forward)
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in sig.parameters.values()):
        raise CaptureError("forward takes *args/**kwargs, which torch.fx cannot trace")
    bound = sig.bind(*args, **kwargs)
    concrete, values = {}, {}
    for name, p in sig.parameters.items():
        v = bound.arguments.get(name, p.default)
        values[name] = v
        if not isinstance(v, torch.Tensor):
            concrete[name] = v
    gm = fx.symbolic_trace(model, concrete_args=concrete or None)
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    ph_values, fixed, x0_node = {}, {}, None
    for n, name in zip(phs, sig.parameters):
        v = values[name]
        ph_values[n] = v
        if v is x0:
            x0_node = n
        elif isinstance(v, torch.Tensor):
            fixed[n] = name
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    return _Traced(gm, "fx", ph_values, x0_node, fixed, pytree.tree_leaves(out_node.args[0]))


@contextlib.contextmanager
def _masks_as_compiled():
    """Let ``transformers`` skip a mask it would skip outside ``torch.export`` (while this
    export runs).  A causal or bidirectional mask without padding is left to SDPA's
    ``is_causal`` (no mask tensor) in eager runs and under ``torch.compile``; under
    ``torch.export`` ``transformers`` always builds it, since an exported graph serving
    other shapes must not hard-code that choice.  The stages captured here accept only the
    example's shapes (the chain checks x_0) and the choice depends only on those shapes and
    on there being no padding mask (a padding mask given as an input is traced, and then
    ``transformers`` still builds the mask), so it holds for every input the chain takes.
    The built mask cost memory and kernels the model does not run: SDPA's CPU kernel saves
    it, as a float tensor, for its backward (OPT small: 65,536 B, a 4 x 1 x 64 x 64 mask,
    which the model compiled whole does not hold)."""
    import sys
    mu = sys.modules.get("transformers.masking_utils")
    if mu is None or not callable(getattr(mu, "is_torchdynamo_exporting", None)):
        yield
        return
    was = mu.is_torchdynamo_exporting
    mu.is_torchdynamo_exporting = _not_exporting
    try:
        yield
    finally:
        mu.is_torchdynamo_exporting = was


def _not_exporting() -> bool:
    return False


def _trace_export(model, args, kwargs, x0) -> _Traced:
    with _masks_as_compiled():
        ep = torch.export.export(model, tuple(args), kwargs=dict(kwargs))
    gm = ep.module()
    graph = gm.graph
    for n in list(graph.nodes):  # shape guards of the exported module: the chain checks x_0
        if n.op == "call_module" and n.target.startswith("_guards") and not n.users:
            graph.erase_node(n)
    phs = [n for n in graph.nodes if n.op == "placeholder"]
    leaves = pytree.tree_leaves((tuple(args), dict(kwargs)))
    if len(phs) != len(leaves):
        raise CaptureError(f"torch.export gave {len(phs)} graph inputs for {len(leaves)} "
                           f"example inputs")
    names = [f"input {k}" for k in range(len(args))] + list(kwargs)
    flat_names = []
    for name, v in zip(names, list(args) + list(kwargs.values())):
        flat_names += [name] * len(pytree.tree_leaves(v))
    ph_values, fixed, x0_node = {}, {}, None
    for n, v, name in zip(phs, leaves, flat_names):
        ph_values[n] = v
        if v is x0:
            x0_node = n
        elif isinstance(v, torch.Tensor):
            fixed[n] = name
    out_node = next(n for n in graph.nodes if n.op == "output")
    return _Traced(gm, "export", ph_values, x0_node, fixed, list(out_node.args[0]))


# ------------------------------------------------------------------------ classification
@dataclass
class _Facts:
    grad: bool = False  # the value needs a gradient: an activation
    tensor: bool = False
    alias: object = None  # the input node this value is a view of (shares storage), if any
    mutated: tuple = ()  # input nodes whose values this node modifies in place
    rng: bool = False  # draws random numbers
    size: int = 0  # elements of the new tensors it creates
    value: object = field(default=None, repr=False)  # kept for the chosen output only


def _rng_states(device: torch.device) -> list:
    states = [torch.get_rng_state()]
    if device.type == "cuda":
        states.append(torch.cuda.get_rng_state(device))
    return states


class _Probe(fx.Interpreter):
    """Runs the graph once and records :class:`_Facts` of every node."""

    def __init__(self, gm, ph_values, keep_value, device):
        super().__init__(gm)
        self.device = device
        self.ph_values = ph_values
        self.keep_value = keep_value
        self.facts: dict = {}

    def run_node(self, n):
        f = _Facts()
        if n.op == "placeholder":
            value = self.ph_values[n]
        else:
            ins = [(m, t) for m in n.all_input_nodes for t in _tensors(self.env[m])]
            versions = [t._version for _, t in ins]
            rng = _rng_states(self.device)
            value = super().run_node(n)
            f.rng = any(not torch.equal(a, b) for a, b in zip(rng, _rng_states(self.device)))
            f.mutated = tuple({m for (m, t), v in zip(ins, versions) if t._version != v})
            mine = _ptrs(value)
            f.alias = next((m for m in n.all_input_nodes if mine & _ptrs(self.env[m])), None)
        leaves = _tensors(value)
        f.grad = any(t.requires_grad for t in leaves)
        f.tensor = isinstance(value, torch.Tensor)
        f.size = 0 if f.alias is not None else sum(t.numel() for t in leaves)
        if n in self.keep_value:
            f.value = value
        self.facts[n] = f
        return value


# ------------------------------------------------------------------------ planning
@dataclass
class _Plan:
    order: list  # kept compute nodes, in graph order
    cuts: list  # positions p: stage boundaries before order[p]
    acts: list  # the activation crossing each cut
    valid: int  # number of valid cuts found


def _root(facts, n):
    while n is not None and facts[n].alias is not None:
        n = facts[n].alias
    return n


def _keep(graph, facts, primary) -> set:
    """Nodes to run: those the chosen output needs, those that modify something in place
    (BatchNorm statistics) or draw random numbers (same draws as the model), and theirs."""
    seeds = [primary] + [n for n in graph.nodes if n in facts and (facts[n].mutated or facts[n].rng)]
    keep, stack = set(), list(seeds)
    while stack:
        n = stack.pop()
        if n in keep:
            continue
        keep.add(n)
        stack.extend(n.all_input_nodes)
    return keep


def _valid_cuts(order, facts, x0, primary, keep):
    """Every valid cut (position, crossing activation); the minimum activation count crossing
    any position, for the error message when there is no valid cut."""
    pos = {n: i for i, n in enumerate(order)}
    end = len(order)
    last = {}
    for n in [x0] + order:
        uses = [pos[u] for u in n.users if u in pos and u in keep]
        if n is primary:
            uses.append(end)
        last[n] = max(uses, default=-1)
    lastmut = {}
    for i, n in enumerate(order):
        for m in facts[n].mutated:
            lastmut[_root(facts, m)] = i
    live = {x0} if last[x0] >= 0 else set()
    cuts, least = [], None
    for p in range(1, pos[primary] + 1):
        n = order[p - 1]
        if last[n] >= p:
            live.add(n)
        live = {v for v in live if last[v] >= p}
        acts = [v for v in live if facts[v].grad]
        least = len(acts) if least is None else min(least, len(acts))
        if len(acts) != 1:
            continue
        a = acts[0]
        if a is x0 or not facts[a].tensor:
            continue
        if any(lastmut.get(_root(facts, v), -1) >= p for v in live):
            continue
        cuts.append((p, a))
    return cuts, (least or 0)


def _is_block(model, path: str) -> bool:
    """A repeated block: a module, not itself a container, held by a container."""
    mod = _submodule(model, path)
    parent = _submodule(model, path.rpartition(".")[0])
    return mod is not None and not isinstance(mod, _CONTAINERS) and isinstance(parent, _CONTAINERS)


def _is_block_boundary(model, a_stack, b_stack) -> bool:
    """No repeated block spans the cut, or the innermost module spanning it is itself a
    container (between two of its children), or the cut is the edge of a repeated block
    nested in the one spanning it (Swin's stages hold their blocks in a ``ModuleList``, which
    a module stack does not list: the cut between ``layers.0.blocks.0`` and
    ``layers.0.blocks.1`` is spanned by ``layers.0`` and is still a layer's edge)."""
    common = []
    for x, y in zip(a_stack, b_stack):
        if x != y:
            break
        common.append(x)
    if not common:
        return True
    inner = _submodule(model, common[-1])
    if isinstance(inner, _CONTAINERS):
        return True
    if not any(_is_block(model, path) for path in common):
        return True
    return any(_in_stack(model, path) for path in a_stack[len(common):] + b_stack[len(common):])


def _in_stack(model, path: str) -> bool:
    """A layer of a repeated stack: a block whose container holds another of its class (not
    the parts of a ``Sequential`` of different modules, as ConvNeXt's downsampling)."""
    if not _is_block(model, path):
        return False
    mod = _submodule(model, path)
    parent = _submodule(model, path.rpartition(".")[0])
    return sum(type(m) is type(mod) for m in parent.children()) >= 2


def _choose(model, order, facts, cuts, granularity) -> list:
    if granularity == "fine":
        return list(cuts)
    if granularity == "block":
        pos = {n: i for i, n in enumerate(order)}
        at = {a: p for p, a in cuts}
        out = []
        for p, a in cuts:
            first_user = min((pos[u] for u in a.users if u in pos and pos[u] >= p), default=p)
            if _is_block_boundary(model, _stack(a), _stack(order[first_user])):
                # a layer's output that is a view of its last result (OPT's
                # ``(residual + h).view(shape)``): cut before the views, so that the stage
                # returns new memory and the next one starts with the views (a compiled
                # checkpoint keeps a region's output only where it is no view)
                r = a
                while facts[r].alias is not None and facts[r].alias in at:
                    r = facts[r].alias
                q = at.get(r, p)
                if q < p and all(facts[n].alias is not None for n in order[q:p]):
                    p, a = q, r
                if not out or out[-1] != (p, a):
                    out.append((p, a))
        return out
    n = granularity
    weight = [facts[v].size for v in order]
    prefix = [0]
    for w in weight:
        prefix.append(prefix[-1] + w)
    total = prefix[-1] or 1
    chosen, last_p = [], 0
    for j in range(1, n):
        target = j * total / n
        best = min((c for c in cuts if c[0] > last_p), default=None,
                   key=lambda c: abs(prefix[c[0]] - target))
        if best is None:
            break
        if chosen and best == chosen[-1]:
            continue
        chosen.append(best)
        last_p = best[0]
    return chosen


def _distinct(cuts) -> list:
    """One cut per crossing activation: the positions between which only constants are
    computed cut the same place (the first is kept: constants go to the later stage)."""
    out, seen = [], set()
    for p, a in cuts:
        if a not in seen:
            seen.add(a)
            out.append((p, a))
    return out


def _drop_view_stages(facts, x0, primary, chosen) -> list:
    """Merge any stage whose output is a view of its input into the next stage."""
    kept, prev = [], _root(facts, x0)
    for p, a in chosen:
        r = _root(facts, a)
        if r is not prev:
            kept.append((p, a))
            prev = r
    while kept and _root(facts, primary) is _root(facts, kept[-1][1]):
        kept.pop()
    return kept


# ------------------------------------------------------------------------ building
class _StageBuilder:
    """Builds the stage GraphModules from the plan (one fx.Graph per stage)."""

    def __init__(self, model, traced: _Traced, facts, plan: _Plan, primary):
        self.model = model
        self.traced = traced
        self.facts = facts
        self.plan = plan
        self.primary = primary
        self.ctx = _Context()
        bounds = [0] + plan.cuts + [len(plan.order)]
        self.stage_of = {}
        for k in range(len(bounds) - 1):
            for n in plan.order[bounds[k]:bounds[k + 1]]:
                self.stage_of[n] = k
        self.stage_of[traced.x0] = 0
        self.bounds = bounds

    def _handed_on(self, n) -> bool:
        """n is a constant read by a later stage than the one computing it."""
        k = self.stage_of[n]
        return any(self.stage_of.get(u, -1) > k for u in n.users)

    def build(self, k: int) -> fx.GraphModule:
        tr, order = self.traced, self.plan.order
        nodes = order[self.bounds[k]:self.bounds[k + 1]]
        inp = tr.x0 if k == 0 else self.plan.acts[k - 1]
        out = self.primary if k == len(self.bounds) - 2 else self.plan.acts[k]
        g = fx.Graph()
        root: dict = {}
        env: dict = {}
        ctx_node = []
        x = g.placeholder("x")
        if k == 0 and tr.method == "export":
            x = g.call_function(_check_input, (x, tuple(tr.ph_values[tr.x0].shape),
                                               tr.ph_values[tr.x0].dtype))
        env[inp] = x

        def ctx():
            if not ctx_node:
                root[_CTX] = self.ctx
                ctx_node.append(g.get_attr(_CTX))
            return ctx_node[0]

        def arg(n):
            if n in env:
                return env[n]
            if n.op == "get_attr":
                try:
                    root[n.target] = _attr(self.model, n.target)
                    env[n] = g.get_attr(n.target)
                except AttributeError:  # a constant torch.export lifted out of the forward
                    # (a tensor the forward makes, as GPT-Neo's mask value): the stage keeps
                    # it under its own name, not on the model's module
                    name = "_remat_const_" + n.target.replace(".", "_")
                    root[name] = _attr(self.traced.gm, n.target)
                    env[n] = g.get_attr(name)
            elif n.op == "placeholder" and n in tr.fixed:
                name = f"_remat_input_{tr.fixed[n]}".replace(" ", "_")
                root[name] = tr.ph_values[n]
                env[n] = g.get_attr(name)
            elif n.op == "placeholder" and n is not tr.x0:
                return tr.ph_values[n]  # a plain constant input, baked in
            else:
                env[n] = g.call_method("get", (ctx(), n.name))
            return env[n]

        if k == 0 and not self.facts[tr.x0].grad and self._handed_on(tr.x0):
            g.call_method("put", (ctx(), tr.x0.name, x))
        for n in nodes:
            env[n] = g.node_copy(n, arg)
            if not self.facts[n].grad and self._handed_on(n):
                g.call_method("put", (ctx(), n.name, env[n]))
        g.output(env[out])
        return self._module(root, g, k, nodes)

    def _module(self, root: dict, g: fx.Graph, k: int, nodes) -> fx.GraphModule:
        for n in g.nodes:
            if n.op == "call_module":
                root[n.target] = _attr(self.model, n.target)
        gm = fx.GraphModule(root, g, class_name="CapturedStage")
        # Read parameters and buffers through their ORIGINAL owner module, so that moving
        # the model (.to) or reassigning a buffer is seen by the stage.
        for n in g.nodes:
            if n.op != "get_attr" or n.target == _CTX or n.target.startswith("_remat_"):
                continue
            owner_path = n.target.rpartition(".")[0]
            owner = _submodule(self.model, owner_path)
            if owner_path and owner is not None:
                parent_path, _, name = owner_path.rpartition(".")
                setattr(gm.get_submodule(parent_path), name, owner)
        for name in list(gm._buffers):
            if name.startswith("_remat_"):
                gm._non_persistent_buffers_set.add(name)
        gm.label = _label(self.model, nodes, self.facts, self.plan.order)
        gm.index = k
        return gm


def _label(model, nodes, facts, order) -> str:
    """The modules a stage runs, by their paths in the model: for each of its activations,
    the outermost module on its stack whose nodes are all in this stage (a whole layer:
    ``transformer.h.3``), else the innermost one (part of a layer: ``transformer.h.3.attn``),
    each named once, in order, a module left out when some of its submodules are named."""
    # views make no memory and do not count (a layer's closing view runs in the next stage)
    every, mine = {}, {}
    for n in order:
        for p in _stack(n) if facts[n].alias is None else ():
            every[p] = every.get(p, 0) + 1
    for n in nodes:
        for p in _stack(n) if facts[n].alias is None else ():
            mine[p] = mine.get(p, 0) + 1
    out = []
    for n in nodes:
        st = _stack(n)
        if not st or not facts[n].grad or facts[n].alias is not None:
            continue
        name = next((p for p in st if mine.get(p) == every.get(p)), st[-1])
        if name not in out:
            out.append(name)
    # a module whose submodules are named says no more than they do (a layer's own code:
    # its residual additions)
    out = [p for p in out if not any(q.startswith(p + ".") for q in out)]
    return ", ".join(out) if out else "(top level)"


# ------------------------------------------------------------------------ the chain
class StageChain(nn.Module):
    """A model captured as a chain of stages (see :func:`to_stages`).

    The chain shares the model's parameter, buffer and submodule registries: ``parameters()``,
    ``state_dict()`` (same keys), ``load_state_dict``, ``.to()`` and ``train()`` act on the
    model itself.  The stages (``chain.stages``, or iterate the chain) are what the profiler
    and executor run; ``chain(x0)`` runs them in order and returns the chain's output (the
    model's chosen output tensor).

    Attributes
    ----------
    stages : list of ``torch.fx.GraphModule``, one tensor in and one out; ``stage.label``
        names the module(s) it covers.
    original : the captured model.
    example_input : x_0 of the capture.
    method : ``"modules"`` (at the layers, eager), ``"fx"`` or ``"export"``.
    valid_cuts : how many distinct valid cuts the graph has (``granularity="fine"`` takes
        them all: ``valid_cuts + 1`` stages).
    fixed_inputs : dict name -> tensor, the model's other tensor inputs installed now (the
        example's, or the last call's).  They belong to each call: ``chain(x, attention_mask=
        ..., labels=...)`` passes them (every one; a call without them raises), see
        :mod:`.call_inputs`.
    """

    def __init__(self, model: nn.Module, stages: list, *, example_input, method: str,
                 granularity, valid_cuts: int, fixed: dict):
        super().__init__()
        for name in ("_parameters", "_buffers", "_modules", "_non_persistent_buffers_set"):
            object.__setattr__(self, name, getattr(model, name))
        object.__setattr__(self, "original", model)
        object.__setattr__(self, "stages", list(stages))
        self.example_input = example_input
        self.method = method
        self.granularity = granularity
        self.valid_cuts = valid_cuts
        self.captured_training = model.training
        self.training = model.training
        self._fixed = dict(fixed)
        self._inputs = ChainInputs(self._fixed, self.stages, CaptureError)
        self._device = _device_of(self) or example_input.device

    def __len__(self) -> int:
        return len(self.stages)

    def __iter__(self):
        return iter(self.stages)

    def __getitem__(self, k):
        return self.stages[k]

    @property
    def labels(self) -> list:
        return [s.label for s in self.stages]

    @property
    def fixed_inputs(self) -> dict:
        """The other inputs installed now: the example's, or the last call's."""
        return {name: self._inputs.current(name) for name in self._fixed}

    def set_inputs(self, **tensors) -> None:
        """Install other inputs (e.g. ``attention_mask=``) for the NEXT call only (the
        call need not repeat them; the one after must give its own).  Prefer passing them
        with the call: ``chain(x, attention_mask=...)``."""
        self._inputs.set_next(tensors)

    def forward(self, x, **others):
        """The stages in order on ``x``; ``others``: the chain's other inputs for this call
        (every one, of the captured shapes; see :mod:`.call_inputs`)."""
        self._inputs.take(others, "chain")
        if in_other_mode(self):  # an exported graph keeps its capture's mode (export_mode)
            return self.original_forward(x)
        return self._run(x)

    def _run(self, x):
        for s in self.stages:
            x = s(x)
        return x

    def original_forward(self, x0, **others):
        """The captured model itself on input ``x0`` (the other inputs: ``others``, by
        default the installed ones, :attr:`fixed_inputs`), returning the tensor the chain
        outputs: the reference the chain answers to."""
        args, kwargs, (kind, key), index = self._call
        args, kwargs = list(args), dict(kwargs)
        self._inputs.check(others)
        for name, t in dict(self.fixed_inputs, **others).items():
            if name.startswith("input "):
                args[int(name.split()[1])] = t
            else:
                kwargs[name] = t
        if kind == "a":
            args[key] = x0
        else:
            kwargs[key] = x0
        return pytree.tree_leaves(self.original(*args, **kwargs))[index]

    def train(self, mode: bool = True):
        # an export chain in another mode than its capture's runs the model (export_mode)
        super().train(mode)
        self.original.training = mode
        for s in self.stages:
            s.train(mode)
        return self

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        for s in self.stages:  # the stages' own buffers: fixed inputs, export constants
            for name, b in list(s._buffers.items()):
                if b is not None:
                    s._buffers[name] = fn(b)
        self._inputs.moved(fn)
        device = _device_of(self)
        if device is not None and device != self._device:
            for s in self.stages:
                if isinstance(s, fx.GraphModule):
                    _retarget(s, self._device, device)
                elif hasattr(s, "runner"):
                    s.runner.retarget(self._device, device)
            self._device = device
        return self

    def extra_repr(self) -> str:
        return (f"{len(self.stages)} stages by {self.method} ({self.granularity}; "
                f"{self.valid_cuts} valid cuts): " + " | ".join(self.labels))


def _device_of(module: nn.Module):
    t = next(module.parameters(), None)
    if t is None:
        t = next(module.buffers(), None)
    return None if t is None else t.device


def _retarget(stage: fx.GraphModule, old: torch.device, new: torch.device) -> None:
    """Rewrite the devices written into a stage's graph (``torch.export`` records e.g.
    ``arange(..., device=cpu)``) when the chain moves from ``old`` to ``new``."""
    def swap(v):
        if isinstance(v, torch.device) and v == old:
            return new
        return v

    changed = False
    for n in stage.graph.nodes:
        args = pytree.tree_map(swap, n.args)
        kwargs = pytree.tree_map(swap, n.kwargs)
        if args != n.args or kwargs != n.kwargs:
            n.args, n.kwargs = args, kwargs
            changed = True
    if changed:
        stage.recompile()


# ------------------------------------------------------------------------ entry point
def _check_options(granularity, method):
    if isinstance(granularity, bool) or not (
            granularity in GRANULARITIES or (isinstance(granularity, int) and granularity >= 1)):
        raise CaptureError(f"granularity = {granularity!r} must be one of "
                           f"{', '.join(GRANULARITIES)} or an integer >= 1 (at most that many stages)")
    if method not in METHODS:
        raise CaptureError(f"method = {method!r} is unknown (expected one of {', '.join(METHODS)})")


def _capture(model, args, kwargs, x0, method, seed, ref_leaves, index):
    """Trace with each method in turn; return (traced, facts, primary node) of the first
    whose graph reproduces the model's output bit for bit."""
    methods = ("fx", "export") if method == "auto" else (method,)
    failures = []
    for m in methods:
        try:
            tr = (_trace_fx if m == "fx" else _trace_export)(model, args, kwargs, x0)
        except Exception as e:  # noqa: BLE001 - any tracing failure means: try the next method
            first = (str(e).strip().splitlines() or [""])[0][:300]
            failures.append(f"{m}: {type(e).__name__}: {first}")
            continue
        if tr.x0 is None:
            failures.append(f"{m}: the first input does not reach the traced graph")
            continue
        leaves = tr.outputs
        if len(leaves) != len(ref_leaves) or not isinstance(leaves[index], fx.Node):
            failures.append(f"{m}: the traced output has another structure than the model's")
            continue
        primary = leaves[index]
        vals = {n: _fresh_x0(v) if v is x0 else
                (v.detach().clone() if isinstance(v, torch.Tensor) else v)
                for n, v in tr.ph_values.items()}
        probe = _Probe(tr.gm, vals, {primary}, x0.device)
        phs = [n for n in tr.gm.graph.nodes if n.op == "placeholder"]
        with _kept(model, x0.device, seed), torch.enable_grad():
            probe.run(*[vals[n] for n in phs])
        got = probe.facts[primary].value
        if not _reproduces(got, ref_leaves[index]):
            failures.append(f"{m}: the traced graph's output differs from the model's")
            continue
        probe.facts[primary].value = None
        return tr, probe.facts, primary
    raise CaptureError("cannot capture the model as a graph: " + "; ".join(failures)
                       + ". Make the forward traceable (no Python control flow on tensor values; "
                         "for transformers models pass use_cache=False), or split the model by "
                         "hand into an nn.Sequential or a list of stage modules")


def _reproduces(got, want) -> bool:
    """Bit for bit; on a GPU without deterministic algorithms, a kernel may reduce in another
    order from run to run, so there only to float rounding (with a warning)."""
    if not isinstance(got, torch.Tensor) or got.shape != want.shape or got.dtype != want.dtype:
        return False
    if torch.equal(got, want):
        return True
    if want.device.type == "cuda" and not torch.are_deterministic_algorithms_enabled() \
            and torch.allclose(got, want, rtol=1e-5, atol=1e-6):
        warnings.warn("the captured graph reproduces the model's output only to rounding "
                      "(nondeterministic GPU kernels); torch.use_deterministic_algorithms(True) "
                      "makes the check exact", stacklevel=3)
        return True
    return False


def _fresh_x0(x0):
    c = x0.detach().clone()
    if c.is_floating_point() or c.is_complex():
        c.requires_grad_(True)
    return c


def _seam_chain(model, args, kwargs, x0, index, ref_leaves, seed, strict):
    """The chain cut at the model's own layers (:mod:`.seams`), checked against the model's
    output; None (or, when ``strict``, a CaptureError) when the model has no usable stack."""
    slot = ("a", 0) if args else ("k", next(iter(kwargs)))
    fixed = {}
    for k, v in enumerate(args):
        if isinstance(v, torch.Tensor) and v is not x0:
            fixed[f"input {k}"] = v
    for k, v in kwargs.items():
        if isinstance(v, torch.Tensor) and v is not x0:
            fixed[k] = v
    why = "the stages do not reproduce the model's output"
    for dense in (False, True):
        a, kw = _clone_inputs(args, kwargs, x0)
        try:
            with _kept(model, x0.device, seed):
                stages, runner = seams.build_stages(model, a, kw, slot, index, dense)
        except Exception as e:  # noqa: BLE001 - SeamError, or the model's forward failed
            if strict:
                raise CaptureError(f"cannot capture {type(model).__name__} at its layers: {e}") from None
            return None
        del a, kw
        runner.args = tuple(args)
        runner.kwargs = dict(kwargs)
        for s in stages:
            s.train(model.training)
        chain = StageChain(model, stages, example_input=x0, method="modules",
                           granularity="block", valid_cuts=len(stages) - 1, fixed=fixed)
        runner.fixed = chain._fixed
        try:
            with _kept(model, x0.device, seed), torch.enable_grad():
                got = chain(_fresh_x0(x0), **fixed)
        except Exception as e:  # noqa: BLE001 - a stand-in the forward cannot read: try dense
            why = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"
            continue
        if _reproduces(got, ref_leaves[index]):
            chain._call = (tuple(args), dict(kwargs), slot, index)
            return chain
        why = "the stages do not reproduce the model's output"
    if strict:
        raise CaptureError(f"cannot capture {type(model).__name__} at its layers: {why}")
    return None


@capture_errors
def to_stages(model: nn.Module, example_inputs, *, granularity="block", output=None,
              method: str = "auto", seed: int = 0, check: bool = True) -> StageChain:
    """Capture ``model`` as a chain of stages that the profiler and executor accept.

    Parameters
    ----------
    model : any ``nn.Module``.  Capture in the mode you will train in (``model.train()``);
        for a comparison with the plain model, ``eval()`` or dropout 0.
    example_inputs : a tensor, a tuple of positional inputs, or a dict of keyword inputs.
        The first one is the chain's input x_0 (a float input, or token ids); the other
        tensors are fixed inputs (:meth:`StageChain.set_inputs`), other values (``None``,
        ``use_cache=False``) are fixed at capture.
    granularity : ``"block"`` (default: one stage per layer of the model's repeated stack,
        run eagerly, :mod:`.seams`; without a stack, one per block of its graph), ``"fine"``
        (every valid cut of the graph) or an int n (at most n stages of balanced size).
        See the module docstring.
    output : which tensor of the model's output is the chain's output: default the output
        itself if it is a tensor, else ``.logits``, else ``.last_hidden_state``, else the
        first tensor; a key (str) or a leaf index (int) of the output's pytree.
    method : ``"auto"`` (at the layers, then fx, then export), ``"modules"`` (at the layers
        only), ``"fx"`` or ``"export"``.
    seed : random seed of the capture's check runs (dropout draws the same masks in both).
    check : run the chain once and require the model's output bit for bit.

    Returns
    -------
    StageChain
        Usable wherever an ``nn.Sequential`` of stages is: ``profile(chain, chain.example_input,
        loss_fn)``, :class:`~remat_theory.torch.executor.ScheduleExecutor`.

    Raises
    ------
    CaptureError
        An input is not a tensor, neither method can trace the model (both failures are
        named), no valid cut exists, or the model's forward fails (any failure is a
        CaptureError, :mod:`.capture_guard`).  The caller's tensors are never changed.

    Example
    -------
    >>> chain = to_stages(gpt2, input_ids)                       # doctest: +SKIP
    >>> c = profile(chain, chain.example_input, loss_fn)          # doctest: +SKIP
    """
    if not isinstance(model, nn.Module):
        raise CaptureError(f"model must be an nn.Module, got {type(model).__name__}")
    _check_options(granularity, method)
    args, kwargs, _, x0 = _inputs(model, example_inputs)
    args, kwargs, x0 = detached_inputs(args, kwargs, x0)  # never the caller's tensor
    a, kw = _clone_inputs(args, kwargs, x0)
    try:
        with _kept(model, x0.device, seed), torch.enable_grad():
            ref = model(*a, **kw)
    except RuntimeError as e:  # it sets requires_grad on its input (capture_guard)
        if not refuses_grad_input(e):
            raise
        a, kw = _clone_inputs(args, kwargs, None)
        with _kept(model, x0.device, seed), torch.enable_grad():
            ref = model(*a, **kw)
    index = _primary_index(ref, output)
    ref_leaves = [t.detach() if isinstance(t, torch.Tensor) else t for t in pytree.tree_leaves(ref)]
    del ref, a, kw
    if method in ("auto", "modules") and granularity == "block":
        chain = _seam_chain(model, args, kwargs, x0, index, ref_leaves, seed, method == "modules")
        if chain is not None:
            return chain
    tr, facts, primary = _capture(model, args, kwargs, x0, method, seed, ref_leaves, index)
    if not facts[primary].grad:
        raise CaptureError("the chosen output does not depend differentiably on the input or "
                           "on any parameter: there is nothing to train")
    keep = _keep(tr.gm.graph, facts, primary)
    order = [n for n in tr.gm.graph.nodes
             if n in keep and n.op not in ("placeholder", "get_attr", "output")]
    cuts, least = _valid_cuts(order, facts, tr.x0, primary, keep)
    distinct = _distinct(cuts)
    cuts = _drop_view_stages(facts, tr.x0, primary, distinct)
    if not cuts:
        raise CaptureError(
            f"no valid cut in {type(model).__name__}: at every point of its forward at least "
            f"{max(least, 2)} activations needing gradients are live (or the one live is "
            f"modified in place later), so it is one stage; split it by hand into an "
            f"nn.Sequential or a list of stage modules")
    # a layer's output is often a view of its last operation's result (OPT's
    # ``(residual + h).view(shape)``): the cut after the view is the layer's edge and the
    # one before it is not, so the block rule sees both, and the views are merged after
    chosen = _choose(model, order, facts, distinct if granularity == "block" else cuts,
                     granularity)
    chosen = _drop_view_stages(facts, tr.x0, primary, chosen)
    plan = _Plan(order, [p for p, _ in chosen], [a for _, a in chosen], len(cuts))
    builder = _StageBuilder(model, tr, facts, plan, primary)
    stages = [builder.build(k) for k in range(len(plan.cuts) + 1)]
    for s in stages:
        s.train(model.training)
    if tr.method == "export":
        guard_stages(stages, model, model.training)
    chain = StageChain(model, stages, example_input=x0, method=tr.method,
                       granularity=granularity, valid_cuts=len(cuts),
                       fixed={name: tr.ph_values[n] for n, name in tr.fixed.items()})
    chain._call = (tuple(args), dict(kwargs), ("a", 0) if args else ("k", next(iter(kwargs))), index)
    if check:
        with _kept(model, x0.device, seed), torch.enable_grad():
            got = chain(_fresh_x0(x0), **chain._inputs.example)
        if not _reproduces(got, ref_leaves[index]):
            raise CaptureError("the captured stages do not reproduce the model's output (please "
                               "report this model); split it by hand meanwhile")
    return chain
