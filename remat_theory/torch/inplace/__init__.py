"""Rematerialize a model in place: the model stays the model.

::

    handle = rematerialize(model, budget="6GiB", example=batch)
    for batch in loader:                      # the user's loop, unchanged
        loss = model(**batch).loss
        loss.backward()
        optimizer.step(); optimizer.zero_grad()
    handle.plan                               # schedule, predicted peak and time
    handle.remove()                           # the plain model again

What it does.  The model's layers (:mod:`.layers`) are found once, from ``example``.
Forward hooks on the model and on its layers do the rest: at each training call (training
mode and grad enabled), the call's input shapes select a plan (profiled on the call itself
and solved the first time a shape is seen, :mod:`.profile`, :mod:`.plan`; at most
``max_plans`` kept, least recently used dropped), and the hooks open and close the plan's
checkpointed segments around the layers as the model's own forward calls them (:mod:`.run`).

What it guarantees.
* Every tensor of a call belongs to that call: the arguments a recomputation gives a layer
  are those the model gave it in this forward; nothing is captured from ``example``.
* The model's output is its own (the output object with every field), its parameters and
  ``state_dict`` keys are untouched, ``eval()``, ``torch.no_grad()`` and inference
  (``generate``) run the plain model, with no hook doing anything.
* In a training call the model is called with ``use_cache=False`` unless the caller passes
  ``use_cache`` (as transformers' own gradient checkpointing does: a cache would hold every
  layer's keys and values for the step); a recomputation never touches a cache.
* Gradients are autograd's own: the backward is ``loss.backward()``; dropout draws the same
  masks when recomputed.
* ``torch.compile(model)`` compiles what lies between the layers; the layers themselves run
  eagerly (their ``forward`` wrapped in ``torch.compiler.disable`` as an instance attribute,
  taken away by ``remove()``): the plan's checkpoints are not the compiler's, and a
  compiled layer would save other tensors than its recomputation.
* ``handle.remove()`` takes every hook away.
"""
from __future__ import annotations

import inspect
from collections import OrderedDict

import torch
from torch import nn

from remat_theory.model.errors import RematError
from remat_theory.torch.capture.stages import model_state_kept
from remat_theory.torch.inplace.layers import find_layers
from remat_theory.torch.inplace.plan import (Gradients, LayerPlan, calibrate, make_plan,
                                             measured_gradients, parse_budget)
from remat_theory.torch.inplace.profile import device_of, host_generators_kept, profile_layers
from remat_theory.torch.inplace.records import LayerProfile, default_loss
from remat_theory.torch.inplace.run import StepRun
from remat_theory.torch.inplace.verify import measure_plan


__all__ = ["LayerPlan", "LayerProfile", "RematHandle", "rematerialize"]


def _split_example(example):
    if isinstance(example, dict):
        return (), dict(example)
    if isinstance(example, torch.Tensor):
        return (example,), {}
    if isinstance(example, (tuple, list)):
        return tuple(example), {}
    raise RematError(f"example must be the kwargs dict or the args tuple the model is called "
                     f"with (or one tensor), got {type(example).__name__}")


def _gradients(model, layers) -> Gradients:
    """Bytes of parameter gradients by layer (at its module's last call) and the rest."""
    def size(params):
        return sum(p.numel() * p.element_size() for p in params if p.requires_grad)
    last: dict = {}
    for i, lc in enumerate(layers):
        last[id(lc.module)] = (i, lc.module)
    by_layer = {i: size(m.parameters()) for i, m in last.values()}
    return Gradients(by_layer, size(model.parameters()) - sum(by_layer.values()))


def _describe_value(v):
    if isinstance(v, torch.Tensor):
        return ("tensor", tuple(v.shape), str(v.dtype), str(v.device))
    if v is None or isinstance(v, (bool, int, float, str)):
        return ("value", v)
    return ("object", type(v).__name__)


def _call_key(args, kwargs) -> tuple:
    """What a plan depends on: every input's shape, dtype and device, the plain values, the
    autocast state."""
    parts = [("a", i, _describe_value(v)) for i, v in enumerate(args)]
    parts += [("k", k, _describe_value(kwargs[k])) for k in sorted(kwargs)]
    auto = []
    for dev in ("cpu", "cuda"):
        try:
            if torch.is_autocast_enabled(dev):
                auto.append((dev, str(torch.get_autocast_dtype(dev))))
        except (RuntimeError, AttributeError):  # pragma: no cover - older torch
            pass
    return tuple(parts) + (("autocast", tuple(auto)),)


