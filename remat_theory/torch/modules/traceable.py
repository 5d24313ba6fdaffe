"""A nested schedule in the form ``torch.compile`` traces into one graph (the frontier's
``remat_compiled``): kept stages inline, each checkpointed segment one non-reentrant
``torch.utils.checkpoint``; the compiler's partitioner then frees and recomputes."""
from __future__ import annotations

import functools

import torch
import torch.utils.checkpoint
from torch import fx

from remat_theory.torch.capture.carried import carried_of
from remat_theory.torch.plan.nested_form import Checkpointed, Kept, Segment


def _traceable_segment(tree, stages, x):
    return run_traceable(tree, x, stages)


def _last_putting_stage(stages) -> int:
    """The last stage that hands a constant on through its graph's store (-1: none)."""
    last = -1
    for k, s in enumerate(stages):
        if isinstance(s, fx.GraphModule) and any(n.op == "call_method" and n.target == "put"
                                                 for n in s.graph.nodes):
            last = k
    return last


def traceable_prelude(stages):
    """Prepare captured stages for :func:`run_traceable` under ``torch.compile`` (call once,
    outside the compiled function); returns the ``prelude`` to pass it, or None when no stage
    hands constants on.  A captured stage hands constants (masks, positions) to later stages
    through its chain's :class:`~remat_theory.torch.capture.carried.Carried` store; a constant put inside a checkpoint nested in another
    checkpoint is a side effect torch.compile 2.13 cannot carry out of the two regions (an
    internal error: a node that does not belong to the graph).  Here each store keeps the
    first value of a key (``keep_first``), and the prelude computes the constants first, outside
    every checkpoint, with a no-grad forward of the stages up to the last one that puts (the
    compiler drops the rest of that forward, whose results nothing reads), so that the puts
    inside checkpoints change nothing."""
    stages = list(stages)
    ctxs = [c for c in carried_of(stages) if not c.step_held]
    last = _last_putting_stage(stages)
    if not ctxs or last < 0:
        return None
    for ctx in ctxs:
        ctx.keep_first = True

    def reset():
        for ctx in ctxs:
            ctx.clear()

    def prelude(x):
        reset()
        with torch.no_grad():
            for s in stages[:last + 1]:
                x = s(x)
    prelude.reset = reset
    return prelude


def run_traceable(tree: Segment | None, x: torch.Tensor, stages, prelude=None) -> torch.Tensor:
    """A nested schedule's forward in a form ``torch.compile`` traces into ONE graph: kept
    stages inline, each checkpointed segment one non-reentrant ``torch.utils.checkpoint``
    (nested as the schedule nests them), which the compiler turns into a recompute region of
    the joint graph.  The compiler's partitioner, not the executor, then frees and recomputes:
    the regions are the schedule's, the bytes are the compiler's (measure them).  Used by the
    frontier's ``remat_compiled``::

        tree = ck.plan_for(x).tree
        prelude = traceable_prelude(ck.stages_list)   # captured stages: constants first
        step = torch.compile(lambda: loss_fn(run_traceable(tree, x, ck.stages_list, prelude)))

    No early stop and no BatchNorm guard (the compiled graph runs a mutation once)."""
    if tree is None:  # store-all: the plain stages
        if prelude is not None:
            # each stage puts its constants anew and the later ones read those: a value
            # left from an earlier run would enter the graph as an input of its own, and
            # the compiler would build a mask from it beside the one the putting stage
            # builds from its own (Llama: two float masks saved, 65,536 B each at the
            # frontier's small scale, where the model compiled whole saves one)
            prelude.reset()
        for s in stages:
            x = s(x)
        if prelude is not None:
            prelude.reset()
        return x
    if prelude is not None:
        prelude(x)
    while True:
        if isinstance(tree, Kept):
            x = stages[tree.s](x)
            tree = tree.rest
        elif isinstance(tree, Checkpointed):
            x = torch.utils.checkpoint.checkpoint(
                functools.partial(_traceable_segment, tree.inner, stages), x, use_reentrant=False)
            tree = tree.rest
            if isinstance(tree, Kept):
                x = torch.utils.checkpoint.checkpoint(_handoff, x, use_reentrant=False)
        else:
            return x


def _handoff(x: torch.Tensor) -> torch.Tensor:
    """A recompute region of one view between a checkpointed segment and a kept stage, so
    that the compiler keeps the checkpoint x_k as the schedule does.  AOT autograd's
    partitioner recomputes every operation of a region, the region's output too, and keeps a
    region's output only where a later region reads it; a kept stage reading x_k made it
    rebuild the whole segment in the backward where that stage first needs x_k (ResNet's
    last stage, for its weight gradient), holding the segment's tape through that stage's
    backward: 4.01 MiB against 3.10 predicted.  After a region that ends here, x_k is kept
    and the view is rebuilt from it for free."""
    return x.view(x.shape)
