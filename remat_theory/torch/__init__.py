"""The torch harness: profile a real network into a chain, run any schedule on it with
autograd (exact gradients, replayed randomness), measure its memory, and train under a
budget, in place (:func:`rematerialize`) or with the drop-in :class:`CheckpointedSequential`.

This subpackage is the only part of remat that imports torch; ``import remat_theory``
never does.  It is built as rooms with one direction of flow (docs/architecture.md has the
map, and tests/test_architecture.py enforces it):

* :mod:`.capture`: :func:`to_stages` (any model as a :class:`StageChain`), :func:`split_stages`.
* :mod:`.profiling`: :class:`MemoryTracker` and the allocator meter; :func:`profile` (model ->
  Chain) and :func:`profile_details`; :func:`measure_bandwidth`, the copy channel.
* :mod:`.plan`: a solver's schedule for a chain and a budget, in the slot unit.
* :mod:`.run`: :class:`ScheduleExecutor` / :func:`execute`, :func:`plain_backprop`, the
  nested form, :class:`OffloadExecutor`.
* :mod:`.modules`: :class:`CheckpointedSequential`, the drop-in module (its :class:`Budget`
  and :class:`CheckpointOptions`); :mod:`.inplace`:
  :func:`rematerialize`, a plan attached to the user's model in place (docs/train.md).

The experiment drivers (the network zoo, ``remat confirm``, ``remat frontier``) are in
:mod:`remat_theory.lab`, which nothing here imports.
"""
from remat_theory.torch.capture import CaptureError, StageChain, split_stages, to_stages
from remat_theory.torch.inplace import RematHandle, rematerialize
from remat_theory.torch.modules.checkpointed import CheckpointedSequential
from remat_theory.torch.modules.options import Budget, CheckpointOptions
from remat_theory.torch.profiling.bandwidth import measure_bandwidth
from remat_theory.torch.profiling.profiler import ProfileResult, profile, profile_details
from remat_theory.torch.tracker import MemoryTracker
from remat_theory.torch.run.executor import ExecutionResult, ScheduleExecutor, execute, plain_backprop
from remat_theory.torch.run.offload_executor import OffloadExecutor

__all__ = ["Budget", "CaptureError", "CheckpointOptions", "CheckpointedSequential",
           "ExecutionResult", "MemoryTracker", "OffloadExecutor", "ProfileResult", "RematHandle", "ScheduleExecutor", "StageChain",
           "execute", "measure_bandwidth", "plain_backprop", "profile", "profile_details",
           "rematerialize", "split_stages", "to_stages"]
