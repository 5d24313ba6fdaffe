"""How the drop-in runs an offload plan (:class:`~remat_theory.torch.plan.offload.OffloadRun`):
:class:`~remat_theory.torch.modules.checkpointed.CheckpointedSequential` running a schedule
with transfers (``Offx``, ``Offt``, ``Prex``, ``Pret``).

A schedule with transfers has no nested form (its offloads and prefetches are placed between
operations that autograd's engine orders by itself), so the drop-in runs it with the
:class:`~remat_theory.torch.run.offload_executor.OffloadExecutor`, operation by operation, the
way a reentrant checkpoint runs its segment:

* ``ck(x)`` runs the schedule's operations before ``Loss`` (with the offloads and prefetches
  among them) inside one autograd function, and returns x_L;
* the user's loss and ``loss.backward()`` then reach that function's backward, which hands
  d_L to the executor (the ``Loss`` operation) and runs the rest of the schedule: each
  ``B_i`` is an inner ``torch.autograd.backward`` of its tape, so the parameter gradients
  accumulate into ``.grad`` as in plain autograd, and d_0 flows back to the input.

Gradients are plain autograd's, bit for bit (tests/test_torch_offload_module.py).  Memory:
the referee's device peak.  d_L reaches the executor through a second, identity function
(:class:`_Loss`) whose backward hands it over and returns a zero of no memory, so that
autograd's engine does not keep d_L referenced through the whole plan's backward (x_size[L]
more, measured, when the plan's function received d_L itself); the forward ends by releasing
the device copies of the offloads issued since the last compute op, as the ``Loss`` would.
As with a
reentrant checkpoint: ``torch.autograd.grad(loss, params)`` does not see the parameter
gradients (they go to ``.grad``), and a second backward through the same forward
(``retain_graph=True``) is refused, since the schedule has run to its end.

How to ask for it: a solver that plans transfers (``exhaustive-offload``, ``save-on-cpu``,
``offload-all``, and any other that models the chain field ``bandwidth``) and a copy channel,
``bandwidth=`` (bytes per second, or ``"measure"``: :func:`~.bandwidth.measure_bandwidth`
on the profiling device).  On the CPU the executor runs in its correctness mode
(module docstring of :mod:`.offload_executor`).
"""
from __future__ import annotations

import weakref

import torch

from remat_theory.model.errors import RematError
from remat_theory.torch.plan.offload import OffloadRun
from remat_theory.torch.run.offload_executor import OffloadExecutor


__all__ = ["run_offload"]


class _Schedule(torch.autograd.Function):
    """Forward: the operations before ``Loss``; returns x_L.  Backward: the ``Loss`` (with
    the d_L :class:`_Loss` handed over) and the rest of the schedule; returns d_0."""

    @staticmethod
    def forward(ctx, dummy, x, state):  # noqa: D401 - autograd signature
        ex = state["executor"]
        for op in state["run"].before:
            ex.step(op)
        # the next compute op is the user's loss, the model's Loss: it first waits for the
        # offloads issued before it and releases their device copies
        ex.release_leaving()
        ex.wait_prefetches()
        ctx.state = state
        ctx.x_grad = x.requires_grad
        return ex.available(state["run"].length).detach()

    @staticmethod
    def backward(ctx, _zero):
        state = ctx.state
        ctx.state = None
        ex = state.pop("executor")
        for op in state["run"].after:
            ex.step(op)
        if not ex.done:  # pragma: no cover - the referee accepted a complete schedule
            raise RematError("the offload schedule ended without computing d0")
        d0 = ex.input_grad if ctx.x_grad else None
        del ex
        return None, d0, None


class _Loss(torch.autograd.Function):
    """Identity on x_L whose backward hands d_L to the executor (the ``Loss`` operation) and
    passes on a zero of no memory (a 0-d zero expanded): autograd's engine drops its
    reference to d_L when this backward returns, so the executor frees d_L at ``B_{L-1}``
    as the model says, not when the whole plan's backward returns."""

    @staticmethod
    def forward(ctx, y, state):  # noqa: D401 - autograd signature
        ctx.state = state
        return y.view_as(y)

    @staticmethod
    def backward(ctx, grad):
        state = ctx.state
        if state is None or "executor" not in state:
            raise RematError("this forward's schedule has already run its backward (a second "
                             "backward of an offload plan is not supported)")
        ctx.state = None
        state["executor"].set_loss_grad(grad)
        del grad
        zero = torch.zeros((), dtype=state["dtype"], device=state["device"])
        return zero.expand(state["shape"]), None


def run_offload(run: OffloadRun, stages, x: torch.Tensor, output_saved) -> torch.Tensor:
    """The forward of an offload plan (module docstring): x_L, whose backward runs the rest
    of the schedule."""
    ex = OffloadExecutor(stages, None, x.detach(), output_saved=output_saved, allow_drop=True)
    dummy = torch.empty(0, device=x.device, requires_grad=True)
    state = {"executor": ex, "run": run}
    y = _Schedule.apply(dummy, x, state)
    state.update(dtype=y.dtype, device=y.device, shape=y.shape)
    out = _Loss.apply(y, state)
    # the caller may read its output after the backward (``loss.item()`` in a training
    # loop): the executor never releases the storage under it while the caller holds it
    ex.caller_output = weakref.ref(out)
    return out
