"""The user-facing modules (the last room): :class:`CheckpointedSequential`, the drop-in
built from a chain of stages (``checkpointed``, with its offload plans in ``offload``).
The in-place API, :func:`remat_theory.torch.rematerialize`, sits beside this room in
:mod:`remat_theory.torch.inplace`.  docs/architecture.md has the map.
"""
