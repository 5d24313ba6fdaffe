"""How the drop-in makes the plan for one input key (:class:`Planner`): given the chain
profiled on the input (the module profiles it), turn the :class:`~.options.Budget` into bytes of the
chain, solve with the states the step adds, and name the smallest feasible budget when the
one given cannot be met.

What a budget of each kind reserves beside the schedule (module docstring of
:mod:`.checkpointed` has the whole contract):

* every kind: the summed gradient of parameters used by several stages
  (:func:`shared_parameter_bytes`, twice) and the values the first stage of a captured
  chain hands the others (:func:`carried_step_bytes`);
* a step budget also: parameter gradients, the optimizer state, :data:`STEP_SLACK` and
  :data:`ENGINE_MARGIN` of what is left (:meth:`Planner.step_reserve`).
"""
from __future__ import annotations

import math

import torch

import solvers as solver_registry
from remat_theory.model.chain import Chain
from remat_theory.model.errors import InfeasibleBudgetError
from remat_theory.model.simulator import simulate
from remat_theory.torch.plan.budget import (ENGINE_MARGIN, RNG_STATE_BYTES, STEP_SLACK,
                                            carried_step_bytes, format_bytes, gradient_bytes)
from remat_theory.torch.plan.keys import Plan, describe
from remat_theory.torch.plan.levels import (LOSS_BYTES, dropin_peak, plain_loss_bytes,
                                            shared_parameter_bytes, smallest_with_states,
                                            solve_with_states)
from remat_theory.torch.plan.nested_form import checkpoint_state_bytes
from remat_theory.torch.plan.offload import OffloadRun
from remat_theory.torch.plan.rounding import auto_unit, rounded_chain
from remat_theory.torch.profiling.bandwidth import chain_with_bandwidth
from remat_theory.torch.modules.options import ACTIVATIONS, STEP, Budget, CheckpointOptions

__all__ = ["Planner"]


