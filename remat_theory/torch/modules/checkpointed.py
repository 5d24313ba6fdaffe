"""``CheckpointedSequential``: train an ``nn.Sequential`` within a memory budget.

::

    model = nn.Sequential(...)
    ckpt = CheckpointedSequential(model, budget=0.5, solver="dp",
                                  example_input=x, loss_fn=lambda out: F.mse_loss(out, y))
    out = ckpt(x)                 # the schedule's forward: kept stages record, others do not
    loss = F.mse_loss(out, y)     # the loss is yours, as with the original module
    loss.backward()               # autograd's own backward; recomputations run inside it
    optimizer.step()

How it runs.  The solver's schedule is put in its nested form
(:func:`~remat_theory.torch.run.nested.nested_form`): each stage is either *kept* (``Fall``:
it runs as ordinary autograd and its tape lives until its backward) or starts a
*checkpointed segment* (``Fck Fn ..``: only the segment's input is kept, and the segment is
recomputed, in its own nested form, when the backward reaches it).  The forward is then
ordinary autograd with one non-reentrant ``torch.utils.checkpoint`` call per checkpointed
segment (:func:`~remat_theory.torch.run.nested.run_nested`), and ``backward()`` is autograd's
own engine.  Hence, as with the plain module: ``backward(retain_graph=True)`` then a second
backward, ``torch.autograd.grad(loss, params)``, autocast with the backward outside the
block, and the output gradient freed as soon as autograd has used it.  Dropout draws the
same masks on recomputation and BatchNorm statistics are updated once per step.  A budget
at or above the store-all peak runs the stages as plain autograd, with nothing added.

The contract.  ``CheckpointedSequential(model, budget, solver="dp", *, example_input,
loss_fn, device, solver_options, optimizer_state, bandwidth, options)``:

* ``budget`` is a :class:`~remat_theory.torch.modules.options.Budget`, whose kind says what
  it bounds: ``Budget.step("6GiB")`` the whole training step, ``Budget.activations(n)``
  the chain's own bytes, ``Budget.fraction(f)`` a fraction of each input shape's store-all
  peak.  The short forms mean one thing each: a str with a unit is a step budget, a float
  in (0, 1] a fraction; an ambiguous form (a plain int, which
  :func:`remat_theory.torch.rematerialize` reads as bytes of the step, a str without a
  unit, a float above 1, a bool) raises :class:`~remat_theory.model.errors.RematError`
  naming the spelling to use.
* ``options`` (:class:`~remat_theory.torch.modules.options.CheckpointOptions`, frozen and
  validated: a bad field raises naming it and its value) holds the profiling and running
  knobs: ``profile_repeats``, ``unit``, ``reprofile``, ``early_stop``, and a profile made
  elsewhere (``chain``, ``draws_random``, ``input_grad_bytes``, ``loss_bytes``;
  ``CheckpointOptions.from_profile(prof)``).  The same names as constructor keywords (the
  spelling of earlier versions) still work, with the same meaning, through
  :func:`~remat_theory.torch.modules.options.options_from`, and warn
  (``DeprecationWarning``) naming the new spelling.
* One execution path: each plan gets its strategy once, when it is made (the example
  input's at construction): plain autograd, the nested form, or the offload executor
  (the strategies at the top of this module); ``forward`` takes the call's other
  inputs, finds the plan's strategy and runs it.  Planning lives beside the module in
  :class:`~remat_theory.torch.modules.planning.Planner`.

Shapes.  The chain, hence the schedule, depends on the input's shape and dtype (and on
the autocast state).  Each new (shape, dtype, device, autocast) is profiled and solved once
and cached; with ``CheckpointOptions(reprofile=False)`` a new one raises
:class:`~remat_theory.model.errors.RematError` instead.  A fraction is of each shape's own
store-all peak; bytes (of the step or of activations) are the same for every shape.

Not run by the schedule (the plain stages run instead): ``eval()`` mode, ``torch.no_grad()``,
and inputs where neither the input nor any parameter requires grad.

``torch.compile``: compile the stages (:meth:`CheckpointedSequential.compile_stages`).
``torch.compile(ck)`` works, but the part that runs a recomputing schedule is excluded from
compilation (``torch.compiler.disable``) and runs as without it, compiled stages included:
a compiled graph of the whole step would recompute what the compiler chooses, not what the
schedule says.  At a budget at or above store-all, where it is plain autograd, the whole
forward is compiled.

Budgets in the user's units. ``budget="6GiB"`` (``Budget.step``; a string with a unit: B,
KB, MB, GB, KiB, MiB, GiB, TiB) is the whole training step's peak above the model's resident
state, as the allocator measures it from the start of the step (parameters and buffers
present, no parameter gradient, as after ``optimizer.zero_grad()``) to the end of
``loss.backward()``: activations, parameter gradients, the loss, workspaces. With
``optimizer_state=`` (bytes, or an optimizer: :func:`optimizer_state_bytes`) the budget
holds the optimizer's state too. The module reserves what the schedule does not count
(:meth:`CheckpointedSequential.step_reserve`: parameter gradients, optimizer state, the loss
and its seed gradient, and 1% of the rest for the engine's buffers a recomputation meets)
and solves for the remainder, in which the random-generator states the checkpoints keep are
counted where they live (as for a budget of activations, below); a budget it cannot meet
raises :class:`~remat_theory.model.errors.InfeasibleBudgetError` naming the smallest one, in
bytes.

Memory: a budget of activations or a fraction covers x_0, the activations, tapes and
gradients of the stages and the loss stage as profiled (``loss_fn``). The profiled chain
says which stage outputs no backward reads (``output_saved``: a Linear's output before a
ReLU); autograd frees those as soon as the next stage has read them, as the chain's
operation table does, so at store-all the module's peak is the chain's prediction (the loss
value and its seed gradient aside; the plan counts the loss tensor,
``ProfileResult.loss_bytes``: on a recomputing schedule whole, for plain autograd what a
reduction buffer holds beyond a scalar, e.g. an MSE's on the CPU, the size of the output:
plain autograd starts that much above store-all). Parameters, gradients and optimizer state
are not part of it, except one thing autograd adds: the summed gradient of parameters used
by several stages, which every budget reserves (:func:`shared_parameter_bytes`; a budget
below store-all plus that reserve is solved with it taken out), and, for a chain captured at
the model's seams, the values its first stage hands the others (rotary tables, position ids,
masks), made anew at every step and held to its end: every budget reserves them too
(:func:`carried_step_bytes`, :meth:`CheckpointedSequential.carried_bytes`). On the CPU a
budget of activations or a fraction also covers the random-generator states the checkpoints
keep (only for segments where a stage draws random numbers: ``draws_random``), counted at
each operation (:func:`~remat_theory.torch.run.nested.checkpoint_state_bytes`); the plan's
``predicted_peak`` adds them and the summed gradients of shared parameters
(:func:`shared_gradient_bytes`) to the simulator's peak: what the drop-in's step holds.

Schedules of non-persistent solvers (``dtr``, some of ``exhaustive``'s, rarely
``dp-weak``'s) have no nested form; the module refuses them, naming the solver (run them
with :class:`~remat_theory.torch.run.executor.ScheduleExecutor`).

Offloading: with ``bandwidth=`` (a copy channel) and a solver that plans transfers
(``dp-offload``, ``save-on-cpu``, ``offload-all``, ``exhaustive-offload``), a schedule with
offloads runs on the offload executor inside one autograd function
(:mod:`~remat_theory.torch.run.offload_run`; docs/offload_torch.md).
"""
from __future__ import annotations

