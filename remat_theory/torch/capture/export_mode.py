"""Train/eval mode of a chain captured by ``torch.export``.

An exported graph is specialised to the mode it was captured in: ``self.training`` was
read while tracing, so a training-mode graph draws its dropout masks whatever
``.eval()`` says afterwards.  The chain itself (``chain(x)``) therefore answers in another
mode with the model's own forward (:meth:`StageChain.original_forward`), which computes
what the model computes in that mode; the stages alone (what the profiler, the executor
and :class:`CheckpointedSequential` run) cannot, and refuse to run in another mode with a
:class:`CaptureError` saying what to do, rather than silently computing the captured one.
"""
from __future__ import annotations

import weakref

from remat_theory.model.errors import CaptureError


def _mode(training: bool) -> str:
    return "train" if training else "eval"


def in_other_mode(chain) -> bool:
    """Whether an export-captured ``chain`` (or its model, ``model.eval()``) is now in a
    mode other than the one its graph was captured in."""
    return chain.method == "export" and (
        bool(chain.training) != chain.captured_training
        or bool(chain.original.training) != chain.captured_training)


def guard_stages(stages, model, captured_training: bool) -> None:
    """Make each exported stage refuse to run while it (or ``model``) is in a mode other
    than ``captured_training``: its graph would compute the captured mode."""
    ref = weakref.ref(model)
    captured = bool(captured_training)

    def check(stage, _args):
        m = ref()
        if bool(stage.training) != captured or (m is not None and bool(m.training) != captured):
            raise CaptureError(
                f"this stage was captured by torch.export in {_mode(captured)} mode, which its "
                f"graph keeps (dropout, BatchNorm), and is now run in "
                f"{_mode(not captured)} mode; the chain itself (chain(x)) runs the model's own "
                f"forward in {_mode(not captured)} mode, or capture again after "
                f"model.{_mode(not captured)}() to profile or checkpoint that mode")

    for s in stages:
        s.register_forward_pre_hook(check)
