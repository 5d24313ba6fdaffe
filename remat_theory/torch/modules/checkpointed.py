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

Shapes.  The chain, hence the schedule, depends on the input's shape and dtype (and on
the autocast state).  Each new (shape, dtype, device, autocast) is profiled and solved once
and cached; with ``reprofile=False`` a new one raises
:class:`~remat_theory.model.errors.RematError` instead.  A float budget is a fraction of
each shape's own store-all peak; an int budget is the same bytes for every shape.

Not run by the schedule (the plain stages run instead): ``eval()`` mode, ``torch.no_grad()``,
and inputs where neither the input nor any parameter requires grad.

``torch.compile``: compile the stages (:meth:`CheckpointedSequential.compile_stages`).
``torch.compile(ck)`` works, but the part that runs a recomputing schedule is excluded from
compilation (``torch.compiler.disable``) and runs as without it, compiled stages included:
a compiled graph of the whole step would recompute what the compiler chooses, not what the
schedule says.  At a budget at or above store-all, where it is plain autograd, the whole
forward is compiled.

Budgets in the user's units.  ``budget="6GiB"`` (a string with a unit: B, KB, MB, GB, KiB,
MiB, GiB, TiB) is the whole training step's peak above the model's resident state, as the
allocator measures it from the start of the step (parameters and buffers present, no
parameter gradient, as after ``optimizer.zero_grad()``) to the end of ``loss.backward()``:
activations, parameter gradients, the loss, workspaces.  With ``optimizer_state=`` (bytes, or
an optimizer: :func:`optimizer_state_bytes`) the budget holds the optimizer's state too.  The
module reserves what the schedule does not count (:meth:`CheckpointedSequential.step_reserve`:
parameter gradients, optimizer state, the loss and its seed gradient, and 1% of the rest
for the engine's buffers a recomputation meets) and solves for the remainder, in which the
random-generator states the checkpoints keep are counted where they live (as for an int
budget, below); a budget it cannot meet raises
:class:`~remat_theory.model.errors.InfeasibleBudgetError` naming the smallest one, in bytes.

Memory: an int or float budget covers x_0, the activations, tapes and gradients of the stages and the
loss stage as profiled (``loss_fn``).  The profiled chain says which stage outputs no
backward reads (``output_saved``: a Linear's output before a ReLU); autograd frees those as
soon as the next stage has read them, as the chain's operation table does, so at store-all
the module's peak is the chain's prediction (the loss value and its seed gradient aside;
the plan counts the loss tensor, ``ProfileResult.loss_bytes``: on a recomputing schedule
whole, for plain autograd what a reduction buffer holds beyond a scalar, e.g. an MSE's on
the CPU, the size of the output: plain autograd starts that much above store-all).  Parameters, gradients and optimizer state are not
part of it, except one thing autograd adds: the summed gradient of parameters used by
several stages, which every budget reserves (:func:`shared_parameter_bytes`; a budget
below store-all plus that reserve is solved with it taken out), and, for a chain captured
at the model's seams, the values its first stage hands the others (rotary tables, position
ids, masks), made anew at every step and held to its end: every budget reserves them too
(:func:`carried_step_bytes`, :meth:`CheckpointedSequential.carried_bytes`).
On the CPU an int or float budget also covers the random-generator states the checkpoints
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
(:mod:`~remat_theory.torch.modules.offload`; docs/offload_torch.md).
"""
from __future__ import annotations

import math
import numbers

import torch
from torch import nn

import solvers as solver_registry
from remat_theory.model.chain import Chain
from remat_theory.model.errors import InfeasibleBudgetError, RematError
from remat_theory.model.schedule import Schedule
from remat_theory.model.simulator import simulate
from remat_theory.model.solution import Solution
from remat_theory.torch.capture.call_inputs import GuardedRunner, inputs_of
from remat_theory.torch.capture.carried import release_carried
from remat_theory.torch.capture.stages import split_stages
from remat_theory.torch.plan.budget import (ENGINE_MARGIN, RNG_STATE_BYTES, STEP_SLACK,
                                            carried_step_bytes, format_bytes, gradient_bytes,
                                            optimizer_state_bytes, parse_bytes)
from remat_theory.torch.plan.keys import Plan, describe, input_key
from remat_theory.torch.plan.levels import (LOSS_BYTES, dropin_peak, plain_loss_bytes,
                                            shared_parameter_bytes, smallest_with_states,
                                            solve_with_states)
from remat_theory.torch.plan.nested_form import checkpoint_state_bytes
from remat_theory.torch.plan.offload import OffloadRun, check_bandwidth
from remat_theory.torch.plan.rounding import auto_unit, rounded_chain
from remat_theory.torch.profiling.bandwidth import chain_with_bandwidth
from remat_theory.torch.profiling.profiler import profile_details, stage_draws
from remat_theory.torch.run.nested import StageRunner, run_nested
from remat_theory.torch.run.offload_run import run_offload


def _sum_loss(out: torch.Tensor) -> torch.Tensor:
    """The loss stage profiled when no ``loss_fn`` is given: a sum (its gradient is d_L)."""
    return out.float().sum()


class CheckpointedSequential(nn.Module):
    """A drop-in replacement for an ``nn.Sequential`` that trains within ``budget``.

    Parameters
    ----------
    model : nn.Module
        An ``nn.Sequential`` (nested ones flattened) or a list of stage modules.
    budget : int, float or str
        Bytes of the whole step with a unit (str, e.g. ``"6GiB"``: activations, parameter
        gradients, loss and workspaces above the resident model, see the module docstring),
        bytes of activation memory as the chain counts it (int), or a fraction in (0, 1] of
        the store-all peak of each input shape (float).  At or above the store-all peak (plus
        the reserve for parameters shared by several stages, :func:`shared_parameter_bytes`;
        the fraction 1.0 is store-all) the stages run as plain autograd (no recomputation: store-all is then the fastest
        schedule).
    optimizer_state : int or torch.optim.Optimizer, optional
        With a str budget: the budget holds the optimizer's state too (its bytes, or an
        optimizer, :func:`optimizer_state_bytes`).
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
    chain : Chain, optional
        A precomputed chain for ``example_input`` (skips its profiling).
    profile_repeats : int
        Timed repetitions per profile (median taken).
    unit : int, optional
        The solver sees sizes rounded up to multiples of ``unit`` bytes (default: a power of
        two near store-all / 2048; see :mod:`.rounding`); 1 solves in exact bytes.
    reprofile : bool
        On an input of a new shape/dtype/device/autocast state: profile and solve it (True,
        default) or raise :class:`RematError` (False).
    early_stop : bool
        Stop each recomputation once it has produced what the backward needs (default;
        skips forwards whose results nothing saves, see :func:`.nested.run_nested`);
        False recomputes every forward of the schedule.
    bandwidth : float or "measure", optional
        A device-host copy channel for the chain (bytes per second, or measured on the
        profiling device), so that a solver that models it (``exhaustive-offload``,
        ``save-on-cpu``, ``offload-all``, ...) may plan offloads.  A schedule with transfers
        runs on the offload executor (:mod:`.offload_module`).  Default None: no channel.

    Raises
    ------
    InfeasibleBudgetError
        The budget is below the solver's smallest feasible one (named in the message).
    RematError
        Bad arguments; a schedule without nested form; ``reprofile=False`` and a new input.

    Attributes: ``plans`` (dict: input key -> :class:`Plan`); ``chain``, ``solution``,
    ``schedule`` and ``budget`` of the first plan (the example input's).

    Examples
    --------
    >>> from remat_theory.lab.networks import build
    >>> net = build("mlp", "test")
    >>> ck = CheckpointedSequential(net.model, 0.8, example_input=net.example_input,
    ...                             loss_fn=net.loss_fn, profile_repeats=1)
    >>> net.loss_fn(ck(net.example_input)).backward()
    >>> ck.plan.recomputed > 0
    True
    """

    def __init__(self, model, budget, solver: str = "dp", *, example_input=None, loss_fn=None,
                 device=None, solver_options=None, chain=None, profile_repeats: int = 3,
                 unit: int | None = None, reprofile: bool = True, early_stop: bool = True,
                 optimizer_state=None, bandwidth=None, draws_random=None,
                 input_grad_bytes=None, loss_bytes=None):
        super().__init__()
        self.bandwidth = check_bandwidth(bandwidth)
        stages = split_stages(model)
        self.stages = nn.ModuleList(stages)
        # a captured chain's other inputs (masks, labels): given with every call
        object.__setattr__(self, "_call_inputs", inputs_of(stages))
        self.step_budget = None
        if isinstance(budget, str):
            self.step_budget = parse_bytes(budget)
        elif isinstance(budget, bool) or not isinstance(budget, numbers.Real):
            raise RematError(f"budget = {budget!r} must be bytes of the step with a unit "
                             f"(str, e.g. '6GiB'), bytes of activations (int) or a fraction "
                             f"(float)")
        elif not isinstance(budget, numbers.Integral) and not 0 < budget <= 1:
            raise RematError(f"budget = {budget!r}: a float budget is a fraction of the "
                             f"store-all peak and must be in (0, 1]")
        elif isinstance(budget, numbers.Integral) and budget <= 0:
            raise RematError(f"budget = {budget!r} bytes must be positive")
        if optimizer_state is None:
            self.optimizer_bytes = 0
        elif isinstance(optimizer_state, numbers.Integral) and not isinstance(optimizer_state, bool):
            if optimizer_state < 0:
                raise RematError(f"optimizer_state = {optimizer_state!r} bytes must be >= 0")
            self.optimizer_bytes = int(optimizer_state)
        elif isinstance(optimizer_state, torch.optim.Optimizer):
            self.optimizer_bytes = optimizer_state_bytes(optimizer_state)
        else:
            raise RematError(f"optimizer_state = {optimizer_state!r} must be bytes (int) or a "
                             f"torch.optim.Optimizer")
        if self.optimizer_bytes and self.step_budget is None:
            raise RematError("optimizer_state applies to a budget of the whole step (a str "
                             "with a unit, e.g. budget='6GiB')")
        self.gradient_bytes = gradient_bytes(stages)
        if not isinstance(reprofile, bool):
            raise RematError(f"reprofile = {reprofile!r} must be True or False")
        self.budget_spec = budget
        self.solver = solver
        self.solver_options = dict(solver_options or {})
        self.loss_fn = loss_fn
        self.device = device
        self.profile_repeats = profile_repeats
        self.unit_option = unit
        self.reprofile = reprofile
        self.early_stop = bool(early_stop)
        self.plans: dict = {}
        # per input key: which stages draw random numbers (profiled; None: assume all)
        self._draws: dict = {}
        if draws_random is not None:
            if chain is None or len(draws_random) != chain.length:
                raise RematError("draws_random (one bool per stage) goes with chain=")
            self._draws[input_key(example_input)] = tuple(bool(v) for v in draws_random)
        # per input key, profiled: bytes B_0 holds less when the input needs no gradient,
        # and what the loss tensor and its seed hold from the loss on
        self._input_grad: dict = {}
        self._loss_bytes: dict = {}
        for name, value, table in (("input_grad_bytes", input_grad_bytes, self._input_grad),
                                   ("loss_bytes", loss_bytes, self._loss_bytes)):
            if value is None:
                continue
            if chain is None or example_input is None:
                raise RematError(f"{name} (ProfileResult.{name}) goes with chain= and "
                                 f"example_input=")
            table[input_key(example_input)] = int(value)
        self.shared_gradient_reserve = 2 * shared_parameter_bytes(stages)
        # per input key: the values the first stage hands the others (carried_step_bytes),
        # held through the whole step and reserved at every budget like the shared gradients
        self._carried: dict = {}
        self._key_now = None
        self._first_key = None
        if chain is not None and chain.length != len(stages):
            raise RematError(f"the chain has {chain.length} stages but the model has {len(stages)}")
        self._given_chain = chain
        if example_input is not None:
            self._add_plan(input_key(example_input), example_input, chain)
        elif chain is None:
            raise RematError("CheckpointedSequential needs example_input (the training input "
                             "shape) or a precomputed chain")

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
        return self.plan.budget

    @property
    def unit(self) -> int:
        return auto_unit(self.chain) if self.unit_option is None else int(self.unit_option)

    @property
    def stages_list(self) -> list:
        return list(self.stages)

    def _device_of(self, x) -> torch.device:
        if self.device is not None:
            return torch.device(self.device)
        if x is not None:
            return x.device
        p = next(iter(self.parameters()), None)
        return p.device if p is not None else torch.device("cpu")

    def _profile(self, key: tuple, x: torch.Tensor) -> Chain:
        loss_fn = _sum_loss if self.loss_fn is None else self.loss_fn
        try:
            prof = profile_details(self.stages_list, x, loss_fn, self.device,
                                   repeats=self.profile_repeats)
            self._draws[key] = tuple(prof.draws_random)
            self._input_grad[key] = prof.input_grad_bytes
            self._loss_bytes[key] = prof.loss_bytes
            return prof.chain
        except RematError:
            raise
        except Exception as e:  # the user's stages or loss_fn failed on this input
            raise RematError(f"profiling the model for input {describe(key)} failed: "
                             f"{type(e).__name__}: {e}" + (
                                 "; the loss_fn must accept the output of every input shape "
                                 "(or pass loss_fn=None to profile the loss as a sum)"
                                 if self.loss_fn is not None else "")) from e

    def step_reserve(self, chain: Chain | None = None, step_budget: int | None = None) -> int:
        """Bytes of a step budget (str) that the schedule does not get: parameter gradients,
        optimizer state, :data:`STEP_SLACK`, and :data:`ENGINE_MARGIN` of what is left (see
        the module docstring).  The random-generator states the checkpoints keep are not in
        it: the schedule's share counts them where they live (:func:`solve_with_states`).
        ``chain`` is accepted for compatibility; the reserve does not depend on it."""
        step_budget = self.step_budget if step_budget is None else step_budget
        fixed = self.gradient_bytes + self.optimizer_bytes + STEP_SLACK
        if step_budget is None:
            return fixed
        return fixed + int(math.ceil(max(0, step_budget - fixed) * ENGINE_MARGIN
                                     / (1 + ENGINE_MARGIN)))

    def plain_step_bytes(self, chain: Chain | None = None) -> int:
        """What a step budget needs to run the stages as plain autograd (nothing recomputed,
        no checkpoint): store-all, the reserve for shared parameters' summed gradient,
        parameter gradients, optimizer state, :data:`STEP_SLACK`."""
        chain = self.chain if chain is None else chain
        return (chain.store_all_memory() + self._fixed_reserve() + self.gradient_bytes
                + self.optimizer_bytes + STEP_SLACK)

    def _chain_budget(self, chain: Chain, plain_extra: int = 0) -> int:
        spec = self.budget_spec
        plain = chain.store_all_memory() + self._fixed_reserve() + plain_extra
        if self.step_budget is not None:
            if self.step_budget >= self.plain_step_bytes(chain):
                return plain
            return self.step_budget - self.step_reserve(chain)
        if isinstance(spec, numbers.Integral):
            return int(spec)
        if spec >= 1:  # the fraction 1: store-all, plain autograd
            return plain
        return int(spec * chain.store_all_memory())

    def smallest_step_budget(self, chain: Chain, chain_budget: int) -> int:
        """The smallest step budget (bytes) whose share for the schedule is ``chain_budget``."""
        step = self.step_reserve(chain, 0) + chain_budget
        step += int(math.ceil(chain_budget * ENGINE_MARGIN))
        while step - self.step_reserve(chain, step) < chain_budget:
            step += 1
        return min(step, self.plain_step_bytes(chain))

    def carried_bytes(self, key: tuple | None = None) -> int:
        """Bytes reserved at every budget of input ``key`` (default: the first plan's) for the
        values the first stage hands the others (:func:`carried_step_bytes`)."""
        return self._carried.get(self._first_key if key is None else key, 0)

    def _fixed_reserve(self) -> int:
        """What every budget of the input being planned reserves beside the schedule's peak:
        the shared parameters' summed gradient and the carried values."""
        key = self._key_now if self._key_now is not None else self._first_key
        return self.shared_gradient_reserve + self._carried.get(key, 0)

    def _add_plan(self, key: tuple, x: torch.Tensor | None, chain: Chain | None) -> Plan:
        self._key_now = key
        try:
            return self._add_plan_for(key, x, chain)
        finally:
            self._key_now = None

    def _add_plan_for(self, key: tuple, x: torch.Tensor | None, chain: Chain | None) -> Plan:
        if chain is None:
            chain = self._profile(key, x)
        if key not in self._carried:
            self._carried[key] = carried_step_bytes(self.stages_list, x, self.device)
        carried = self._carried[key]
        chain = chain_with_bandwidth(chain, self.bandwidth,
                                     self.device or (x.device if x is not None else "cpu"))
        store_all = chain.store_all_memory()
        loss = self._loss_bytes.get(key)  # the loss tensor and its seed (None: LOSS_BYTES)
        plain_extra = plain_loss_bytes(LOSS_BYTES if loss is None else loss)
        budget = self._chain_budget(chain, plain_extra)
        if key not in self._draws and x is not None:  # a chain given without draws_random
            self._draws[key] = tuple(stage_draws(self.stages_list, x, self.device))
        draws = self._draws.get(key)
        state_bytes = RNG_STATE_BYTES if self._device_of(x).type == "cpu" else 0
        if self.step_budget is not None and budget <= 0:
            smallest = self.smallest_step_budget(
                chain, self._smallest_chain_budget(chain, draws, state_bytes, loss))
            raise InfeasibleBudgetError(
                f"budget {format_bytes(self.step_budget)} for the whole step cannot be met on "
                f"input {describe(key)}: parameter gradients take "
                f"{format_bytes(self.gradient_bytes)}"
                + (f" and the optimizer state {format_bytes(self.optimizer_bytes)}"
                   if self.optimizer_bytes else "")
                + f", and what the schedule does not count "
                  f"{format_bytes(self.step_reserve(chain) - self.gradient_bytes - self.optimizer_bytes)}"
                + f"; the smallest feasible step budget is {format_bytes(smallest)}",
                self.step_budget, smallest)
        # the random-generator states the checkpoints keep (CPU: memory the schedule holds
        # beside the chain's values; on CUDA they are host memory) are counted at each
        # operation (nested.checkpoint_state_bytes); where they would take the solver's
        # schedule over the budget, the best schedule level that fits runs
        # (solve_with_states)
        # plain autograd from store-all, the loss tensor's buffer beyond a scalar counted
        if budget >= store_all + self._fixed_reserve() + plain_extra:
            sol = solver_registry.solve(chain.replace(bandwidth=None), store_all, "store-all")
            tree, extra = None, 0
            peak = dropin_peak(self.stages_list, simulate(chain, sol.schedule), None,
                               sol.schedule,
                               loss_bytes=plain_loss_bytes(LOSS_BYTES if loss is None else loss))
        else:
            unit = auto_unit(chain) if self.unit_option is None else int(self.unit_option)
            sol, tree, peak, extra = self._solve_with_states(chain, unit, budget, draws,
                                                             state_bytes, loss)
            reserve = self._fixed_reserve() + extra
            if peak is None:
                start = budget + 1 if sol.schedule is not None else (
                    None if sol.min_budget is None else sol.min_budget + reserve)
                smallest = None if start is None else self._smallest_with_states(
                    chain, unit, start, draws, state_bytes, loss)
            if peak is None and self.step_budget is not None:
                smallest = None if smallest is None else self.smallest_step_budget(chain, smallest)
                raise InfeasibleBudgetError(
                    f"budget {format_bytes(self.step_budget)} for the whole step cannot be met "
                    f"by solver {self.solver!r} on input {describe(key)}"
                    + (f"; the smallest feasible step budget is {format_bytes(smallest)}"
                       if smallest is not None else "")
                    + f" (of a step budget, {format_bytes(self.gradient_bytes)} go to parameter "
                      f"gradients"
                    + (f", {format_bytes(self.optimizer_bytes)} to optimizer state"
                       if self.optimizer_bytes else "")
                    + f"; the plain step needs about "
                      f"{format_bytes(self.plain_step_bytes(chain))})",
                    self.step_budget, smallest)
            if peak is None:
                raise InfeasibleBudgetError(
                    f"budget {budget} B is infeasible for solver {self.solver!r} on input "
                    f"{describe(key)}"
                    + (f"; the smallest feasible budget is {smallest} B"
                       if smallest is not None else "")
                    + (f" ({self.shared_gradient_reserve} B of it reserved for the gradient of "
                       f"parameters shared by several stages)" if self.shared_gradient_reserve else "")
                    + (f" ({self._carried.get(key, 0)} B of it reserved for the values the "
                       f"first stage hands the others, carried_step_bytes)"
                       if self._carried.get(key, 0) else "")
                    + (f" (the random-generator states its checkpoints keep take the "
                       f"solver's schedule {extra} B over this budget, and no schedule of a "
                       f"smaller peak fits with its states)" if extra else "")
                    + f" (store-all needs {store_all + self._fixed_reserve() + plain_extra} B"
                    + (", both figures with the reserve" if self._fixed_reserve() else "")
                    + ")", budget, smallest)
        saving = self._input_grad.get(key, 0)
        if saving and not isinstance(tree, OffloadRun):  # B_0 makes no d_0 (see Plan)
            states = (checkpoint_state_bytes(tree, draws, state_bytes)
                      if tree is not None and state_bytes else None)
            loss = LOSS_BYTES if loss is None else loss
            peak = dropin_peak(self.stages_list, simulate(chain, sol.schedule), states,
                               sol.schedule, saving,
                               loss if tree is not None else plain_loss_bytes(loss))
        plan = Plan(key, chain, budget, sol, sol.schedule, tree, peak + carried)
        self.plans[key] = plan
        if self._first_key is None:
            self._first_key = key
        return plan

    def _solve_with_states(self, chain: Chain, unit: int, budget: int, draws, state_bytes: int,
                           loss_bytes: int | None = None):
        return solve_with_states(chain, unit, budget, draws, state_bytes, solver=self.solver,
                                 solver_options=self.solver_options, stages=self.stages_list,
                                 shared_reserve=self._fixed_reserve(),
                                 loss_bytes=loss_bytes)

    def _smallest_with_states(self, chain: Chain, unit: int, start: int, draws,
                              state_bytes: int, loss_bytes: int | None = None) -> int | None:
        return smallest_with_states(chain, unit, start, draws, state_bytes, solver=self.solver,
                                    solver_options=self.solver_options, stages=self.stages_list,
                                    shared_reserve=self._fixed_reserve(),
                                    loss_bytes=loss_bytes)

    def _smallest_chain_budget(self, chain: Chain, draws=None, state_bytes: int = 0,
                               loss_bytes: int | None = None) -> int:
        unit = auto_unit(chain) if self.unit_option is None else int(self.unit_option)
        sol = solver_registry.solve(rounded_chain(chain, unit), 1, self.solver, **self.solver_options)
        if sol.schedule is not None:
            least = 1 + self._fixed_reserve()
        else:
            least = (sol.min_budget or chain.store_all_memory()) + self._fixed_reserve()
        if state_bytes:  # the random-generator states the checkpoints keep
            least = self._smallest_with_states(chain, unit, least, draws, state_bytes,
                                               loss_bytes) or least
        return least

    def plan_for(self, x: torch.Tensor) -> Plan:
        """The plan for inputs like ``x`` (profiled and solved on first sight, unless
        ``reprofile=False``, which raises)."""
        key = input_key(x)
        plan = self.plans.get(key)
        if plan is not None:
            return plan
        if self._first_key is None and self._given_chain is not None:
            return self._add_plan(key, x, self._given_chain)
        if not self.reprofile:
            known = "; ".join(describe(k) for k in self.plans)
            raise RematError(f"input {describe(key)} has no schedule (profiled: {known}) and "
                             f"reprofile=False; construct with reprofile=True to profile and "
                             f"solve each new input shape/dtype, or feed the profiled shape")
        return self._add_plan(key, x.detach(), None)

    # ------------------------------------------------------------------ running
    def compile_stages(self, **options) -> "CheckpointedSequential":
        """Replace every stage by ``torch.compile(stage, **options)`` (parameters shared) and
        forget the plans (compiled stages save other tensors: they are profiled again).
        Returns self."""
        for i, stage in enumerate(list(self.stages)):
            self.stages[i] = torch.compile(stage, **options)
        self.plans.clear()
        self._first_key = None
        self._given_chain = None
        return self

    def _plain(self, x: torch.Tensor) -> torch.Tensor:
        for s in self.stages:
            x = s(x)
        # plain autograd recomputes nothing: the values the first stage handed the others
        # (a seam capture's rotary tables, masks) are not read again, so they are let go
        # now, as the model's own forward lets them go (autograd keeps what it saved)
        release_carried(self.stages)
        return x

    def forward(self, x: torch.Tensor, **others) -> torch.Tensor:
        """One call on ``x``; ``others``: the other inputs of a captured chain for this
        call (``ck(x, attention_mask=..., labels=...)``, every one; see :mod:`.call_inputs`)."""
        keeper = self._call_inputs
        if keeper is not None:
            token = keeper.take(others, "ck")
        elif others:
            raise RematError(f"these stages take no other inputs ({', '.join(others)} given): "
                             f"only a chain captured from a dict example has them")
        if not (self.training and torch.is_grad_enabled()) or not (
                x.requires_grad or any(p.requires_grad for p in self.parameters())):
            return self._plain(x)
        plan = self.plan_for(x)
        if plan.tree is None:
            return self._plain(x)
        if isinstance(plan.tree, OffloadRun):
            return self._run_offload(plan, x)
        return self._run_schedule(plan.tree, x, None if keeper is None else token)

    @torch.compiler.disable
    def _run_offload(self, plan: Plan, x: torch.Tensor) -> torch.Tensor:
        return run_offload(plan.tree, self.stages_list, x, plan.chain.output_saved)

    @torch.compiler.disable
    def _run_schedule(self, tree, x: torch.Tensor, token=None) -> torch.Tensor:
        # Kept out of torch.compile: a compiled graph would recompute what the compiler
        # chooses, not what the schedule says.  Compiled stages (compile_stages) still run
        # compiled in here.
        runner = StageRunner(self.stages_list)
        if token is not None:  # recomputations check that the call's inputs are installed
            runner = GuardedRunner(runner, self._call_inputs, token)
        return run_nested(tree, x, runner, self.early_stop, self._draws.get(input_key(x)))