class Planner:
    """The drop-in's planning state, kept beside the module: the budget, the solver, the
    profiling options, and per input key what its profile measured (which stages draw
    random numbers, the input-gradient saving, the loss bytes, the carried values)."""

    def __init__(self, stages, budget: Budget, *, solver: str, solver_options, loss_fn,
                 device, options: CheckpointOptions, bandwidth, optimizer_bytes: int) -> None:
        self.stages = stages  # the module's ModuleList (compile_stages replaces its items)
        self.budget = budget
        self.solver = solver
        self.solver_options = dict(solver_options or {})
        self.loss_fn = loss_fn
        self.device = device
        self.options = options  # its unit and a given profile
        self.bandwidth = bandwidth
        self.optimizer_bytes = optimizer_bytes
        self.gradient_bytes = gradient_bytes(list(stages))
        self.shared_gradient_reserve = 2 * shared_parameter_bytes(list(stages))
        # per input key: which stages draw random numbers (profiled; None: assume all),
        # bytes B_0 holds less when the input needs no gradient, what the loss tensor and
        # its seed hold, and the values the first stage hands the others (held through the
        # whole step and reserved at every budget like the shared gradients)
        self.draws: dict = {}
        self.input_grad: dict = {}
        self.loss_bytes: dict = {}
        self.carried: dict = {}

    @property
    def step_budget(self) -> int | None:
        return self.budget.value if self.budget.kind == STEP else None

    def unit(self, chain: Chain) -> int:
        return auto_unit(chain) if self.options.unit is None else int(self.options.unit)

    def given_profile(self, key: tuple) -> None:
        """Record the profile that came with ``options.chain`` under the example's key."""
        o = self.options
        if o.draws_random is not None:
            self.draws[key] = o.draws_random
        if o.input_grad_bytes is not None:
            self.input_grad[key] = o.input_grad_bytes
        if o.loss_bytes is not None:
            self.loss_bytes[key] = o.loss_bytes

    def device_of(self, x) -> torch.device:
        if self.device is not None:
            return torch.device(self.device)
        if x is not None:
            return x.device
        p = next(iter(self.stages.parameters()), None)
        return p.device if p is not None else torch.device("cpu")

    def record_profile(self, key: tuple, draws, input_grad_bytes: int, loss_bytes: int) -> None:
        """What a profile of input ``key`` measured beside its chain (``ProfileResult``)."""
        self.draws[key] = tuple(draws)
        self.input_grad[key] = input_grad_bytes
        self.loss_bytes[key] = loss_bytes

    # ------------------------------------------------------------------ reserves
    def fixed_reserve(self, key) -> int:
        """What every budget of input ``key`` reserves beside the schedule's peak: the shared
        parameters' summed gradient and the carried values."""
        return self.shared_gradient_reserve + self.carried.get(key, 0)

    def step_reserve(self, step_budget: int | None = None) -> int:
        """Bytes of a step budget that the schedule does not get (module docstring)."""
        step_budget = self.step_budget if step_budget is None else step_budget
        fixed = self.gradient_bytes + self.optimizer_bytes + STEP_SLACK
        if step_budget is None:
            return fixed
        return fixed + int(math.ceil(max(0, step_budget - fixed) * ENGINE_MARGIN
                                     / (1 + ENGINE_MARGIN)))

    def plain_step_bytes(self, chain: Chain, key) -> int:
        """What a step budget needs to run the stages as plain autograd."""
        return (chain.store_all_memory() + self.fixed_reserve(key) + self.gradient_bytes
                + self.optimizer_bytes + STEP_SLACK)

    def smallest_step_budget(self, chain: Chain, chain_budget: int, key) -> int:
        """The smallest step budget (bytes) whose share for the schedule is ``chain_budget``."""
        step = self.step_reserve(0) + chain_budget
        step += int(math.ceil(chain_budget * ENGINE_MARGIN))
        while step - self.step_reserve(step) < chain_budget:
            step += 1
        return min(step, self.plain_step_bytes(chain, key))

    def chain_budget(self, chain: Chain, key, plain_extra: int = 0) -> int:
        """The budget in bytes of the chain that ``self.budget`` means for this input (at or
        above ``plain``: run as plain autograd)."""
        plain = chain.store_all_memory() + self.fixed_reserve(key) + plain_extra
        kind, value = self.budget.kind, self.budget.value
        if kind == STEP:
            if value >= self.plain_step_bytes(chain, key):
                return plain
            return value - self.step_reserve()
        if kind == ACTIVATIONS:
            return value
        if value >= 1:  # the fraction 1: store-all, plain autograd
            return plain
        return int(value * chain.store_all_memory())

    # ------------------------------------------------------------------ solving
    def _levels(self, key, chain, unit, budget, draws, state_bytes, loss):
        return solve_with_states(chain, unit, budget, draws, state_bytes, solver=self.solver,
                                 solver_options=self.solver_options, stages=list(self.stages),
                                 shared_reserve=self.fixed_reserve(key), loss_bytes=loss)

    def _smallest(self, key, chain, unit, start, draws, state_bytes, loss) -> int | None:
        return smallest_with_states(chain, unit, start, draws, state_bytes, solver=self.solver,
                                    solver_options=self.solver_options,
                                    stages=list(self.stages),
                                    shared_reserve=self.fixed_reserve(key), loss_bytes=loss)

    def _smallest_chain_budget(self, key, chain, draws, state_bytes, loss) -> int:
        unit = self.unit(chain)
        sol = solver_registry.solve(rounded_chain(chain, unit), 1, self.solver,
                                    **self.solver_options)
        if sol.schedule is not None:
            least = 1 + self.fixed_reserve(key)
        else:
            least = (sol.min_budget or chain.store_all_memory()) + self.fixed_reserve(key)
        if state_bytes:  # the random-generator states the checkpoints keep
            least = self._smallest(key, chain, unit, least, draws, state_bytes, loss) or least
        return least

    def make_plan(self, key: tuple, x: torch.Tensor | None, chain: Chain) -> Plan:
        """The plan for input ``key`` (``x``: an input of it, or None) on its profiled
        ``chain`` (what the profile measured beside it: :meth:`record_profile`; which stages
        draw random numbers unknown: all assumed to)."""
        stages = list(self.stages)
        if key not in self.carried:
            self.carried[key] = carried_step_bytes(stages, x, self.device)
        chain = chain_with_bandwidth(chain, self.bandwidth,
                                     self.device or (x.device if x is not None else "cpu"))
        store_all = chain.store_all_memory()
        loss = self.loss_bytes.get(key)  # the loss tensor and its seed (None: LOSS_BYTES)
        plain_extra = plain_loss_bytes(LOSS_BYTES if loss is None else loss)
        budget = self.chain_budget(chain, key, plain_extra)
        draws = self.draws.get(key)
        state_bytes = RNG_STATE_BYTES if self.device_of(x).type == "cpu" else 0
        reserve = self.fixed_reserve(key)
        if self.step_budget is not None and budget <= 0:
            smallest = self.smallest_step_budget(
                chain, self._smallest_chain_budget(key, chain, draws, state_bytes, loss), key)
            raise InfeasibleBudgetError(
                f"budget {format_bytes(self.step_budget)} for the whole step cannot be met on "
                f"input {describe(key)}: parameter gradients take "
                f"{format_bytes(self.gradient_bytes)}"
                + (f" and the optimizer state {format_bytes(self.optimizer_bytes)}"
                   if self.optimizer_bytes else "")
                + f", and what the schedule does not count "
                  f"{format_bytes(self.step_reserve() - self.gradient_bytes - self.optimizer_bytes)}"
                + f"; the smallest feasible step budget is {format_bytes(smallest)}",
                self.step_budget, smallest)
        # the random-generator states the checkpoints keep (CPU: memory the schedule holds
        # beside the chain's values; on CUDA they are host memory) are counted at each
        # operation (nested.checkpoint_state_bytes); where they would take the solver's
        # schedule over the budget, the best schedule level that fits runs
        # (solve_with_states).  Plain autograd from store-all, the loss tensor's buffer
        # beyond a scalar counted.
        if budget >= store_all + reserve + plain_extra:
            sol = solver_registry.solve(chain.replace(bandwidth=None), store_all, "store-all")
            tree = None
            peak = dropin_peak(stages, simulate(chain, sol.schedule), None, sol.schedule,
                               loss_bytes=plain_extra)
        else:
            unit = self.unit(chain)
            sol, tree, peak, extra = self._levels(key, chain, unit, budget, draws,
                                                  state_bytes, loss)
            if peak is None:
                self._refuse(key, chain, unit, budget, sol, extra, draws, state_bytes, loss,
                             plain_extra)
        saving = self.input_grad.get(key, 0)
        if saving and not isinstance(tree, OffloadRun):  # B_0 makes no d_0 (see Plan)
            states = (checkpoint_state_bytes(tree, draws, state_bytes)
                      if tree is not None and state_bytes else None)
            loss = LOSS_BYTES if loss is None else loss
            peak = dropin_peak(stages, simulate(chain, sol.schedule), states, sol.schedule,
                               saving, loss if tree is not None else plain_loss_bytes(loss))
        return Plan(key, chain, budget, sol, sol.schedule, tree, peak + self.carried[key])

    def _refuse(self, key, chain, unit, budget, sol, extra, draws, state_bytes, loss,
                plain_extra) -> None:
        """Raise :class:`InfeasibleBudgetError` for a budget no schedule level fits, naming
        the smallest one that does (in the budget's own terms)."""
        reserve = self.fixed_reserve(key)
        start = budget + 1 if sol.schedule is not None else (
            None if sol.min_budget is None else sol.min_budget + reserve + extra)
        smallest = None if start is None else self._smallest(
            key, chain, unit, start, draws, state_bytes, loss)
        if self.step_budget is not None:
            smallest = None if smallest is None else self.smallest_step_budget(
                chain, smallest, key)
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
                  f"{format_bytes(self.plain_step_bytes(chain, key))})",
                self.step_budget, smallest)
        carried = self.carried.get(key, 0)
        raise InfeasibleBudgetError(
            f"budget {budget} B is infeasible for solver {self.solver!r} on input "
            f"{describe(key)}"
            + (f"; the smallest feasible budget is {smallest} B" if smallest is not None else "")
            + (f" ({self.shared_gradient_reserve} B of it reserved for the gradient of "
               f"parameters shared by several stages)" if self.shared_gradient_reserve else "")
            + (f" ({carried} B of it reserved for the values the first stage hands the "
               f"others, carried_step_bytes)" if carried else "")
            + (f" (the random-generator states its checkpoints keep take the solver's "
               f"schedule {extra} B over this budget, and no schedule of a smaller peak "
               f"fits with its states)" if extra else "")
            + f" (store-all needs {chain.store_all_memory() + reserve + plain_extra} B"
            + (", both figures with the reserve" if reserve else "")
            + ")", budget, smallest)
