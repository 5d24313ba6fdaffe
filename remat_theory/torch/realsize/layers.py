"""The layers of a model on fake tensors.

:func:`remat_theory.torch.inplace.layers.find_layers` tells a layer from an in-place module
by storage addresses, which fake tensors do not have (all are 0).  This finder gives the same
:class:`~remat_theory.torch.inplace.layers.LayerCall` list from one probe forward: the
outermost transformers ``GradientCheckpointingLayer`` calls where the model marks its
layers, else the outermost children of an ``nn.ModuleList``/``nn.Sequential`` that holds two
or more modules of their class, each replaced by the layers of a stack inside it whose last
output is its own, as the in-place finder refines them (a ConvNeXt or ResNet stage becomes
its blocks, a ResNet block's own sequence of convolutions stays inside it); each called
once, reading a tensor that needs a gradient and returning new storage.
tests/test_realsize.py checks it against ``find_layers`` on real tensors, family by family.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.utils import _pytree as pytree

from remat_theory.model.errors import RematError
from remat_theory.torch.capture.seams import run_hooked
from remat_theory.torch.inplace.records import LayerCall


__all__ = ["find_layers_fake"]

_CONTAINERS = (nn.ModuleList, nn.Sequential, nn.ModuleDict)


def _slot(a, kw):
    if a and isinstance(a[0], torch.Tensor):
        return ("a", 0) if a[0].requires_grad else None
    for k, v in kw.items():
        if isinstance(v, torch.Tensor) and v.requires_grad:
            return ("k", k)
    return None


def _is_gc(m) -> bool:
    return any(t.__name__ == "GradientCheckpointingLayer" for t in type(m).__mro__)


def _grad_leaf(out):
    return next((t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)
                 and t.requires_grad), None)


def _refine(seams, in_cont, calls, names, inside) -> list:
    """The in-place finder's rule (``capture.seams``): a seam whose output is the last of
    the layers of a stack inside it (a ResNet or ConvNeXt stage that is its blocks, maybe
    after a downsampling) is replaced by those layers, again inside them."""
    out = []
    for s in seams:
        sout = _grad_leaf(s["out"])
        last = [c for c in calls if inside(c, s) and sout is not None and c["out"] is sout]
        inner = None
        for c in sorted(last, key=lambda c: names[id(c["mod"])].count(".")):
            parent = names[id(c["mod"])].rpartition(".")[0]
            kids = [o for o in in_cont if inside(o, s)
                    and names[id(o["mod"])].rpartition(".")[0] == parent]
            if kids and any(k is c for k in kids):
                inner = kids
                break
        out.extend(_refine(inner, in_cont, calls, names, inside) if inner else [s])
    return out


def find_layers_fake(model: nn.Module, args, kwargs) -> list:
    names = {id(m): p for p, m in model.named_modules(remove_duplicate=False)}
    parents = {}
    for p, m in model.named_modules(remove_duplicate=False):
        for c in m.children():
            parents.setdefault(id(c), m)
    calls, stack, clock = [], [], [0]

    def pre(mod, a, kw):
        stack.append(dict(mod=mod, enter=clock[0], a=a, kw=dict(kw), slot=_slot(a, kw)))
        clock[0] += 1

    def post(mod, a, kw, out):
        c = stack.pop()
        c["exit"], c["out"] = clock[0], out
        clock[0] += 1
        calls.append(c)

    run_hooked(model, list(model.modules()), args, kwargs, pre, post)
    count: dict = {}
    for c in calls:
        count[id(c["mod"])] = count.get(id(c["mod"]), 0) + 1

    def new_storage(c):
        h = c["a"][0] if c["slot"][0] == "a" else c["kw"][c["slot"][1]]
        sid = h.untyped_storage()._cdata
        return not any(isinstance(t, torch.Tensor) and t.untyped_storage()._cdata == sid
                       for t in pytree.tree_leaves(c["out"]))

    cand = [c for c in calls if count[id(c["mod"])] == 1 and c["slot"] is not None
            and not isinstance(c["mod"], _CONTAINERS) and new_storage(c)]

    def inside(a, b):
        return b["enter"] < a["enter"] and a["exit"] < b["exit"]

    gc = [c for c in cand if _is_gc(c["mod"])]
    if gc:
        seams = [c for c in gc if not any(inside(c, o) for o in gc if o is not c)]
    else:
        def repeated(c):  # its container holds two or more modules of its class
            parent = parents.get(id(c["mod"]))
            return isinstance(parent, _CONTAINERS) and sum(
                type(k) is type(c["mod"]) for k in parent.children()) >= 2

        cont = [c for c in cand if repeated(c)]
        seams = [c for c in cont if not any(inside(c, o) for o in cont if o is not c)]
        seams = _refine(seams, [c for c in cand if isinstance(parents.get(id(c["mod"])),
                                                               _CONTAINERS)], calls, names,
                        inside)
    if not seams:
        raise RematError(f"{type(model).__name__} has no repeated stack of layers")
    seams.sort(key=lambda c: c["enter"])
    layers = []
    for k, s in enumerate(seams):
        leaves = pytree.tree_leaves(s["out"])
        grads = [i for i, t in enumerate(leaves) if isinstance(t, torch.Tensor) and t.requires_grad]
        if not grads:
            raise RematError(f"layer {names[id(s['mod'])]} returns no tensor needing a gradient")
        leaf, chained = grads[0], False
        if k + 1 < len(seams):
            n = seams[k + 1]
            nxt = n["a"][0] if n["slot"][0] == "a" else n["kw"][n["slot"][1]]
            direct = [i for i, t in enumerate(leaves) if t is nxt]
            if direct:
                leaf, chained = direct[0], True
        layers.append(LayerCall(names[id(s["mod"])], s["mod"], s["slot"], leaf, chained))
    return layers