def _shapes(key) -> str:
    out = []
    for p in key[:-1]:
        if p[2][0] == "tensor":
            out.append(f"{p[1]}={list(p[2][1])}")
    return ", ".join(out) or "(no tensors)"


class RematHandle:
    """What :func:`rematerialize` attached to a model (see the module docstring).

    Attributes: ``model``; ``layers`` (the layer calls, :class:`.layers.LayerCall`);
    ``plans`` (input key -> :class:`LayerPlan`, most recently used last); ``plan`` (the plan
    of the last training call, or of ``example``).
    """

    def __init__(self, model, budget, example, *, solver="dp", solver_options=None,
                 loss_fn=None, max_plans: int = 8):
        if not isinstance(model, nn.Module):
            raise RematError(f"model must be an nn.Module, got {type(model).__name__}")
        parse_budget(budget)
        if isinstance(max_plans, bool) or not isinstance(max_plans, int) or max_plans < 1:
            raise RematError(f"max_plans = {max_plans!r} must be a positive int")
        if loss_fn is not None and not callable(loss_fn):
            raise RematError(f"loss_fn = {loss_fn!r} must be callable (output -> scalar loss)")
        if getattr(model, "_remat_handle", None) is not None:
            raise RematError("this model is already rematerialized: call handle.remove() first")
        self.model, self.budget, self.solver = model, budget, solver
        self.solver_options = dict(solver_options or {})
        self.loss_fn = loss_fn or default_loss
        self.max_plans = max_plans
        self.plans: OrderedDict = OrderedDict()
        self._last_key = None
        self._run: StepRun | None = None
        self._busy = False
        self._handles: list = []
        self.grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters()
                              if p.requires_grad)
        try:
            params = inspect.signature(model.forward).parameters
        except (TypeError, ValueError):
            params = {}
        self._cache_switch = "use_cache" in params
        args, kwargs = _split_example(example)
        args, kwargs = self._training_kwargs(args, kwargs)
        was = model.training
        model.train()
        try:
            # the probe is a forward of the model: BatchNorm's running statistics, the random
            # generators (dropout, SpecAugment) are left as they were, as by the profile
            with model_state_kept([model], device_of(model, args, kwargs)), \
                    host_generators_kept():
                self.layers, out = find_layers(model, args, kwargs)
                del out
            self.chained = [lc.chained for lc in self.layers]
            self.gradients = _gradients(model, self.layers)
            self._plan_for(args, kwargs)
        finally:
            model.train(was)
        modules = {id(lc.module): lc.module for lc in self.layers}
        self._handles.append(model.register_forward_pre_hook(self._model_pre, with_kwargs=True))
        self._handles.append(model.register_forward_hook(self._model_post, always_call=True))
        self._eager_layers = []
        for m in modules.values():
            if "forward" not in m.__dict__:  # layers run eagerly under torch.compile(model)
                m.forward = torch.compiler.disable(m.forward)
                self._eager_layers.append(m)
            self._handles.append(m.register_forward_pre_hook(self._layer_pre, with_kwargs=True))
            self._handles.append(m.register_forward_hook(self._layer_post))
        model._remat_handle = self

    # ------------------------------------------------------------------ plans
    @property
    def plan(self) -> LayerPlan:
        return self.plans[self._last_key]

    def _training_kwargs(self, args, kwargs):
        if self._cache_switch and "use_cache" not in kwargs:
            kwargs = dict(kwargs)
            kwargs["use_cache"] = False
        return args, kwargs

    def plan_for(self, *args, **kwargs) -> LayerPlan:
        """The plan of a training call with these arguments (profiled and solved if new)."""
        return self._plan_for(*self._training_kwargs(args, kwargs))

    def _plan_for(self, args, kwargs) -> LayerPlan:
        key = _call_key(args, kwargs)
        plan = self.plans.get(key)
        if plan is None:
            def measure(candidate):  # one step under a candidate plan (verified plans)
                return measure_plan(self.model, self.layers, candidate, args, kwargs,
                                    self.loss_fn)

            self._busy = True  # the hooks do nothing while the profile's and plan's steps run
            try:
                prof = profile_layers(self.model, self.layers, args, kwargs, self.loss_fn,
                                      name=type(self.model).__name__)
                grads = measured_gradients(prof, self.gradients)
                calibrate(prof, grads)
                plan = make_plan(key, prof, self.budget, grads, self.chained,
                                 solver=self.solver, solver_options=self.solver_options,
                                 describe=_shapes(key), measure=measure)
            finally:
                self._busy = False
            self.plans[key] = plan
            while len(self.plans) > self.max_plans:
                self.plans.popitem(last=False)
        self.plans.move_to_end(key)
        self._last_key = key
        return plan

    def measure_step(self, plan: LayerPlan, *args, **kwargs) -> int | None:
        """The allocator's peak (bytes, gradients included) of one training step of the
        model on these inputs under ``plan`` (what verifies a plan,
        :func:`.verify.measure_plan`), the model's state kept; None where the plan's profile
        was not measured by the allocator."""
        args, kwargs = self._training_kwargs(args, kwargs)
        busy, self._busy = self._busy, True
        try:
            return measure_plan(self.model, self.layers, plan, args, kwargs, self.loss_fn)
        finally:
            self._busy = busy

    # ------------------------------------------------------------------ hooks
    @torch.compiler.disable
    def _model_pre(self, module, args, kwargs):
        if self._busy:
            return None
        if self._run is not None:  # a forward that raised left it: nothing is open now
            self._run.abort()
            self._run = None
        if not (module.training and torch.is_grad_enabled()):
            return None
        args, kwargs = self._training_kwargs(args, kwargs)
        plan = self._plan_for(args, kwargs)
        if plan.tree is not None:
            self._run = StepRun(plan, self.layers)
        return args, kwargs

    @torch.compiler.disable
    def _model_post(self, module, args, output):
        run, self._run = self._run, None
        if run is not None and not self._busy:
            if output is None:  # always_call after an exception
                run.abort()
            else:
                run.finish()
        return None

    @torch.compiler.disable
    def _layer_pre(self, module, args, kwargs):
        if self._run is not None and not self._busy:
            self._run.before(module, args, kwargs)
        return None

    @torch.compiler.disable
    def _layer_post(self, module, args, output):
        if self._run is not None and not self._busy:
            self._run.after(module, output)
        return None

    # ------------------------------------------------------------------ removal
    def remove(self) -> None:
        """Take every hook away: the model is the plain model again."""
        for h in self._handles:
            h.remove()
        self._handles = []
        for m in self._eager_layers:
            del m.forward
        self._eager_layers = []
        if self._run is not None:
            self._run.abort()
            self._run = None
        if getattr(self.model, "_remat_handle", None) is self:
            del self.model._remat_handle

    def __repr__(self) -> str:
        return (f"RematHandle({type(self.model).__name__}, {len(self.layers)} layers, budget "
                f"{self.budget!r}, {len(self.plans)} plan(s))")


