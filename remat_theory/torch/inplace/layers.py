"""Which module calls of a model are its layers, and how one call hands on to the next.

A *layer* here is one call of a module of the model's repeated stack (transformers'
``GradientCheckpointingLayer`` where the model marks them, else the children of a
``ModuleList``/``Sequential`` found by :func:`remat_theory.torch.capture.seams.find_seams`; a module
called several times in a row, as ALBERT's one shared layer group, gives one layer per
call; a module that alone joins two layers that are not chained, as Swin's patch merging
between its stages, is a layer too).  The in-place API identifies a layer by its call index in the forward, not by the
module, so that a shared module is several stages.

:class:`LayerCall` records, for one call: where its hidden state is among its arguments
(the tensor needing a gradient that the previous layer returned), which leaf of its output
the next layer reads, and whether that hand-off is direct (``chained``: the next layer
receives exactly that tensor, no code of the model's in between).  A checkpointed segment
can only span direct hand-offs: its recomputation calls the layers one after the other.
"""
from __future__ import annotations


import torch
from torch import nn
from torch.utils import _pytree as pytree

from remat_theory.model.errors import RematError
from remat_theory.torch.capture.seams import CONTAINERS, find_seams, hidden_slot, inside, probe
from remat_theory.torch.inplace.records import LayerCall


__all__ = ["LayerCall", "find_layers", "hidden_of", "leaf_of", "with_hidden", "is_cache"]


def is_cache(value) -> bool:
    """A key/value cache object (transformers' ``Cache``): never handed to a recomputation."""
    return any(t.__name__ == "Cache" for t in type(value).__mro__) and hasattr(value, "update")


def hidden_of(slot, args, kwargs):
    return args[slot[1]] if slot[0] == "a" else kwargs[slot[1]]


def with_hidden(slot, args, kwargs, x):
    """(args, kwargs) with the hidden state replaced by ``x``."""
    if slot[0] == "a":
        args = args[:slot[1]] + (x,) + args[slot[1] + 1:]
    else:
        kwargs = dict(kwargs)
        kwargs[slot[1]] = x
    return args, kwargs


def leaf_of(output, index: int):
    return pytree.tree_leaves(output)[index]


def _chained(a, b) -> bool:
    """Call b's hidden state is a leaf of call a's output (no code in between)."""
    h = hidden_of(hidden_slot(b), b.args, b.kwargs)
    return any(t is h for t in pytree.tree_leaves(a.output))


def _repeated_calls(calls) -> list:
    """A module called two or more times in a row, each call reading the previous one's
    output (ALBERT's shared layer group): the outermost such group's calls, or []."""
    best: list = []
    by_module: dict = {}
    for c in calls:
        if c.exit >= 0 and hidden_slot(c) is not None and not isinstance(c.module, CONTAINERS):
            by_module.setdefault(id(c.module), []).append(c)
    for group in by_module.values():
        group.sort(key=lambda c: c.enter)
        if len(group) < 2 or not all(a.exit < b.enter and _chained(a, b)
                                     for a, b in zip(group, group[1:])):
            continue
        if (len(group), -group[0].depth) > (len(best), -(best[0].depth if best else 0)):
            best = group
    return best


def _bridge(a, b, calls):
    """The outermost module call between layer calls a and b that reads a's output as its
    hidden state and whose output b reads (a downsampling between two stages: Swin's patch
    merging, ConvNeXt's), or None."""
    h_b = hidden_of(hidden_slot(b), b.args, b.kwargs)
    out_a = [t for t in pytree.tree_leaves(a.output) if isinstance(t, torch.Tensor)]
    best = None
    for c in calls:
        if not (c.enter > a.exit and 0 <= c.exit < b.enter) or hidden_slot(c) is None:
            continue
        if not any(t is hidden_of(hidden_slot(c), c.args, c.kwargs) for t in out_a):
            continue
        if not any(t is h_b for t in pytree.tree_leaves(c.output)):
            continue
        if best is None or c.depth < best.depth:
            best = c
    return best


def _with_bridges(seams, calls) -> list:
    """The layer calls, with a bridge (:func:`_bridge`) made a layer of its own between two
    layers that are not chained: the model's code between them is then one module, which a
    checkpointed segment can span and recompute like a layer (its tape is not held beside
    the chain for the whole step)."""
    out = []
    for k, s in enumerate(seams):
        out.append(s)
        if k + 1 < len(seams) and not _chained(s, seams[k + 1]):
            c = _bridge(s, seams[k + 1], calls)
            if c is not None:
                out.append(c)
    return out


def find_layers(model: nn.Module, args, kwargs) -> tuple:
    """Probe ``model`` once on (args, kwargs) and return (layers, output): one
    :class:`LayerCall` per layer call, in call order.  Raises RematError if the model has no
    repeated stack."""
    calls, out = probe(model, args, kwargs)
    seams = find_seams(model, calls)
    shared = _repeated_calls(calls)
    if len(shared) > len(seams) and not any(inside(s, c) for s in shared for c in seams):
        seams = shared
    if not seams:
        raise RematError(f"{type(model).__name__} has no repeated stack of layers that take "
                         f"the hidden state needing a gradient (a ModuleList or Sequential of "
                         f"blocks, or transformers' layers): wrap its blocks in an "
                         f"nn.ModuleList, or use CheckpointedSequential on a list of stages")
    for a, b in zip(seams, seams[1:]):
        if inside(a, b) or inside(b, a) or a.exit > b.enter:
            raise RematError(f"layers {a.path} and {b.path} overlap")
    seams = _with_bridges(seams, calls)
    layers = []
    for k, s in enumerate(seams):
        slot = hidden_slot(s)
        leaves = pytree.tree_leaves(s.output)
        grads = [i for i, t in enumerate(leaves) if isinstance(t, torch.Tensor) and t.requires_grad]
        if not grads:
            raise RematError(f"layer {s.path} returns no tensor needing a gradient")
        leaf, chained = grads[0], False
        if k + 1 < len(seams):
            nxt = hidden_of(hidden_slot(seams[k + 1]), seams[k + 1].args, seams[k + 1].kwargs)
            direct = [i for i, t in enumerate(leaves) if t is nxt]
            if direct:
                leaf, chained = direct[0], True
        layers.append(LayerCall(s.path, s.module, slot, leaf, chained))
    return layers, out
