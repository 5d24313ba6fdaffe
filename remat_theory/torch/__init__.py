"""The torch harness: profile a real network into a chain, run any schedule on it with
autograd (exact gradients, replayed randomness), measure its memory, and train under a
budget with :class:`CheckpointedSequential`.

This subpackage is the only part of remat that imports torch; ``import remat_theory``
never does.  Modules:

* :mod:`.inplace`: :func:`rematerialize`, a plan attached to the user's model in place (the
  model stays the model: its own forward, output and ``state_dict``; docs/train.md).
* :mod:`.capture`: :func:`to_stages`, any model captured as a chain of stages (:class:`StageChain`).
* :mod:`.call_inputs`: a captured chain's other inputs (masks, labels), given with every call.
* :mod:`.stages`: how a model becomes stages (``split_stages``).
* :mod:`.tracker`: :class:`MemoryTracker`, live tensor bytes and their peak on any device.
* :mod:`.executor`: :class:`ScheduleExecutor` / :func:`execute`, and :func:`plain_backprop`.
* :mod:`.profiler`: :func:`profile` (model -> Chain) and :func:`profile_details`.
* :mod:`.module`: :class:`CheckpointedSequential`, the drop-in module.
* :mod:`.networks`: built-in MLP, ResNet-like, Transformer and unrolled-GRU networks.
* :mod:`.confirm`: predicted vs measured memory and time (``remat confirm``).
* :mod:`.offload_executor`: :class:`OffloadExecutor`, schedules with offloads and prefetches
  (CUDA stream and pinned buffers; a correctness mode on the CPU); :mod:`.bandwidth`:
  :func:`measure_bandwidth`, the copy channel; :mod:`.offload_module`: the drop-in's offload
  plans; :mod:`.frontier_offload`: ``remat_offload`` frontier points.
"""
from remat_theory.torch.capture import CaptureError, StageChain, to_stages
from remat_theory.torch.inplace import RematHandle, rematerialize
from remat_theory.torch.executor import ExecutionResult, ScheduleExecutor, execute, plain_backprop
from remat_theory.torch.bandwidth import measure_bandwidth
from remat_theory.torch.module import CheckpointedSequential
from remat_theory.torch.offload_executor import OffloadExecutor
from remat_theory.torch.networks import NETWORKS, Network, build
from remat_theory.torch.profiler import ProfileResult, profile, profile_details
from remat_theory.torch.stages import split_stages
from remat_theory.torch.tracker import MemoryTracker

__all__ = ["CaptureError", "CheckpointedSequential", "ExecutionResult", "MemoryTracker",
           "NETWORKS", "Network", "OffloadExecutor", "ProfileResult", "RematHandle", "ScheduleExecutor",
           "StageChain", "build", "execute", "measure_bandwidth", "plain_backprop", "profile",
           "profile_details", "rematerialize", "split_stages", "to_stages"]