import numbers

import torch
from torch import nn

from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError
from remat_theory.model.schedule import Schedule
from remat_theory.model.solution import Solution
from remat_theory.torch.capture.call_inputs import GuardedRunner, inputs_of
from remat_theory.torch.capture.carried import release_carried
from remat_theory.torch.capture.stages import split_stages
from remat_theory.torch.modules.options import (Budget, CheckpointOptions, options_from)
from remat_theory.torch.modules.planning import Planner
from remat_theory.torch.plan.budget import optimizer_state_bytes
from remat_theory.torch.plan.keys import Plan, describe, input_key
from remat_theory.torch.plan.offload import OffloadRun, check_bandwidth
from remat_theory.torch.profiling.profiler import profile_details, stage_draws
from remat_theory.torch.run.nested import StageRunner, run_nested
from remat_theory.torch.run.offload_run import run_offload

__all__ = ["CheckpointedSequential", "Budget", "CheckpointOptions", "Plain", "Nested",
           "Offloaded", "PLAIN", "strategy_for"]


# ---------------------------------------------------------------------- strategies
# How the drop-in runs one plan: a strategy object, chosen once when the plan is made
# (strategy_for), with one method, run(stages, x, call).  ``call`` is the call's token from
# the chain's ChainInputs (None for stages without other inputs): a recomputation in the
# backward checks that the call's inputs are still the installed ones (GuardedRunner; issue
# #38: every tensor of a call belongs to it).  The two recomputing strategies are kept out
# of torch.compile: a compiled graph would recompute what the compiler chooses, not what
# the schedule says; compiled stages still run compiled inside them.

