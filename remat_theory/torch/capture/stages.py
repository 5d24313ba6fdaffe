"""How a network becomes a chain of stages.

A stage is one ``nn.Module`` that maps one tensor to one tensor.  ``split_stages`` accepts
a :class:`~remat_theory.torch.capture.chain.StageChain` (any model, captured as a graph and cut
by :func:`~remat_theory.torch.capture.chain.to_stages`), an ``nn.Sequential`` (nested
``nn.Sequential`` containers are flattened into their children, so
``Sequential(Sequential(a, b), c)`` has stages a, b, c) or an explicit list of modules
(each element is one stage, as given; wrap several modules in a custom module or in an
``nn.Sequential`` inside the list to keep them together).  Any other module (a residual
block, an encoder layer) is one stage.
"""
from __future__ import annotations

import contextlib

import torch
from torch import nn

from remat_theory.model.errors import RematError


class Staged(nn.Module):
    """A module made of a chain of stages, held in its ``stages`` (an ``nn.ModuleList``):
    :class:`~remat_theory.torch.capture.chain.StageChain` is one.  :func:`split_stages`
    takes its stages as they are."""

    stages: nn.ModuleList


def _flatten(seq: nn.Sequential, out: list) -> None:
    for m in seq.children():
        if isinstance(m, nn.Sequential):
            _flatten(m, out)
        else:
            out.append(m)


def split_stages(model) -> list:
    """The stages (modules) of ``model``: a :class:`StageChain` (its captured stages), an
    ``nn.Sequential`` (flattened) or a list."""
    if isinstance(model, Staged):
        stages = list(model.stages)
    elif isinstance(model, nn.Sequential):
        stages: list = []
        _flatten(model, stages)
    elif isinstance(model, (list, tuple, nn.ModuleList)):
        stages = list(model)
        for k, m in enumerate(stages):
            if not isinstance(m, nn.Module):
                raise RematError(f"stage {k} is a {type(m).__name__}, not an nn.Module")
    else:
        raise RematError(f"model must be an nn.Sequential or a list of stage modules (or a "
                         f"StageChain), got {type(model).__name__}; capture any model as a chain "
                         f"of stages with remat_theory.torch.to_stages(model, example_input)")
    if not stages:
        raise RematError("the model has no stages (an empty nn.Sequential or list)")
    return stages


def stage_parameters(stages) -> list:
    """Distinct parameters of the stages (shared ones, as in an unrolled RNN, listed once)."""
    seen, out = set(), []
    for s in stages:
        for p in s.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out


def stage_buffers(stages) -> list:
    seen, out = set(), []
    for s in stages:
        for b in s.buffers():
            if id(b) not in seen:
                seen.add(id(b))
                out.append(b)
    return out


def running_stat_buffers(stage: nn.Module) -> list:
    """Buffers a training-mode forward updates (BatchNorm/InstanceNorm running statistics).

    A recomputation must not update them a second time; the executor saves and restores
    these around every forward of a stage but its first.
    """
    out = []
    for m in stage.modules():
        if getattr(m, "track_running_stats", False) and m.training:
            out.extend(b for b in m.buffers(recurse=False) if b is not None)
    return out


def rng_state(device) -> tuple:
    """The random generators a stage on ``device`` draws from: (CPU state, the CUDA device's
    state or None).  The one home of random-state saving in the torch layer."""
    device = torch.device(device)
    return torch.get_rng_state(), (torch.cuda.get_rng_state(device) if device.type == "cuda" else None)


def set_rng_state(state: tuple, device) -> None:
    """Restore what :func:`rng_state` saved."""
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], torch.device(device))


def rng_changed(before: tuple, device) -> bool:
    """Whether a generator moved since ``before`` (:func:`rng_state`): a random draw."""
    return any(a is not None and not torch.equal(a, b) for a, b in zip(before, rng_state(device)))


@contextlib.contextmanager
def model_state_kept(stages, device=None):
    """Run a block and then restore buffers, parameter ``.grad`` and RNG states as they were.

    Used by the profiler, whose repeated forwards would otherwise update BatchNorm running
    statistics, accumulate gradients and advance the random generators.
    """
    params = stage_parameters(stages)
    buffers = stage_buffers(stages)
    with torch.no_grad():
        saved_buffers = [b.clone() for b in buffers]
    saved_grads = [None if p.grad is None else p.grad.clone() for p in params]
    devices = [device] if device is not None and torch.device(device).type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        try:
            yield
        finally:
            with torch.no_grad():
                for b, s in zip(buffers, saved_buffers):
                    b.copy_(s)
            for p, g in zip(params, saved_grads):
                p.grad = g
