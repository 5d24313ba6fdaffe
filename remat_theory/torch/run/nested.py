"""A nested schedule run as ordinary autograd plus nested non-reentrant checkpoints
(:func:`run_nested`), the form :class:`~remat_theory.torch.modules.checkpointed.CheckpointedSequential`
and the in-place API run; the tree itself is :mod:`remat_theory.torch.plan.nested_form`."""
from __future__ import annotations

import torch
import torch.utils.checkpoint

from remat_theory.torch.capture.stages import running_stat_buffers
from remat_theory.torch.plan.nested_form import Checkpointed, Kept, Segment, keeps_rng_state


__all__ = ["StageRunner", "run_nested"]


class StageRunner:
    """Which stages have run their first forward in this training step.

    A later forward of the same stage is a recomputation: it must leave BatchNorm-like
    running statistics as they were (:func:`running_stat_buffers`), so that they are updated
    once per step, as without checkpointing.  Random draws are replayed by the checkpoint
    itself (``preserve_rng_state``)."""

    __slots__ = ("stages", "seen")

    def __init__(self, stages) -> None:
        self.stages = stages
        self.seen: set = set()

    def __call__(self, i: int, x):
        stage = self.stages[i]
        if i not in self.seen:
            self.seen.add(i)
            return stage(x)
        buffers = running_stat_buffers(stage)
        if not buffers:
            return stage(x)
        with torch.no_grad():
            saved = [b.clone() for b in buffers]
        try:
            return stage(x)
        finally:  # also when the checkpoint stops a recomputation early, inside the stage
            with torch.no_grad():
                for b, s in zip(buffers, saved):
                    b.copy_(s)


def _segment_function(tree: Segment, run_stage, early_stop: bool, draws=None):
    def replay(x):
        return run_nested(tree, x, run_stage, early_stop, draws)
    return replay


def run_nested(tree: Segment, x: torch.Tensor, run_stage, early_stop: bool = True,
               draws=None) -> torch.Tensor:
    """Run the forward of a nested schedule from x_s to the end of ``tree``.

    Kept stages are plain autograd (their tapes are whatever autograd saves, freed by the
    engine when their backward has run; an output no backward reads is freed as soon as the
    next stage has read it, as the operation table says of an unsaved output); a checkpointed segment is one
    ``torch.utils.checkpoint`` call (non-reentrant) whose function is the segment's own
    nested form, so its recomputation, started by the engine when the backward first needs
    one of its saved tensors, keeps and recomputes exactly what the schedule's replay of the
    segment does.  The backward is autograd's own: ``backward(retain_graph=True)``,
    ``torch.autograd.grad`` and autocast behave as with the plain model.

    ``run_stage(i, x)`` runs stage i (see :class:`StageRunner`).  ``early_stop``: a
    recomputation stops once it has produced every tensor the backward needs (the
    checkpoint's ``early_stop``), which skips the forwards, at the end of a replayed segment,
    whose results nothing saves; the peak memory is the same (measured on the built-in
    networks); False runs every forward the schedule has.

    ``draws``: per stage, whether its forward draws random numbers (the profile's
    ``draws_random``; None: every stage may).  A checkpoint keeps the random generator
    state to replay the draws (``preserve_rng_state``: 5,056 B on the CPU, held until its
    backward) only for a segment where some stage draws; elsewhere the recomputation is the
    same computation without it (:func:`checkpoint_state_bytes` says what the kept states
    hold at each operation)."""
    while True:
        if isinstance(tree, Kept):
            x = run_stage(tree.s, x)
            tree = tree.rest
        elif isinstance(tree, Checkpointed):
            x = torch.utils.checkpoint.checkpoint(
                _segment_function(tree.inner, run_stage, early_stop, draws), x,
                use_reentrant=False, early_stop=early_stop,
                preserve_rng_state=keeps_rng_state(tree, draws))
            tree = tree.rest
        else:
            return x