class Plain:
    """The stages as plain autograd."""

    name = "plain"

    def run(self, stages, x: torch.Tensor, call=None) -> torch.Tensor:
        for s in stages:
            x = s(x)
        # plain autograd recomputes nothing: the values the first stage handed the others
        # (a seam capture's rotary tables, masks) are not read again, so they are let go
        # now, as the model's own forward lets them go (autograd keeps what it saved)
        release_carried(stages)
        return x


PLAIN = Plain()


class Nested:
    """A persistent schedule's nested form (``tree``), with its stages' ``draws`` (which
    draw random numbers: their checkpoints keep the generator state)."""

    name = "nested"

    def __init__(self, tree, early_stop: bool, draws, keeper=None) -> None:
        self.tree, self.early_stop, self.draws, self.keeper = tree, early_stop, draws, keeper

    @torch.compiler.disable
    def run(self, stages, x: torch.Tensor, call=None) -> torch.Tensor:
        runner = StageRunner(stages)
        if call is not None:  # recomputations check that the call's inputs are installed
            runner = GuardedRunner(runner, self.keeper, call)
        return run_nested(self.tree, x, runner, self.early_stop, self.draws)


class Offloaded:
    """A schedule with transfers (``run``: its :class:`OffloadRun`).  Its backward runs the
    rest of the schedule, recomputations included: where it recomputes and the call has
    other inputs, the backward first checks that they are still the call's (as
    :class:`Nested`'s recomputations do, stage by stage)."""

    name = "offload"

    def __init__(self, run: OffloadRun, output_saved, keeper=None) -> None:
        self.plan_run, self.output_saved, self.keeper = run, output_saved, keeper

    @torch.compiler.disable
    def run(self, stages, x: torch.Tensor, call=None) -> torch.Tensor:
        y = run_offload(self.plan_run, stages, x, self.output_saved)
        if call is not None and self.plan_run.recomputed and y.requires_grad:
            keeper = self.keeper

            def check(grad):  # runs before the schedule's backward (it produced y)
                keeper.guard(call)
                return grad
            y.register_hook(check)
        return y


def strategy_for(plan: Plan, early_stop: bool, draws, keeper=None):
    """The strategy that runs ``plan`` (its tree: None, a nested form or an offload run)."""
    if plan.tree is None:
        return PLAIN
    if isinstance(plan.tree, OffloadRun):
        return Offloaded(plan.tree, plan.chain.output_saved, keeper)
    return Nested(plan.tree, early_stop, draws, keeper)


def _sum_loss(out: torch.Tensor) -> torch.Tensor:
    """The loss stage profiled when no ``loss_fn`` is given: a sum (its gradient is d_L)."""
    return out.float().sum()



def _optimizer_bytes(optimizer_state) -> int:
    if optimizer_state is None:
        return 0
    if isinstance(optimizer_state, numbers.Integral) and not isinstance(optimizer_state, bool):
        if optimizer_state < 0:
            raise RematError(f"optimizer_state = {optimizer_state!r} bytes must be >= 0")
        return int(optimizer_state)
    if isinstance(optimizer_state, torch.optim.Optimizer):
        return optimizer_state_bytes(optimizer_state)
    raise RematError(f"optimizer_state = {optimizer_state!r} must be bytes (int) or a "
                     f"torch.optim.Optimizer")


