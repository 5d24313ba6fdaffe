"""What one plan of the drop-in is (:class:`Plan`) and the key it is kept under: an input's
shape, dtype and device, and the autocast dtype in force."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from remat_theory.model.chain import Chain
from remat_theory.model.schedule import Schedule
from remat_theory.model.solution import Solution
from remat_theory.torch.plan.nested_form import Segment, recomputed_stages
from remat_theory.torch.plan.offload import OffloadRun


@dataclass
class Plan:
    """What the module runs for one input key: the chain profiled for it, the budget in
    bytes, the solver's solution and schedule, its nested form (None: store-all, run as
    plain autograd), and ``predicted_peak``: what the drop-in's step holds at its peak on an
    input that needs no gradient (a training batch): the simulator's peak for the schedule
    on the real chain, with the states its checkpoints keep and the summed gradients of
    shared parameters, and B_0 without d_0 (:func:`dropin_peak`; an input that needs a
    gradient makes B_0 up to ``ProfileResult.input_grad_bytes`` higher, within the budget:
    the solver plans with the table's B_0)."""

    key: tuple
    chain: Chain
    budget: int
    solution: Solution
    schedule: Schedule
    tree: Segment | None
    predicted_peak: int

    @property
    def recomputed(self) -> int:
        """Stage forwards recomputed per step."""
        if isinstance(self.tree, OffloadRun):
            return self.tree.recomputed
        return 0 if self.tree is None else recomputed_stages(self.tree)


def _autocast_key(device_type: str):
    try:
        if torch.is_autocast_enabled(device_type):
            return torch.get_autocast_dtype(device_type)
    except (RuntimeError, TypeError, ValueError):  # a device type without autocast
        return None
    return None


def input_key(x: torch.Tensor) -> tuple:
    """What a schedule depends on: shape, dtype, device and the autocast dtype (or None)."""
    return (tuple(x.shape), x.dtype, x.device, _autocast_key(x.device.type))


def describe(key: tuple) -> str:
    shape, dtype, device, autocast = key
    text = f"shape {list(shape)}, dtype {dtype}, device {device}"
    return text + (f", autocast {autocast}" if autocast is not None else "")
