"""``CheckpointedSequential``: train an ``nn.Sequential`` within a memory budget.

::

    model = nn.Sequential(...)
    ckpt = CheckpointedSequential(model, budget=0.5, solver="dp",
                                  example_input=x, loss_fn=lambda out: F.mse_loss(out, y))
    out = ckpt(x)                 # runs the schedule's forward part
    loss = F.mse_loss(out, y)     # the loss is yours, as with the original module
    del out                       # (see "memory" below)
    loss.backward()               # runs the rest of the schedule: recomputations and backwards
    optimizer.step()

Construction profiles the model once on ``example_input`` (:func:`.profiler.profile`),
solves the chain with the named solver (any name of ``remat solvers``; ``budget`` is
bytes of activation memory, or a float in (0, 1] meaning that fraction of the store-all
peak) and keeps the schedule.  A budget below the solver's smallest feasible one raises
:class:`~remat_theory.model.errors.InfeasibleBudgetError` naming that smallest budget.

How a pure ``forward`` expresses a schedule (the approach of Rotor and of the reentrant
``torch.utils.checkpoint``): ``forward`` runs the operations before ``Loss`` and returns
x_L through a custom autograd function; the caller's loss and ``backward()`` play the
``Loss`` operation; the function's backward receives d_L and runs the remaining operations
(recomputations with ``torch.enable_grad()`` and nested ``torch.autograd.backward`` calls,
which accumulate the parameter gradients), then returns d_0 to the input if it requires
grad.  Dropout and BatchNorm behave as without checkpointing (see :mod:`.executor`).

Memory: the budget covers x_0, the activations, tapes and gradients of the stages and the
loss stage as profiled (``loss_fn``), for inputs of the profiled shape.  The returned
output shares the memory of x_L: drop your own references to it before ``backward()`` so
that it can be freed when the model says.  Parameters, gradients and optimizer state are
not part of the budget.  Outside training (``torch.no_grad()``, or no parameter/input
requiring grad), ``forward`` simply runs the stages.  One ``backward`` per ``forward``.
"""
from __future__ import annotations

import numbers

import torch
from torch import nn

import solvers as solver_registry

from remat_theory.model.errors import InfeasibleBudgetError, RematError
from remat_theory.model.schedule import LOSS
from remat_theory.torch.executor import ScheduleExecutor
from remat_theory.torch.profiler import profile
from remat_theory.torch.rounding import auto_unit, rounded_chain
from remat_theory.torch.stages import split_stages, stage_parameters


class _RunSchedule(torch.autograd.Function):
    @staticmethod
    def forward(ctx, dummy, x, owner):
        ex = ScheduleExecutor(owner.stages_list, None, x)
        ops = owner.schedule.ops
        k = ops.index(next(o for o in ops if o.kind == LOSS))
        for op in ops[:k]:
            ex.step(op)
        ctx.executor = ex
        ctx.rest = ops[k + 1:]
        out = ex.available(len(owner.stages_list))
        return out.detach()

    @staticmethod
    def backward(ctx, grad_out):
        ex = ctx.executor
        ctx.executor = None
        ex.set_loss_grad(grad_out)
        del grad_out
        for op in ctx.rest:
            ex.step(op)
        d0 = ex.input_grad
        return None, d0, None


class CheckpointedSequential(nn.Module):
    """A drop-in replacement for an ``nn.Sequential`` that trains within ``budget``.

    Parameters
    ----------
    model : nn.Sequential (nested ones flattened) or list of stage modules.
    budget : int bytes, or float in (0, 1]: fraction of the store-all peak.
    solver : registry name (default ``"dp"``).
    example_input : tensor of the shape used in training (profiling input).
    loss_fn : maps the model output to a scalar loss (profiled as the loss stage).
    device : where to profile (default: the example input's device).
    solver_options : extra options for the solver (e.g. ``{"time_limit": 30}``).
    chain : a precomputed chain (skips profiling).
    unit : the solver sees sizes rounded up to multiples of ``unit`` bytes (default: a power
        of two near store-all/2048; see :mod:`.rounding`); 1 solves in exact bytes.

    Attributes: ``chain`` (the profiled Chain), ``solution`` (the Solution), ``schedule``.
    """

    def __init__(self, model, budget, solver: str = "dp", *, example_input=None, loss_fn=None,
                 device=None, solver_options=None, chain=None, profile_repeats: int = 3,
                 unit: int | None = None):
        super().__init__()
        stages = split_stages(model)
        self.stages = nn.ModuleList(stages)
        if chain is None:
            if example_input is None or loss_fn is None:
                raise RematError("CheckpointedSequential needs example_input and loss_fn to "
                                 "profile the model (or a precomputed chain)")
            chain = profile(stages, example_input, loss_fn, device, repeats=profile_repeats)
        if chain.length != len(stages):
            raise RematError(f"the chain has {chain.length} stages but the model has {len(stages)}")
        self.chain = chain
        store_all = chain.store_all_memory()
        if isinstance(budget, bool) or not isinstance(budget, numbers.Real):
            raise RematError(f"budget = {budget!r} must be bytes (int) or a fraction (float)")
        if isinstance(budget, numbers.Integral):
            budget_bytes = int(budget)
        elif 0 < budget <= 1:
            budget_bytes = int(budget * store_all)
        else:
            raise RematError(f"budget = {budget!r}: a float budget is a fraction of the "
                             f"store-all peak and must be in (0, 1]")
        options = dict(solver_options or {})
        self.unit = auto_unit(chain) if unit is None else int(unit)
        sol = solver_registry.solve(rounded_chain(chain, self.unit), budget_bytes, solver, **options)
        if sol.schedule is None:
            smallest = sol.min_budget
            raise InfeasibleBudgetError(
                f"budget {budget_bytes} B is infeasible for solver {solver!r}"
                + (f"; the smallest feasible budget is {smallest} B" if smallest is not None else "")
                + f" (store-all needs {store_all} B)", budget_bytes, smallest)
        self.solution = sol
        self.schedule = sol.schedule
        self.budget = budget_bytes

    @property
    def stages_list(self) -> list:
        return list(self.stages)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        needs_grad = torch.is_grad_enabled() and (
            x.requires_grad or any(p.requires_grad for p in stage_parameters(self.stages_list)))
        if not needs_grad:
            for s in self.stages:
                x = s(x)
            return x
        dummy = torch.empty(0, device=x.device, requires_grad=True)
        return _RunSchedule.apply(dummy, x, self)
