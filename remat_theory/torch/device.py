"""Device and thread settings for the torch commands (the command line imports torch only
through this floor)."""
from __future__ import annotations

import torch
from torch import nn

from remat_theory.model.errors import RematError


def resolve_device(device: str, threads: int | None) -> str:
    """``--device`` (auto, cpu, cuda) to a device name, and ``--threads`` applied.
    A missing CUDA device is a one-line error naming the way out."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise RematError(f"--device {device!r}: expected cpu, cuda or auto")
    if device == "cuda" and not torch.cuda.is_available():
        raise RematError("--device cuda: no CUDA device is available (use --device cpu or auto)")
    if threads:
        torch.set_num_threads(threads)
    return device


def is_module(obj) -> bool:
    """Whether ``obj`` is a torch module."""
    return isinstance(obj, nn.Module)


def is_sequential(obj) -> bool:
    """Whether ``obj`` is an ``nn.Sequential`` (its children are taken as the stages)."""
    return isinstance(obj, nn.Sequential)
