"""The drop-in's offload plans: a schedule with transfers (``Offx``, ``Offt``, ``Prex``,
``Pret``) split at the ``Loss`` (:class:`OffloadRun`), and the check of the copy channel a
user gives (:func:`check_bandwidth`; :func:`~remat_theory.torch.profiling.bandwidth.chain_with_bandwidth`
gives a chain its channel).  How such a plan runs: :mod:`remat_theory.torch.run.offload_run`."""
from __future__ import annotations

import numbers

from remat_theory.model.errors import RematError
from remat_theory.model.schedule import LOSS, Schedule


__all__ = ["OffloadRun", "check_bandwidth"]


class OffloadRun:
    """A plan's schedule with transfers, split at the ``Loss``: what the drop-in runs in
    its forward (``before``) and in its backward (``after``)."""

    def __init__(self, schedule: Schedule, length: int):
        ops = list(schedule)
        k = next((j for j, op in enumerate(ops) if op.kind == LOSS), None)
        if k is None:
            raise RematError("the schedule has no Loss operation")
        self.schedule = schedule
        self.before = ops[:k]
        self.after = ops[k + 1:]
        self.length = length

    @property
    def recomputed(self) -> int:
        """Stage forwards recomputed per step."""
        return self.schedule.forward_count() - self.length

    @property
    def transfers(self) -> int:
        return sum(op.is_transfer for op in self.schedule)


def check_bandwidth(bandwidth):
    """``bandwidth=`` of the drop-in: None, ``"measure"`` or bytes per second (> 0)."""
    if bandwidth is None or bandwidth == "measure":
        return bandwidth
    if isinstance(bandwidth, bool) or not isinstance(bandwidth, numbers.Real) or not bandwidth > 0 \
            or bandwidth == float("inf"):
        raise RematError(f"bandwidth = {bandwidth!r} must be bytes per second (a finite number "
                         f"> 0), 'measure' or None")
    return float(bandwidth)