def rematerialize(model: nn.Module, budget, example, *, solver: str = "dp",
                  solver_options=None, loss_fn=None, max_plans: int = 8) -> RematHandle:
    """Train ``model`` within ``budget`` by recomputing some of its layers, in place.

    Parameters
    ----------
    model : the model, called as usual afterwards (``model(**batch)``).
    budget : bytes of the whole training step above the resident model (int, or a str with
        a unit: ``"6GiB"``), or a fraction in (0, 1] of the step's activation peak without
        recomputation (float); see :mod:`.plan`.  Applies to every input shape.  A byte
        budget's plan rests on one step of its schedule run at plan time and measured within
        the budget (a verified plan, :mod:`.verify`: at most five such steps per input shape,
        each schedule run once), or, where the profile cannot measure a step, on its
        prediction with 1% of the budget kept free.
    example : the kwargs dict or args tuple the model is called with (one batch); profiled
        at once, so that an infeasible budget is refused here.
    solver : a registry name of a solver with persistent schedules (default ``"dp"``).
    solver_options : dict of the solver's options.
    loss_fn : output -> the scalar the step backpropagates (default: ``output.loss`` when
        the model computes one, else the sum of its first output tensor); profiled as the
        chain's loss stage.
    max_plans : input shapes whose plans are kept (least recently used dropped).

    Returns
    -------
    RematHandle
        ``handle.plan`` (schedule, predicted peak and time), ``handle.remove()``.

    Raises
    ------
    InfeasibleBudgetError
        The budget cannot be met on ``example``'s shape (the smallest feasible one named,
        in the same units).  A later shape that cannot fit raises it at its call.
    RematError
        Bad arguments; a model without a repeated stack of layers.
    """
    return RematHandle(model, budget, example, solver=solver, solver_options=solver_options,
                       loss_fn=loss_fn, max_plans=max_plans)
