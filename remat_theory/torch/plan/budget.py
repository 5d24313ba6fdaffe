"""Budgets as users give them (bytes with a unit, a fraction), and the bytes a training
step holds beside the activations (gradients, optimizer state, the engine's reserves)."""
from __future__ import annotations

import numbers

import torch

from remat_theory.model.errors import RematError
from remat_theory.torch.capture.carried import carried_of, carried_tensors
from remat_theory.torch.capture.stages import model_state_kept


_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}

RNG_STATE_BYTES = 5056
"""What one live non-reentrant checkpoint holds on the CPU to replay random draws (the
generator state; measured, see docs/torch.md)."""

STEP_SLACK = 4096
"""Bytes reserved in a step budget for the loss value, the gradient seeding the backward and
the allocator's alignment of small tensors."""

ENGINE_MARGIN = 0.01
"""Fraction of a step budget's activation share held back for the engine's buffers that a
recomputation running inside a backward node meets (measured up to 0.9% on the test
transformer, docs/torch.md)."""


def parse_bytes(text, name: str = "budget") -> int:
    """``"6GiB"``, ``"512 MB"``, ``"1.5e9B"`` or ``"123"`` (bytes) as an int of bytes."""
    if isinstance(text, bool) or not isinstance(text, (str, numbers.Integral)):
        raise RematError(f"{name} = {text!r} must be bytes with a unit, e.g. '6GiB'")
    if isinstance(text, numbers.Integral):
        value = int(text)
    else:
        t = text.strip().lower().replace(" ", "").replace("_", "")
        unit = next((u for u in sorted(_UNITS, key=len, reverse=True) if t.endswith(u)), None)
        number = t[:-len(unit)] if unit else t
        try:
            value = int(float(number) * _UNITS[unit or "b"])
        except ValueError:
            raise RematError(f"{name} = {text!r} is not bytes: write a number and a unit "
                             f"({', '.join(['B', 'KB', 'MB', 'GB', 'KiB', 'MiB', 'GiB'])}), "
                             f"e.g. '6GiB'") from None
    if value <= 0:
        raise RematError(f"{name} = {text!r} must be positive")
    return value


def format_bytes(n: int) -> str:
    """``n`` bytes, with the nearest binary unit beside them."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n} B ({n / size:.2f} {unit})"
    return f"{n} B"


def gradient_bytes(stages) -> int:
    """Bytes of the gradients of the stages' trainable parameters (shared ones counted once)."""
    seen, total = set(), 0
    for stage in stages:
        for p in stage.parameters():
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                total += p.numel() * p.element_size()
    return total


def optimizer_state_bytes(optimizer) -> int:
    """Bytes of an optimizer's state: the tensors it holds now, or, before its first step,
    what its first step will allocate for the known kinds (Adam/AdamW: two moments per
    parameter; SGD with momentum: one buffer; plain SGD: none).  Other optimizers before their
    first step: pass the bytes instead."""
    held = sum(t.numel() * t.element_size() for st in optimizer.state.values()
               for t in st.values() if isinstance(t, torch.Tensor))
    if held:
        return held
    params = [p for g in optimizer.param_groups for p in g["params"] if p.requires_grad]
    size = sum(p.numel() * p.element_size() for p in params)
    kind = type(optimizer).__name__
    if kind in ("Adam", "AdamW", "NAdam", "RAdam", "Adamax"):
        return 2 * size
    if kind == "SGD":
        return size if any(g.get("momentum", 0) for g in optimizer.param_groups) else 0
    raise RematError(f"optimizer_state: cannot tell what {kind} will hold before its first "
                     f"step; pass its bytes (an int) instead")


def carried_step_bytes(stages, x: torch.Tensor | None, device=None) -> int:
    """Bytes of the values a chain captured at the model's seams hands from its first stage
    to the others (rotary ``cos``/``sin``, position ids, attention masks:
    :func:`~remat_theory.torch.profiling.profiler.carried_tensors`) for input ``x``: their distinct
    storages, less those of the model's parameters and buffers and of the input.  The first
    stage makes them anew at every step and they stay held until the next step's first
    stage replaces them, so the step holds them from its first operation to its last, above
    every schedule's peak (on the small Llama, 8 x 128: 14,848 B).  The drop-in reserves
    them at every budget, like the shared gradients.  ``x`` None, or a chain not captured
    at seams: 0.  Runs the first stage once without grad, the model's state kept."""
    stages = list(stages)
    if x is None or not any(c.step_held for c in carried_of(stages)):
        return 0
    with model_state_kept(stages, device or x.device), torch.no_grad():
        out = stages[0](x.detach())
    del out
    skip = {t.untyped_storage().data_ptr() for s in stages
            for t in list(s.parameters()) + list(s.buffers())}
    skip.add(x.untyped_storage().data_ptr())
    seen = {}
    for t in carried_tensors(stages):
        st = t.untyped_storage()
        if st.data_ptr() and st.data_ptr() not in skip:
            seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())
