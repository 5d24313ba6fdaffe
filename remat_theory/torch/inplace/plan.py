"""The plan of one input shape: a budget in the user's units, the layers' chain, a schedule.

Budgets (:func:`parse_budget`): a float in (0, 1] is a fraction of the step's activation
peak without recomputation (``LayerProfile.store_all_bytes``); an int, or a str with a unit
(``"6GiB"``), is the whole training step's peak above the resident model, as the allocator
measures it from the start of the forward to the end of ``backward()``: activations, the
parameters' gradients (counted whole: they all exist at the end of the backward), the loss,
and :data:`ENGINE_MARGIN` of the rest for what autograd's engine holds beyond the model.

The solver sees the layers' chain with sizes rounded up to a unit
(:mod:`remat_theory.torch.rounding`) and the budget left once the prefix's tape and the
gradients of shared values are taken out; the schedule is then replayed on the exact chain
by the simulator, which gives the predicted peak and time.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import solvers as solver_registry

from remat_theory.model.chain import Chain
from remat_theory.model.errors import InfeasibleBudgetError, RematError
from remat_theory.model.schedule import Schedule
from remat_theory.model.simulator import simulate
from remat_theory.model.solution import Solution
from remat_theory.torch.inplace.profile import LayerProfile
from remat_theory.torch.module import format_bytes, parse_bytes
from remat_theory.torch.nested import Checkpointed, End, Kept, Segment, nested_form
from remat_theory.torch.rounding import auto_unit, rounded_chain

__all__ = ["ENGINE_MARGIN", "LayerPlan", "make_plan", "parse_budget", "segments_of"]

ENGINE_MARGIN = 0.01
"""Share of a step budget (bytes) kept for the engine's own buffers beyond the model's."""


def parse_budget(budget):
    """``("fraction", f)`` or ``("bytes", n)``; RematError naming the value otherwise."""
    if isinstance(budget, str):
        return "bytes", parse_bytes(budget)
    if isinstance(budget, bool) or not isinstance(budget, numbers.Real):
        raise RematError(f"budget = {budget!r} must be bytes of the training step (int, or a "
                         f"str with a unit, e.g. '6GiB') or a fraction in (0, 1] of its "
                         f"activation peak without recomputation (float)")
    if isinstance(budget, numbers.Integral):
        if budget <= 0:
            raise RematError(f"budget = {budget!r} bytes must be positive")
        return "bytes", int(budget)
    if not (0 < budget <= 1) or math.isnan(budget):
        raise RematError(f"budget = {budget!r}: a float budget is a fraction of the step's "
                         f"activation peak without recomputation and must be in (0, 1]")
    return "fraction", float(budget)


@dataclass
class LayerPlan:
    """One input shape's plan.  Bytes are the step's, above the resident model."""

    key: tuple
    profile: LayerProfile
    budget: int  # bytes of activations the plan may hold (the step budget less gradients)
    solution: Solution | None  # None: plain autograd (nothing recomputed)
    tree: Segment | None
    predicted_peak: int  # activations, bytes
    grad_bytes: int  # the parameters' gradients
    predicted_time: float  # seconds: the layers' schedule, the suffix and the prefix

    @property
    def chain(self) -> Chain:
        return self.profile.chain

    @property
    def schedule(self) -> Schedule | None:
        return None if self.solution is None else self.solution.schedule

    @property
    def predicted_step_peak(self) -> int:
        return self.predicted_peak + self.grad_bytes

    @property
    def recomputed(self) -> int:
        """Layer forwards recomputed per step."""
        return 0 if self.tree is None else _recomputed(self.tree)

    def __repr__(self) -> str:
        what = ("plain autograd" if self.tree is None
                else f"{self.recomputed} layer forwards recomputed, solver {self.solution.solver}")
        return (f"LayerPlan({self.chain.length} layers, {what}; predicted step peak "
                f"{format_bytes(self.predicted_step_peak)}, time {self.predicted_time:.4g} s)")


def _recomputed(tree) -> int:
    if isinstance(tree, Kept):
        return _recomputed(tree.rest)
    if isinstance(tree, Checkpointed):
        return tree.k - tree.s + _recomputed(tree.rest) + _recomputed(tree.inner)
    return 0


def segments_of(tree) -> list:
    """Every checkpointed segment a forward of ``tree`` opens, outer before inner."""
    out = []
    while not isinstance(tree, End):
        if isinstance(tree, Checkpointed):
            out.append(tree)
            out.extend(segments_of(tree.inner))
        tree = tree.rest
    return out


def _activation_budget(kind, value, prof: LayerProfile, grad_bytes: int) -> int:
    if kind == "fraction":
        return int(value * prof.store_all_bytes)
    return value - grad_bytes - int(math.ceil(value * ENGINE_MARGIN))


def _user_units(kind, activations: int, prof: LayerProfile, grad_bytes: int):
    """The budget, in the user's units, whose activation share is ``activations``."""
    if kind == "fraction":
        return activations / prof.store_all_bytes
    step = int(math.ceil((activations + grad_bytes) / (1 - ENGINE_MARGIN)))
    while step - grad_bytes - int(math.ceil(step * ENGINE_MARGIN)) < activations:
        step += 1
    return step