class CheckpointedSequential(nn.Module):
    """A drop-in replacement for an ``nn.Sequential`` that trains within ``budget``.

    Parameters
    ----------
    model : nn.Module
        An ``nn.Sequential`` (nested ones flattened) or a list of stage modules.
    budget : Budget, str or float
        ``Budget.step(...)`` or a str with a unit (``"6GiB"``): the whole step (activations,
        parameter gradients, loss and workspaces above the resident model, see the module
        docstring); ``Budget.fraction(f)`` or a float in (0, 1]: a fraction of the store-all
        peak of each input shape; ``Budget.activations(n)``: bytes of activation memory as
        the chain counts it.  An ambiguous form raises :class:`RematError`, a plain int
        among them (bytes of activations, or of the step as ``rematerialize`` reads it?).  At or above the store-all peak (plus the reserve for parameters
        shared by several stages, :func:`shared_parameter_bytes`; the fraction 1.0 is
        store-all) the stages run as plain autograd (no recomputation: store-all is then
        the fastest schedule).
    solver : str
        A registry name (``remat solvers``) of a solver with persistent schedules (default
        ``"dp"``).
    example_input : torch.Tensor, optional
        An input of the training shape, profiled at construction (otherwise the first
        training input is).
    loss_fn : callable, optional
        Maps the model output to a scalar loss; profiled as the loss stage, for every input
        shape (so it must accept each shape's output).  None: profiled as ``out.sum()``.
    device : optional
        Where to profile (default: the input's device).
    solver_options : dict, optional
        Extra solver options (e.g. ``{"time_limit": 30}``).
    optimizer_state : int or torch.optim.Optimizer, optional
        With a step budget: the budget holds the optimizer's state too (its bytes, or an
        optimizer, :func:`optimizer_state_bytes`).
    bandwidth : float or "measure", optional
        A device-host copy channel for the chain (bytes per second, or measured on the
        profiling device), so that a solver that models it (``exhaustive-offload``,
        ``save-on-cpu``, ``offload-all``, ...) may plan offloads.  A schedule with transfers
        runs on the offload executor (:class:`Offloaded`).  Default None: no channel.
    options : CheckpointOptions or dict, optional
        Profiling and running knobs (:class:`CheckpointOptions`: ``profile_repeats``,
        ``unit``, ``reprofile``, ``early_stop``, and a profile made elsewhere: ``chain``,
        ``draws_random``, ``input_grad_bytes``, ``loss_bytes``).  Those names as keywords
        (earlier versions) still work, with a DeprecationWarning.

    Raises
    ------
    InfeasibleBudgetError
        The budget is below the solver's smallest feasible one (named in the message).
    RematError
        Bad arguments (naming the argument and value); a schedule without nested form;
        ``reprofile=False`` and a new input.

    Attributes: ``plans`` (dict: input key -> :class:`Plan`); ``chain``, ``solution``,
    ``schedule`` and ``budget`` (bytes of the chain) of the first plan (the example
    input's); ``budget_spec`` (the :class:`Budget` given), ``options``.

    Examples
    --------
    >>> _ = torch.manual_seed(0)
    >>> model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
    ...                       nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 4))
    >>> x = torch.randn(32, 16)
    >>> ck = CheckpointedSequential(model, Budget.fraction(0.75), example_input=x,
    ...                             options=CheckpointOptions(profile_repeats=1, unit=1))
    >>> ck(x).sum().backward()
    >>> ck.plan.recomputed > 0
    True
    >>> CheckpointedSequential(model, 4096, example_input=x)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    remat_theory.model.errors.RematError: budget = 4096 is a plain int, refused: ...
    """

    def __init__(self, model, budget, solver: str = "dp", *, example_input=None, loss_fn=None,
                 device=None, solver_options=None, optimizer_state=None, bandwidth=None,
                 options=None, **legacy):
        super().__init__()
        options = options_from(options, legacy)
        budget = Budget.of(budget)
        optimizer_bytes = _optimizer_bytes(optimizer_state)
        if optimizer_bytes and budget.kind != "step":
            raise RematError(f"optimizer_state applies to a budget of the whole step (a str "
                             f"with a unit, e.g. budget='6GiB', or Budget.step), not to "
                             f"budget = {budget}")
        stages = split_stages(model)
        chain = options.chain
        if chain is not None and chain.length != len(stages):
            raise RematError(f"the chain has {chain.length} stages but the model has "
                             f"{len(stages)}")
        if chain is not None and example_input is None and (
                options.draws_random is not None or options.input_grad_bytes is not None
                or options.loss_bytes is not None):
            raise RematError("a profile's draws_random, input_grad_bytes and loss_bytes "
                             "(CheckpointOptions) belong to example_input: give it too")
        if example_input is None and chain is None:
            raise RematError("CheckpointedSequential needs example_input (the training input "
                             "shape) or a precomputed chain (CheckpointOptions(chain=...))")
        self.stages = nn.ModuleList(stages)
        self.bandwidth = check_bandwidth(bandwidth)
        self.budget_spec = budget
        self.options = options
        self.solver = solver
        self.loss_fn = loss_fn
        self.device = device
        # kept beside the module, not registered in it: a captured chain's other inputs
        # (masks, labels: given with every call) and the planning state
        object.__setattr__(self, "_call_inputs", inputs_of(stages))
        object.__setattr__(self, "_planner", Planner(
            self.stages, budget, solver=solver, solver_options=solver_options,
            loss_fn=loss_fn, device=device, options=options, bandwidth=self.bandwidth,
            optimizer_bytes=optimizer_bytes))
        self.plans: dict = {}
        self._strategies: dict = {}  # input key -> (plan, how it runs: Plain, Nested, ...)
        self._first_key = None
        self._given_chain = chain
        if example_input is not None:
            key = input_key(example_input)
            self._planner.given_profile(key)
            self._add_plan(key, example_input, chain)

    # ------------------------------------------------------------------ what it was given
    @property
    def step_budget(self) -> int | None:
        """Bytes of a step budget (None for the other kinds)."""
        return self._planner.step_budget

    @property
    def optimizer_bytes(self) -> int:
        return self._planner.optimizer_bytes

    @property
    def gradient_bytes(self) -> int:
        """Bytes of the stages' parameter gradients (reserved by a step budget)."""
        return self._planner.gradient_bytes

    @property
    def shared_gradient_reserve(self) -> int:
        """Bytes every budget reserves for the summed gradient of shared parameters."""
        return self._planner.shared_gradient_reserve

    @property
    def solver_options(self) -> dict:
        return self._planner.solver_options

    # ------------------------------------------------------------------ plans
    @property
    def plan(self) -> Plan:
        """The first plan (the example input's, or the first training input's)."""
        if self._first_key is None:
            raise RematError("no plan yet: give example_input or run a training step")
        return self.plans[self._first_key]

    @property
    def chain(self) -> Chain:
        return self.plan.chain

    @property
    def solution(self) -> Solution:
        return self.plan.solution

    @property
    def schedule(self) -> Schedule:
        return self.plan.schedule

    @property
    def budget(self) -> int:
        """Bytes of the chain the first plan was solved for."""
        return self.plan.budget

    @property
    def unit(self) -> int:
        return self._planner.unit(self.chain)

    @property
    def stages_list(self) -> list:
        return list(self.stages)

    def draws_random(self, key: tuple | None = None) -> tuple | None:
        """Which stages of input ``key`` (default: the first plan's) draw random numbers."""
        return self._planner.draws.get(self._first_key if key is None else key)

    def strategy(self, key: tuple | None = None):
        """How the plan of input ``key`` (default: the first) runs: :class:`Plain`,
        :class:`Nested` or :class:`Offloaded`."""
        return self._strategy_of(self.plans[self._first_key if key is None else key])

    def _strategy_of(self, plan: Plan):
        """The strategy of ``plan``, chosen once per plan (a plan put in ``plans`` by hand,
        in place of the solver's, gets its own)."""
        held = self._strategies.get(plan.key)
        if held is None or held[0] is not plan:
            held = self._strategies[plan.key] = (plan, strategy_for(
                plan, self.options.early_stop, self._planner.draws.get(plan.key),
                self._call_inputs))
        return held[1]

    def step_reserve(self, chain: Chain | None = None, step_budget: int | None = None) -> int:
        """Bytes of a step budget that the schedule does not get: parameter gradients,
        optimizer state, :data:`STEP_SLACK`, and :data:`ENGINE_MARGIN` of what is left (see
        the module docstring).  The random-generator states the checkpoints keep are not in
        it: the schedule's share counts them where they live (:func:`solve_with_states`).
        ``chain`` is accepted for compatibility; the reserve does not depend on it."""
        return self._planner.step_reserve(step_budget)

    def plain_step_bytes(self, chain: Chain | None = None) -> int:
        """What a step budget needs to run the stages as plain autograd (nothing recomputed,
        no checkpoint): store-all, the reserve for shared parameters' summed gradient,
        parameter gradients, optimizer state, :data:`STEP_SLACK`."""
        return self._planner.plain_step_bytes(self.chain if chain is None else chain,
                                              self._first_key)

    def smallest_step_budget(self, chain: Chain, chain_budget: int) -> int:
        """The smallest step budget (bytes) whose share for the schedule is ``chain_budget``."""
        return self._planner.smallest_step_budget(chain, chain_budget, self._first_key)

    def carried_bytes(self, key: tuple | None = None) -> int:
        """Bytes reserved at every budget of input ``key`` (default: the first plan's) for the
        values the first stage hands the others (:func:`carried_step_bytes`)."""
        return self._planner.carried.get(self._first_key if key is None else key, 0)

    def _profile(self, key: tuple, x: torch.Tensor) -> Chain:
        loss_fn = _sum_loss if self.loss_fn is None else self.loss_fn
        try:
            prof = profile_details(self.stages_list, x, loss_fn, self.device,
                                   repeats=self.options.profile_repeats)
        except RematError:
            raise
        except Exception as e:  # the user's stages or loss_fn failed on this input
            raise RematError(f"profiling the model for input {describe(key)} failed: "
                             f"{type(e).__name__}: {e}" + (
                                 "; the loss_fn must accept the output of every input shape "
                                 "(or pass loss_fn=None to profile the loss as a sum)"
                                 if self.loss_fn is not None else "")) from e
        self._planner.record_profile(key, prof.draws_random, prof.input_grad_bytes,
                                     prof.loss_bytes)
        return prof.chain

    def _add_plan(self, key: tuple, x: torch.Tensor | None, chain: Chain | None) -> Plan:
        if chain is None:
            chain = self._profile(key, x)
        elif key not in self._planner.draws and x is not None:  # given without draws_random
            self._planner.draws[key] = tuple(stage_draws(self.stages_list, x, self.device))
        plan = self._planner.make_plan(key, x, chain)
        self.plans[key] = plan
        self._strategy_of(plan)
        if self._first_key is None:
            self._first_key = key
        return plan

    def plan_for(self, x: torch.Tensor) -> Plan:
        """The plan for inputs like ``x`` (profiled and solved on first sight, unless
        ``reprofile=False``, which raises)."""
        key = input_key(x)
        plan = self.plans.get(key)
        if plan is not None:
            return plan
        if self._first_key is None and self._given_chain is not None:
            return self._add_plan(key, x, self._given_chain)
        if not self.options.reprofile:
            known = "; ".join(describe(k) for k in self.plans)
            raise RematError(f"input {describe(key)} has no schedule (profiled: {known}) and "
                             f"reprofile=False; construct with CheckpointOptions(reprofile="
                             f"True) to profile and solve each new input shape/dtype, or feed "
                             f"the profiled shape")
        return self._add_plan(key, x.detach(), None)

    # ------------------------------------------------------------------ running
    def compile_stages(self, **options) -> "CheckpointedSequential":
        """Replace every stage by ``torch.compile(stage, **options)`` (parameters shared) and
        forget the plans (compiled stages save other tensors: they are profiled again).
        Returns self."""
        for i, stage in enumerate(list(self.stages)):
            self.stages[i] = torch.compile(stage, **options)
        self.plans.clear()
        self._strategies.clear()
        self._first_key = None
        self._given_chain = None
        return self

    def forward(self, x: torch.Tensor, **others) -> torch.Tensor:
        """One call on ``x``; ``others``: the other inputs of a captured chain for this
        call (``ck(x, attention_mask=..., labels=...)``, every one; see :mod:`.call_inputs`).
        Runs the strategy of ``x``'s plan (plain autograd when not training, under
        ``no_grad``, or when nothing requires grad)."""
        keeper = self._call_inputs
        token = None
        if keeper is not None:
            token = keeper.take(others, "ck")
        elif others:
            raise RematError(f"these stages take no other inputs ({', '.join(others)} given): "
                             f"only a chain captured from a dict example has them")
        strategy = PLAIN
        if self.training and torch.is_grad_enabled() and (
                x.requires_grad or any(p.requires_grad for p in self.parameters())):
            strategy = self._strategy_of(self.plan_for(x))
        return strategy.run(self.stages_list, x, token)
