"""Capture: a model becomes a chain of stages (the first room of the torch layer).

:func:`to_stages` captures any model as a :class:`StageChain` (at its layers' calls, by
``torch.fx`` or by ``torch.export``); :func:`split_stages` normalises what a user hands the
harness (a chain, an ``nn.Sequential`` or a list of modules) into the stage list once.
Modules: ``seams`` (calls of the model's layers), ``chain`` (the graph capture and
:class:`StageChain`), ``guard`` (capture never changes the model), ``export_mode``,
``call_inputs`` (other inputs belong to each call), ``stages``.  docs/architecture.md has the map.
"""
from remat_theory.model.errors import CaptureError
from remat_theory.torch.capture.chain import GRANULARITIES, METHODS, StageChain, to_stages
from remat_theory.torch.capture.stages import split_stages


__all__ = ["CaptureError", "GRANULARITIES", "METHODS", "StageChain", "split_stages", "to_stages"]