def _say(kind, v) -> str:
    return f"{v:.4f} of store-all" if kind == "fraction" else format_bytes(v)


def make_plan(key, prof: LayerProfile, budget, grad_bytes: int, chained: list, *,
              solver: str = "dp", solver_options=None, describe: str = "") -> LayerPlan:
    """Solve one shape's chain for ``budget`` (see the module docstring)."""
    kind, value = parse_budget(budget)
    chain = prof.chain
    act = _activation_budget(kind, value, prof, grad_bytes)
    plain_time = sum(chain.fall_time) + sum(chain.bwd_time)
    if act >= prof.store_all_bytes:
        return LayerPlan(key, prof, act, None, None, prof.store_all_bytes, grad_bytes,
                         plain_time + prof.prefix_time)
    chain_budget = act - prof.fixed_bytes
    unit = auto_unit(chain)
    sol = None
    if chain_budget > 0 and act >= prof.end_peak:
        sol = solver_registry.solve(rounded_chain(chain, unit), chain_budget, solver,
                                    **dict(solver_options or {}))
    if sol is None or sol.schedule is None:
        least = None
        probe = solver_registry.solve(rounded_chain(chain, unit), max(chain_budget, 1), solver,
                                      **dict(solver_options or {}))
        smallest_chain = (probe.peak_memory if probe.schedule is not None else probe.min_budget)
        if smallest_chain is not None:
            least = max(smallest_chain + prof.fixed_bytes, prof.end_peak)
        store_all = _user_units(kind, prof.store_all_bytes, prof, grad_bytes)
        msg = (f"budget {_say(kind, value)} cannot be met on input {describe} by solver "
               f"{solver!r}")
        smallest = None
        if least is not None:
            smallest = _user_units(kind, least, prof, grad_bytes)
            msg += f"; the smallest feasible budget is {_say(kind, smallest)}"
        msg += f" (store-all needs {_say(kind, store_all)}"
        if kind == "bytes":
            msg += (f"; both figures are the whole step, parameter gradients "
                    f"{format_bytes(grad_bytes)} included")
        msg += ")"
        raise InfeasibleBudgetError(msg, value, smallest)
    schedule = sol.schedule
    tree = nested_form(schedule, chain.length)
    for seg in segments_of(tree):
        for j in range(seg.s, seg.k - 1):
            if not chained[j]:
                raise RematError(
                    f"the schedule recomputes layers {seg.s}..{seg.k - 1} as one segment, but "
                    f"the model runs code of its own between layer {j} and layer {j + 1} (its "
                    f"output is not the next layer's input): such a segment cannot be "
                    f"recomputed layer by layer; please report this model")
    sim = simulate(chain, schedule)
    peak = max(sim.peak_memory + prof.fixed_bytes, prof.end_peak)
    return LayerPlan(key, prof, act, sol, tree, peak, grad_bytes, sim.makespan + prof.prefix_time)
