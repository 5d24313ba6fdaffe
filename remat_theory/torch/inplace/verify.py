"""One rematerialized step of a candidate plan, measured at plan time: what a verified plan
rests on.

The planner (:func:`.plan.make_plan`) keeps :data:`.plan.ENGINE_MARGIN` of a step budget
free because its predicted peak can miss upward.  Where the fastest schedule whose
*predicted* peak fits the whole budget is not the one that fits the budget less the
margin, or where nothing fits with the margin, the plan runs that schedule once here, on
the call's own inputs, and accepts it if the step's measured peak is within the budget.

The step is the user's: ``model(*args, **kwargs)``, the loss, ``backward()``, under the
plan's hooks (:class:`.run.StepRun`, as the API runs it), the parameters' gradients unmade
at its start; measured by the allocator meter that measured the profile's plain step
(:class:`~remat_theory.torch.tracker.AllocatorMeter`: the allocator's peak from the
forward's start to the backward's end, gradients included).  The model's state is left as
it was, by the machinery the profile's steps run under: parameter gradients, buffers
(BatchNorm statistics), torch's random generators
(:func:`~remat_theory.torch.capture.stages.model_state_kept`), Python's and numpy's
(:func:`.profile.host_generators_kept`).
"""
from __future__ import annotations

import torch

from remat_theory.torch.capture.stages import model_state_kept
from remat_theory.torch.inplace.profile import device_of, host_generators_kept
from remat_theory.torch.inplace.run import StepRun
from remat_theory.torch.tracker import AllocatorMeter


__all__ = ["measure_plan"]


def measure_plan(model, layers, plan, args, kwargs, loss_of) -> int | None:
    """The allocator's peak (bytes above the step's start) of one training step of ``model``
    on ``(args, kwargs)`` under ``plan``; None where the profile could not measure its own
    plain step by the allocator (a forward of more operations than the allocator meter is
    used for: its predictions keep the margin, unverified)."""
    if plan.profile.plain_step_measured is None:
        return None
    dev = device_of(model, args, kwargs)
    params = [p for p in model.parameters() if p.requires_grad]
    run = StepRun(plan, layers) if plan.tree is not None else None
    live = [run]  # the forward's run; None once the forward is over (the recomputations
    # in the backward call the layers too, and must not reach it, as in the API's hooks)

    def before(mod, a, kw):
        if live[0] is not None:
            live[0].before(mod, a, kw)

    def after(mod, a, out):
        if live[0] is not None:
            live[0].after(mod, out)

    handles = []
    if run is not None:
        for m in {id(lc.module): lc.module for lc in layers}.values():
            handles.append(m.register_forward_pre_hook(before, with_kwargs=True))
            handles.append(m.register_forward_hook(after))
    meter = AllocatorMeter(dev)
    with model_state_kept([model], dev), host_generators_kept():
        for p in params:
            p.grad = None
        try:
            with meter, meter.op("step"), torch.enable_grad():
                try:
                    out = model(*args, **kwargs)
                finally:
                    live[0] = None
                if run is not None:
                    run.finish()
                loss = loss_of(out)
                del out
                loss.backward()
                del loss
        finally:
            for h in handles:
                h.remove()
            if run is not None:
                run.abort()
            for p in params:
                p.grad = None
    return meter.peak
