"""Capture, second step: where the traced graph may be cut into stages (every cut one tensor
wide, at the model's blocks by default or at every valid point with ``granularity='fine'``), and
the stages built as one ``fx.GraphModule`` each, constants handed on through the chain's
:class:`~remat_theory.torch.capture.carried.Carried` store."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import fx, nn

from remat_theory.torch.capture.carried import Carried
from remat_theory.torch.capture.stages import rng_changed, rng_state
from remat_theory.torch.capture.trace import (Traced, check_input, ptrs, trace_attr, trace_stack,
                                              trace_submodule, trace_tensors)


_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)


_CTX = "_remat_ctx"


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


class Probe(fx.Interpreter):
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
            ins = [(m, t) for m in n.all_input_nodes for t in trace_tensors(self.env[m])]
            versions = [t._version for _, t in ins]
            rng = rng_state(self.device)
            value = super().run_node(n)
            f.rng = rng_changed(rng, self.device)
            f.mutated = tuple({m for (m, t), v in zip(ins, versions) if t._version != v})
            mine = ptrs(value)
            f.alias = next((m for m in n.all_input_nodes if mine & ptrs(self.env[m])), None)
        leaves = trace_tensors(value)
        f.grad = any(t.requires_grad for t in leaves)
        f.tensor = isinstance(value, torch.Tensor)
        f.size = 0 if f.alias is not None else sum(t.numel() for t in leaves)
        if n in self.keep_value:
            f.value = value
        self.facts[n] = f
        return value


# ------------------------------------------------------------------------ planning
@dataclass
class Plan:
    order: list  # kept compute nodes, in graph order
    cuts: list  # positions p: stage boundaries before order[p]
    acts: list  # the activation crossing each cut
    valid: int  # number of valid cuts found


def _root(facts, n):
    while n is not None and facts[n].alias is not None:
        n = facts[n].alias
    return n


def kept_nodes(graph, facts, primary) -> set:
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


def valid_cut_points(order, facts, x0, primary, keep):
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
    mod = trace_submodule(model, path)
    parent = trace_submodule(model, path.rpartition(".")[0])
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
    inner = trace_submodule(model, common[-1])
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
    mod = trace_submodule(model, path)
    parent = trace_submodule(model, path.rpartition(".")[0])
    return sum(type(m) is type(mod) for m in parent.children()) >= 2


def choose(model, order, facts, cuts, granularity) -> list:
    if granularity == "fine":
        return list(cuts)
    if granularity == "block":
        pos = {n: i for i, n in enumerate(order)}
        at = {a: p for p, a in cuts}
        out = []
        for p, a in cuts:
            first_user = min((pos[u] for u in a.users if u in pos and pos[u] >= p), default=p)
            if _is_block_boundary(model, trace_stack(a), trace_stack(order[first_user])):
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


def distinct_cuts(cuts) -> list:
    """One cut per crossing activation: the positions between which only constants are
    computed cut the same place (the first is kept: constants go to the later stage)."""
    out, seen = [], set()
    for p, a in cuts:
        if a not in seen:
            seen.add(a)
            out.append((p, a))
    return out


def drop_view_stages(facts, x0, primary, chosen) -> list:
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
class StageBuilder:
    """Builds the stage GraphModules from the plan (one fx.Graph per stage)."""

    def __init__(self, model, traced: Traced, facts, plan: Plan, primary):
        self.model = model
        self.traced = traced
        self.facts = facts
        self.plan = plan
        self.primary = primary
        self.ctx = Carried(step_held=False)
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
            x = g.call_function(check_input, (x, tuple(tr.ph_values[tr.x0].shape),
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
                    root[n.target] = trace_attr(self.model, n.target)
                    env[n] = g.get_attr(n.target)
                except AttributeError:  # a constant torch.export lifted out of the forward
                    # (a tensor the forward makes, as GPT-Neo's mask value): the stage keeps
                    # it under its own name, not on the model's module
                    name = "_remat_const_" + n.target.replace(".", "_")
                    root[name] = trace_attr(self.traced.gm, n.target)
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
                root[n.target] = trace_attr(self.model, n.target)
        gm = fx.GraphModule(root, g, class_name="CapturedStage")
        # Read parameters and buffers through their ORIGINAL owner module, so that moving
        # the model (.to) or reassigning a buffer is seen by the stage.
        for n in g.nodes:
            if n.op != "get_attr" or n.target == _CTX or n.target.startswith("_remat_"):
                continue
            owner_path = n.target.rpartition(".")[0]
            owner = trace_submodule(self.model, owner_path)
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
        for p in trace_stack(n) if facts[n].alias is None else ():
            every[p] = every.get(p, 0) + 1
    for n in nodes:
        for p in trace_stack(n) if facts[n].alias is None else ():
            mine[p] = mine.get(p, 0) + 1
    out = []
    for n in nodes:
        st = trace_stack(n)
        if not st or not facts[n].grad or facts[n].alias is not None:
            continue
        name = next((p for p in st if mine.get(p) == every.get(p)), st[-1])
        if name not in out:
            out.append(name)
    # a module whose submodules are named says no more than they do (a layer's own code:
    # its residual additions)
    out = [p for p in out if not any(q.startswith(p + ".") for q in out)]
    return ", ".join(out) if out else "(top level)"
