"""The frontier the user sees: time per training step against peak memory, on the ORIGINAL
model, remat beside what users run today.

For one :class:`~remat_theory.torch.frontier_networks.Workload` (the original eager model,
how a step calls it, a loss, and the model captured as a chain of stages), every *method* is
one way to run a training step (forward, loss, backward) on the same parameters:

- ``plain``: the original model, as it is (and ``plain`` again, param 2: the noise floor).
- ``hf_checkpointing:K``: the original model after Hugging Face's
  ``activation_checkpointing_enable(every_n_layers=K)`` (``gradient_checkpointing_enable()``
  is K = 1), for every K from 1 to the number of layers, where the model offers it.
- ``checkpoint_sequential:K``: ``torch.utils.checkpoint.checkpoint_sequential`` (non-reentrant)
  over the captured stages, K segments, for every K from 2 to the number of stages.
- ``compile_budget:R``: ``torch.compile`` of the original model's step with
  ``torch._functorch.config.activation_memory_budget = R`` (the min-cut partitioner's
  knapsack), for several R.
- ``remat:B``: remat's drop-in (:class:`~remat_theory.torch.module.CheckpointedSequential`,
  eager) at a budget of B bytes of the chain; the budgets are the *breakpoints* of the
  solver's makespan over the budget (:func:`remat_breakpoints`: every budget where the DP's
  optimal schedule changes, from the smallest feasible one to store-all, with each
  ``checkpoint_sequential`` schedule's own level kept where more than ``max_points`` are
  spread), so that no baseline point falls between two remat points for want of a budget.
- ``remat_compiled:B``: ``torch.compile`` over a remat schedule as ONE graph
  (:func:`~remat_theory.torch.module.run_traceable`: its non-reentrant checkpoints become the
  compiler's recompute regions), over the model captured by ``torch.export``
  (:meth:`~remat_theory.torch.frontier_networks.Workload.graph_stages`: the capture at the
  model's layers runs the model's Python between seams, which dynamo does not trace as one
  graph), profiled with each stage compiled by the same backend (:func:`compiled_chain`).  The schedules are single-level (:func:`flat_levels`: the
  fastest at each peak over every checkpoint set): one joint graph recomputes each forward
  operation at most once in its backward, so a nested schedule compiles as its outermost
  checkpoints alone and holds far more than predicted.
- ``remat_step:S`` (``step_budgets``): the drop-in with a budget of the whole step in bytes
  (``budget="6GiB"``); its point says whether the allocator's step peak stayed within it.
- ``remat_inplace:X`` (asked by name: ``families``): the in-place API
  (:func:`~remat_theory.torch.inplace.rematerialize`) on a copy of the ORIGINAL model, its
  hooks attached, run by the same step as ``plain``, at the breakpoints of its plan's
  predicted time over byte budgets and over fraction budgets, at each Hugging Face
  every-K level's measured step peak (bytes) and activation peak (fraction), and at 1.0
  (:func:`inplace_methods`); a refused budget runs at the ``smallest_feasible`` it names,
  recorded in the point's ``detail``.

Each method is measured the same way: every step starts with no parameter gradient (as after
``optimizer.zero_grad()``).  ``peak`` is what the allocator holds above the step's start,
parameter gradients taken out (activation memory); ``step_peak`` is all of it (the step's
peak above the resident model: what a step budget bounds).  Time: ``repeats`` interleaved
rounds (round ``r`` runs every method once, in a seeded random order), so a slow phase of a
noisy machine hits every method alike; comparisons use the per-round ratios.  Every step is
timed by two clocks: the wall clock and, on the CPU, the timing thread's CPU time (with one
torch thread the forward, autograd's CPU backward and compiled kernels all run on the
calling thread, so it counts the step's work and not the time other processes held the
core); :func:`choose_clock` judges on the one whose measured noise is smaller.  Gradients: one
seeded step of each method, compared with the plain model's, bit for bit (``grads_equal``)
and as the largest difference relative to the largest plain gradient (``grad_rel_diff``).

:func:`dominance` asks the user's question: for every baseline point, is there a remat point
(eager or compiled) with no more memory and no more time beyond the noise (the tolerance is
the larger of 2% and the measured noise on the chosen clock: repeated plain, and remat at
store-all against plain, which run the same kernels)?  And is remat's lowest memory below every baseline's?
"""
from __future__ import annotations

import copy
import itertools
import math
import random
import statistics
import time
import types
from dataclasses import asdict, dataclass, field

import torch
import torch._dynamo
from torch import nn
from torch.utils.checkpoint import checkpoint_sequential

import solvers as solver_registry
from solvers.periodic import periodic_checkpoints

from remat_theory.model.errors import InfeasibleBudgetError, RematError, SolverContractError
from remat_theory.model.simulator import simulate
from remat_theory.torch.nested import Checkpointed, End, Kept, Segment, nested_schedule
from remat_theory.torch.frontier_networks import Workload, from_network
from remat_theory.torch.module import (LOSS_BYTES, RNG_STATE_BYTES, CheckpointedSequential,
                                       carried_step_bytes,
                                       dropin_peak, plain_loss_bytes,
                                       format_bytes, parse_bytes, run_traceable, shared_parameter_bytes,
                                       smallest_with_states, solve_with_states,
                                       traceable_prelude)
from remat_theory.torch.profiler import profile, profile_details, stage_draws
from remat_theory.torch.rounding import auto_unit, rounded_chain
from remat_theory.torch.tracker import allocator_peak

FAMILIES = ("plain", "hf_checkpointing", "checkpoint_sequential", "compile_budget", "remat",
            "remat_compiled", "remat_offload", "remat_inplace")
BASELINES = FAMILIES[:4]
REMAT = ("remat", "remat_compiled", "remat_inplace")
DEFAULT_FAMILIES = FAMILIES[:-1]
"""What :func:`prepare` runs unless told (``remat_inplace`` is asked for by name)."""
DEFAULT_COMPILE_BUDGETS = (0.0, 0.3, 0.6, 1.0)
MIN_TOLERANCE = 0.02


@dataclass
class Point:
    """One method's measurement (bytes, seconds).  ``status``: ``ok``, ``infeasible``,
    ``refused``, ``unsupported`` or ``error`` (``detail`` says why)."""

    method: str
    family: str
    param: float | int | str | None = None
    status: str = "ok"
    detail: str = ""
    peak: int | None = None
    step_peak: int | None = None
    time: float | None = None
    spread: list = field(default_factory=list)  # [q25, q75] of the per-round times
    times: list = field(default_factory=list)   # wall seconds, one per round, in round order
    cpu_time: float | None = None  # median of cpu_times
    cpu_spread: list = field(default_factory=list)
    cpu_times: list = field(default_factory=list)  # the timing thread's CPU seconds per round
    backend: str | None = None  # the torch.compile backend of a compiled point
    grads_equal: bool | None = None
    grad_rel_diff: float | None = None
    predicted_peak: int | None = None
    predicted_time: float | None = None
    budget: int | None = None
    within_budget: bool | None = None
    recomputed: int | None = None  # remat_inplace: layer forwards its plan recomputes per step


class Method:
    """A prepared way of running one training step; ``params``: its own parameters when it
    runs a copy of the model (Hugging Face's checkpointing), else None (the shared ones)."""

    def __init__(self, point: Point, step=None, setup=None, teardown=None, params=None):
        self.point, self.step, self.setup, self.teardown = point, step, setup, teardown
        self.params = params

    def run(self):
        self.step()


def _error(point: Point, e: Exception, status: str = "error") -> Method:
    text = str(e).splitlines()[0] if str(e) else ""
    point.status, point.detail = status, f"{type(e).__name__}: {text}"[:400]
    return Method(point)


def _zero_grads(params) -> None:
    for p in params:
        p.grad = None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _fresh_function(fn, name: str):
    """``fn`` with a code object of its own: torch.compile caches compiled graphs on the code
    object, so each compiled method (its own memory budget or schedule) gets its own entry."""
    code = fn.__code__.replace(co_name=name)
    return types.FunctionType(code, fn.__globals__, name, fn.__defaults__, fn.__closure__)


# ------------------------------------------------------------------------ methods
def plain_method(w: Workload):
    def step():
        w.loss_fn(w.call(w.model)).backward()
    return step


def _hf_layers(model) -> int:
    """How many repeated layers Hugging Face's checkpointing wraps in ``model``."""
    try:
        from transformers.modeling_layers import GradientCheckpointingLayer
    except ImportError:  # pragma: no cover - older transformers
        return 0
    return sum(isinstance(m, GradientCheckpointingLayer) for m in model.modules())


def _hf_toggle(model, k: int | None) -> None:
    """Hugging Face's own switch: ``activation_checkpointing_enable(every_n_layers=k)`` (or the
    older ``gradient_checkpointing_enable()`` for k = 1); ``k=None`` turns it off."""
    enable = getattr(model, "activation_checkpointing_enable", None)
    disable = getattr(model, "activation_checkpointing_disable", None)
    if k is None:
        (disable or model.gradient_checkpointing_disable)()
    elif enable is not None:
        enable(every_n_layers=k)
    elif k == 1:
        model.gradient_checkpointing_enable()
    else:
        raise RematError("this transformers version checkpoints every layer only")


def hf_methods(w: Workload) -> list:
    """One point per ``every_n_layers`` K, each on its own copy of the model with Hugging
    Face's checkpointing switched on once (switching it per step would change the modules'
    attributes, which torch.compile's guards on the shared model would see)."""
    if not w.hf:
        return [Method(Point("hf_checkpointing", "hf_checkpointing", status="unsupported",
                              detail=f"{type(w.model).__name__} offers no Hugging Face "
                                     f"activation checkpointing"))]
    n = _hf_layers(w.model)
    out = []
    for k in range(1, max(1, n) + 1):
        pt = Point(f"hf_checkpointing:{k}", "hf_checkpointing", k)
        model = copy.deepcopy(w.model)
        try:
            _hf_toggle(model, k)
        except Exception as e:  # noqa: BLE001 - the model refuses: a result
            out.append(_error(pt, e, "unsupported"))
            break

        def step(model=model):
            w.loss_fn(w.call(model)).backward()
        out.append(Method(pt, step, params=[p for p in model.parameters() if p.requires_grad]))
    return out


def checkpoint_sequential_method(w: Workload, seq: nn.Sequential, k: int):
    def step():
        out = checkpoint_sequential(seq, k, w.example_input, use_reentrant=False)
        loss = w.loss_fn(out)
        del out
        loss.backward()
    return step


def _compile_budget(w: Workload, r: float, backend: str, index: int) -> Method:
    import torch._functorch.config as fconfig

    pt = Point(f"compile_budget:{r:g}", "compile_budget", r, backend=backend)

    def loss():
        return w.loss_fn(w.call(w.model))
    fn = _fresh_function(loss, f"compile_budget_{index}")
    try:
        compiled = torch.compile(fn, backend=backend, fullgraph=True)

        def step():
            with fconfig.patch(activation_memory_budget=r):
                compiled().backward()
        step()  # compile now (inside the budget), not in a timed step
    except Exception as e:  # noqa: BLE001 - a compiler failure is a result
        return _error(pt, e)
    return Method(pt, step)


def remat_breakpoints(chain, stages, solver: str = "dp", *, resolution: int = 1024,
                      max_points: int = 16, solver_options=None, cover=(), draws=None,
                      state_bytes: int = 0, loss_bytes: int | None = None,
                      input_grad_bytes: int = 0, carried: int = 0) -> list:
    """Budgets (bytes of the chain) where the drop-in's makespan steps down, from its smallest
    feasible budget to store-all, as :class:`CheckpointedSequential` solves them: through
    its own :func:`~remat_theory.torch.module.solve_with_states` (the same rounding, the
    shared-gradient reserve, and the random-generator states its checkpoints keep:
    ``state_bytes`` each, :data:`~remat_theory.torch.module.RNG_STATE_BYTES` on the CPU, only
    where a segment's stage draws, ``draws``; :func:`drop_in_states` gives both for a
    workload), so that every breakpoint is a budget the drop-in accepts.  The makespan is a
    non-increasing step function of the budget, so bisection finds each step to
    ``store_all / resolution`` bytes: every distinct schedule level up to that resolution.
    More than ``max_points`` levels: the lowest, store-all and evenly spread ones between
    (by memory), and, for each budget of ``cover`` (the chain's predicted peak of a
    baseline's own schedule, e.g. ``checkpoint_sequential``'s), the lowest level at or above
    it, so that the baseline's schedule level is measured even where the spread skips it.

    ``loss_bytes`` and ``input_grad_bytes``: the profile's (``ProfileResult``; what the
    drop-in is given with its chain).  The loss tensor and its seed are part of the peak a
    budget must hold (:func:`solve_with_states`; None: :data:`LOSS_BYTES`), and plain
    autograd starts :func:`plain_loss_bytes` above store-all.  ``input_grad_bytes`` lowers
    only the predicted peak of B_0 (the batch needs no gradient), never the budget a
    schedule needs (the solver plans with the table's B_0), so it moves no level; it is
    accepted so that one profile's figures go to both.  ``carried``: the bytes of the values
    the first stage hands the others, which the drop-in reserves at every budget
    (:func:`~remat_theory.torch.module.carried_step_bytes`; :func:`drop_in_states` gives it)."""
    del input_grad_bytes  # see above: it changes no schedule's fit
    opts = dict(solver_options or {})
    unit = auto_unit(chain)
    reserve = 2 * shared_parameter_bytes(stages) + carried
    # the drop-in's plain autograd
    store_all = chain.store_all_memory() + reserve + plain_loss_bytes(
        LOSS_BYTES if loss_bytes is None else loss_bytes)
    rule = dict(solver=solver, solver_options=opts, stages=list(stages), shared_reserve=reserve,
                loss_bytes=loss_bytes)
    cache = {}

    def makespan(b):
        if b not in cache:
            sol, _, peak, _ = solve_with_states(chain, unit, b, draws, state_bytes, **rule)
            cache[b] = (None if peak is None else round(sol.makespan, 12),
                        sol.peak_memory, sol.min_budget)
        return cache[b]

    first = makespan(1)
    if first[0] is not None:
        lo = 1
    elif first[2] is None:
        return []
    else:
        lo = min(store_all, first[2] + reserve)
    if makespan(lo)[0] is None and state_bytes:  # the states the checkpoints keep
        lo = smallest_with_states(chain, unit, lo, draws, state_bytes, **rule) or store_all
    if makespan(lo)[0] is None:
        return []
    def level(b):  # the plan a budget gets: its makespan, plain autograd from store_all
        return makespan(b)[0] if b < store_all else "store-all"

    # the same schedule level reached at two budgets: keep the lower budget.  A budget the
    # drop-in refuses is no point: with the states counted its feasible budgets can have a
    # gap (a re-solve for less that never fits) above a lower budget that fits
    return _level_breakpoints(level, lo, store_all, max(1, store_all // resolution),
                              max_points, cover, 0)


def drop_in_states(stages, x: torch.Tensor) -> dict:
    """``draws`` and ``state_bytes`` for :func:`remat_breakpoints`, as the drop-in finds them
    for input ``x``: which stages draw random numbers (:func:`stage_draws`) and the bytes of
    one kept generator state (on the CPU; on CUDA the states are host memory: 0), and
    ``carried``: the bytes of the values the first stage hands the others, which the drop-in
    reserves at every budget (:func:`~remat_theory.torch.module.carried_step_bytes`)."""
    return dict(draws=tuple(stage_draws(list(stages), x)),
                state_bytes=RNG_STATE_BYTES if x.device.type == "cpu" else 0,
                carried=carried_step_bytes(list(stages), x))


def baseline_schedule_peaks(chain, stages, segments, carried: int = 0) -> list:
    """The budgets at which the drop-in's solver sees ``checkpoint_sequential``'s own schedule
    (solver ``periodic``, each segment count) fit: its peak on the rounded chain the drop-in
    solves, plus the shared-parameter reserve and ``carried`` (:func:`drop_in_states`).
    (The exact chain's peak is up to a few rounding units lower: at that budget the rounded
    DP must pick another schedule.)"""
    rc = rounded_chain(chain, auto_unit(chain))
    reserve = 2 * shared_parameter_bytes(stages) + carried
    out = []
    for k in segments:
        if not 1 <= k <= chain.length:
            continue
        sol = solver_registry.solve(rc, rc.store_all_memory(), "periodic", segments=k)
        if sol.schedule is not None:
            out.append(sol.peak_memory + reserve)
    return out


def hf_schedule_tree(stages, k: int) -> Segment | None:
    """The nested form of Hugging Face's ``activation_checkpointing_enable(every_n_layers=k)``
    on a chain captured at the model's layers (:mod:`~remat_theory.torch.seams`): the stage
    of each layer whose index is a multiple of ``k`` (transformers checkpoints
    ``layer_index % every_n_layers == 0``) is one checkpointed segment replayed once, every
    other stage (the prefix, the other layers, the suffix) is kept.  A layer's stage that
    also runs other code (``first``: the prefix and layer 0; ``replay``: a layer and the glue
    to the next) is checkpointed whole.  A layer's index is the one transformers gives it
    (its place among the model's ``GradientCheckpointingLayer`` modules, in ``modules()``
    order).  None where the stages are not a seam capture, where a seam is not such a layer,
    or where such layers nest (Swin's stages hold its blocks: HF's schedule is then nested,
    not one checkpoint per seam)."""
    L = len(stages)
    kinds = [getattr(s, "kind", None) for s in stages]
    if L == 0 or any(kd not in ("prefix", "layer", "first", "replay", "suffix") for kd in kinds):
        return None
    if k < 1:
        raise RematError(f"every_n_layers = {k!r} must be >= 1")
    try:
        from transformers.modeling_layers import GradientCheckpointingLayer
    except ImportError:  # pragma: no cover - older transformers
        return None
    runner = stages[0].runner
    layers = [m for m in runner.model.modules() if isinstance(m, GradientCheckpointingLayer)]
    if any(isinstance(sub, GradientCheckpointingLayer)
           for m in layers for sub in list(m.modules())[1:]):
        return None
    index = {id(m): j for j, m in enumerate(layers)}
    seam_index = {}
    for i, kd in enumerate(kinds):
        if kd in ("layer", "first", "replay"):
            j = index.get(id(runner.seams[stages[i].k].module))
            if j is None:
                return None
            seam_index[i] = j
    node = End(L, loss=True)
    for i in range(L - 1, -1, -1):
        if i in seam_index and seam_index[i] % k == 0:
            node = Checkpointed(i, i + 1, node, Kept(i, End(i + 1)))
        else:
            node = Kept(i, node)
    return node


def hf_schedule_peaks(chain, stages, ks, *, draws=None, state_bytes: int = 0,
                      loss_bytes: int | None = None, carried: int = 0) -> list:
    """The budgets at which the drop-in's solver sees Hugging Face's every-``k``-layers
    schedule (:func:`hf_schedule_tree`, each ``k`` of ``ks``) fit, as
    :func:`solve_with_states` asks of a schedule: its peak on the rounded chain the solver
    sees, and its peak on the chain with the generator states its checkpoints keep and the
    loss tensor (the fit), whichever is larger, plus the shared-parameter reserve and the
    values the first stage hands the others (``carried``, :func:`drop_in_states`).  At any
    budget from there the DP's schedule is at least as fast as HF's on the rounded chain."""
    from remat_theory.torch.module import _level  # the drop-in's own fit of a schedule
    rc = rounded_chain(chain, auto_unit(chain))
    reserve = 2 * shared_parameter_bytes(stages) + carried
    out = []
    for k in ks:
        tree = hf_schedule_tree(stages, k)
        if tree is None:
            continue
        sched = nested_schedule(tree, chain.length)
        rpeak = simulate(rc, sched).peak_memory
        _, _, fit = _level(chain, types.SimpleNamespace(schedule=sched), "hf", list(stages),
                           draws, state_bytes, loss_bytes)
        out.append(int(max(rpeak, fit)) + reserve)
    return out


def remat_method(w: Workload, ck: CheckpointedSequential):
    others = w.other_inputs  # one batch, the example's: its masks go with every call

    def step():
        out = ck(w.example_input, **others)
        loss = w.loss_fn(out)
        del out
        loss.backward()
    return step


def drop_in(w: Workload, budget, solver, chain, pt: Point, optimizer_bytes: int = 0,
            sizes=None):
    """The drop-in at ``budget`` on ``chain``; ``sizes``: the profile's ``loss_bytes`` and
    ``input_grad_bytes`` (``ProfileResult``), as the drop-in would find them profiling
    itself (without: :data:`LOSS_BYTES` and no B_0 saving)."""
    try:
        ck = CheckpointedSequential(w.stages, budget=budget, solver=solver,
                                    example_input=w.example_input, loss_fn=w.loss_fn,
                                    chain=chain, optimizer_state=optimizer_bytes or None,
                                    **(sizes or {}))
    except InfeasibleBudgetError as e:
        pt.status, pt.detail = "infeasible", str(e)[:400]
        return None
    except (RematError, SolverContractError) as e:
        pt.status, pt.detail = "refused", str(e)[:400]
        return None
    pt.budget = ck.step_budget if ck.step_budget is not None else ck.budget
    pt.predicted_peak = ck.plan.predicted_peak
    pt.predicted_time = ck.solution.makespan
    return ck


# ------------------------------------------------------------------------ the in-place API
def _inplace_example(w: Workload):
    """The ``example`` the in-place API takes for ``w``: what ``w.call`` calls the model
    with (a kwargs dict, or the one positional tensor); None for a workload built from
    stages (no call of the original model to give)."""
    return w.inputs


def _inplace_loss(w: Workload):
    """output -> the frontier's loss, as the in-place API's ``loss_fn`` (profiled as the
    chain's loss stage): the workload's own loss on the tensor ``w.call`` hands it."""
    from remat_theory.torch.frontier_networks import _leaf

    def loss_fn(out, _loss=w.loss_fn):
        return _loss(_leaf(out))
    return loss_fn


def inplace_breakpoints(probe, solver: str = "dp", *, resolution: int = 1024,
                        max_points: int = 16, cover=(), solver_options=None,
                        fraction: bool = False, keep_lowest: int = 0) -> tuple:
    """``(budgets, smallest, plain_budget)``: step budgets (bytes, the in-place API's units)
    where the in-place plan's predicted time steps down, from the smallest budget it accepts
    to the smallest that runs plain autograd, found as :func:`remat_breakpoints` finds the
    drop-in's: bisection (to ``plain_budget / resolution`` bytes) on the plan the API makes
    (:func:`~remat_theory.torch.inplace.plan.make_plan`) from ``probe``'s profile (a
    :class:`~remat_theory.torch.inplace.RematHandle`), each level at its lowest budget; more
    than ``max_points`` levels: the lowest, plain and evenly spread ones between, plus, for
    each budget of ``cover``, the lowest level at or above it, and the ``keep_lowest`` lowest.

    ``fraction``: the same in the API's other units, fractions of its predicted activation
    peak without recomputation (the plan then bounds activations, gradients apart); the
    budgets are floats, bisected on the bytes they stand for, and the lowest is the least
    activation budget the plan accepts (found by bisection: the ``smallest_feasible`` a
    refused fraction names can itself be refused)."""
    from remat_theory.torch.inplace.plan import make_plan, step_budget

    plan0 = probe.plan
    if fraction:
        return _inplace_fraction_breakpoints(probe, solver, resolution, max_points, cover,
                                             solver_options, keep_lowest)
    rule = dict(solver=solver, solver_options=solver_options)
    cache = {}

    def level(b):
        if b not in cache:
            try:
                p = make_plan(plan0.key, plan0.profile, int(b), probe.gradients, probe.chained,
                              **rule)
                cache[b] = "plain" if p.tree is None else round(p.predicted_time, 12)
            except InfeasibleBudgetError:
                cache[b] = None
        return cache[b]

    plain_budget = step_budget(plan0.predicted_step_peak)
    try:
        make_plan(plan0.key, plan0.profile, 1, probe.gradients, probe.chained, **rule)
        smallest = 1
    except InfeasibleBudgetError as e:
        smallest = e.smallest_feasible
    if smallest is None or level(smallest) is None:
        return [], smallest, plain_budget
    out = _level_breakpoints(level, smallest, plain_budget, max(1, plain_budget // resolution),
                             max_points, cover, keep_lowest)
    return out, smallest, plain_budget


def _level_breakpoints(level, smallest: int, largest: int, step: int, max_points: int, cover,
                       keep_lowest: int) -> list:
    """The budgets in [smallest, largest] where ``level`` (the plan a budget gets) changes,
    found by bisection to ``step``: one budget per level, at most ``max_points`` (evenly
    spread, each budget of ``cover`` and the ``keep_lowest`` lowest kept)."""
    found = {smallest, largest}

    def bisect(a, fa, b, fb):
        if fa == fb:
            return
        if b - a <= step:
            found.add(b)
            return
        m = (a + b) // 2
        fm = level(m)
        bisect(a, fa, m, fm)
        bisect(m, fm, b, fb)

    bisect(smallest, level(smallest), largest, level(largest))
    levels, out = set(), []
    for b in sorted(found):
        key = level(b)
        if key is not None and key not in levels:
            levels.add(key)
            out.append(b)
    if len(out) > max_points:
        idx = {round(i * (len(out) - 1) / (max_points - 1)) for i in range(max_points)}
        for c in cover:
            idx.add(next((i for i, b in enumerate(out) if b >= c), len(out) - 1))
        idx |= set(range(min(keep_lowest, len(out))))
        out = [out[i] for i in sorted(idx)]
    return out


def _inplace_fraction_breakpoints(probe, solver, resolution, max_points, cover, solver_options,
                                  keep_lowest) -> tuple:
    from remat_theory.torch.inplace.plan import make_plan

    plan0 = probe.plan
    store_all = plan0.profile.store_all_activations
    cache = {}

    def level(b):  # b: bytes of activations; the API is given b / store_all
        if b not in cache:
            try:
                p = make_plan(plan0.key, plan0.profile, min(1.0, b / store_all), probe.gradients,
                              probe.chained, solver=solver, solver_options=solver_options)
                cache[b] = "plain" if p.tree is None else round(p.predicted_time, 12)
            except InfeasibleBudgetError:
                cache[b] = None
        return cache[b]

    if level(store_all) is None:
        return [], None, 1.0
    lo, hi = 1, store_all  # the least accepted: bisection (level(hi) is accepted)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if level(mid) is None:
            lo = mid
        else:
            hi = mid
    smallest = hi
    out = _level_breakpoints(level, smallest, store_all, max(1, store_all // resolution),
                             max_points, cover, keep_lowest)
    return [min(1.0, b / store_all) for b in out], smallest / store_all, 1.0


def _inplace_point(w: Workload, label: str, budget, why: str, solver: str, example,
                   loss_fn) -> Method:
    """One ``remat_inplace`` point: a copy of the ORIGINAL model with
    ``rematerialize(copy, budget, example)``'s hooks attached, run by the same step as
    ``plain`` (``w.call``, the loss, ``backward``).  A budget the API refuses
    (:class:`InfeasibleBudgetError`) is retried at the ``smallest_feasible`` it names, and
    the point says so (``detail``)."""
    from remat_theory.torch.inplace import rematerialize

    pt = Point(f"remat_inplace:{label}", "remat_inplace", label)
    model = copy.deepcopy(w.model)
    notes = [f"asked {budget!r} ({why})"]
    try:
        try:
            handle = rematerialize(model, budget, example, solver=solver, loss_fn=loss_fn)
        except InfeasibleBudgetError as e:
            notes.append(f"refused: {e}")
            if e.smallest_feasible is None:
                raise
            budget = e.smallest_feasible
            notes.append(f"ran at its smallest_feasible {budget!r}")
            handle = rematerialize(model, budget, example, solver=solver, loss_fn=loss_fn)
    except InfeasibleBudgetError as e:
        pt.status, pt.detail = "infeasible", "; ".join(notes + [str(e)])[:800]
        return Method(pt)
    except Exception as e:  # noqa: BLE001 - the API refusing the model is a result
        pt.status = "error"
        pt.detail = "; ".join(notes + [f"{type(e).__name__}: {e}"])[:800]
        return Method(pt)
    plan = handle.plan
    pt.budget = budget if isinstance(budget, int) else None
    pt.param = budget
    pt.predicted_peak = int(plan.predicted_step_peak)
    pt.predicted_time = float(plan.predicted_time)
    pt.recomputed = plan.recomputed
    pt.detail = "; ".join(notes + [
        f"plan: {len(handle.layers)} layers, {plan.recomputed} layer forwards recomputed, "
        f"predicted step peak {plan.predicted_step_peak} B, activations {plan.predicted_peak} B"
        + ("" if plan.tree is None else f", schedule {plan.tree}")])[:1200]

    def step(model=model):
        w.loss_fn(w.call(model)).backward()
    return Method(pt, step, params=[p for p in model.parameters() if p.requires_grad])


def inplace_methods(w: Workload, solver: str = "dp", *, hf_levels=(), max_points: int = 16,
                    budgets=None) -> list:
    """``remat_inplace`` points: the in-place API
    (:func:`~remat_theory.torch.inplace.rematerialize`) on copies of the ORIGINAL model, at
    step budgets (bytes of the whole step, the API's units) derived as the drop-in's are:
    every breakpoint of its plan's predicted time (:func:`inplace_breakpoints`, at most
    ``max_points`` spread, with the level at or above each of ``hf_levels`` kept), and each
    of ``hf_levels``: ``(K, bytes)``, Hugging Face's every-K-layers step measured by the
    same meter: ``(K, step_peak, peak)``, its step peak given as the budget itself, and its
    activation peak as a fraction budget (of the plan's predicted activation peak without
    recomputation, the API's float units), and the smallest fraction the plan accepts.
    ``budgets``: explicit
    budgets instead of the breakpoints (ints: bytes; floats: fractions).  Plus the plan at
    budget 1.0 (plain autograd through the hooks: the noise pair beside plain)."""
    from remat_theory.torch.inplace import rematerialize

    example = _inplace_example(w)
    if example is None:
        return [Method(Point("remat_inplace", "remat_inplace", status="unsupported",
                              detail="the workload has no call of the original model to give "
                                     "the in-place API as its example"))]
    loss_fn = _inplace_loss(w)
    try:
        probe = rematerialize(copy.deepcopy(w.model), 1.0, example, solver=solver,
                              loss_fn=loss_fn)
    except Exception as e:  # noqa: BLE001 - the API refusing the model is a result
        return [_error(Point("remat_inplace", "remat_inplace"), e)]
    out = []
    if budgets is None:
        levels, smallest, plain_budget = inplace_breakpoints(
            probe, solver, max_points=max_points, cover=[b for _, b, _ in hf_levels])
        asked = [(f"{b / plain_budget:.4f}", int(b),
                  "the smallest budget the plan accepts" if b == smallest else
                  "the smallest plain-autograd budget" if b == plain_budget else
                  "a breakpoint of the plan's predicted time") for b in levels]
    else:
        asked = [(f"{b}", b, "given") for b in budgets]
    asked += [(f"hf{k}", int(b), f"hf_checkpointing:{k}'s measured step peak")
              for k, b, _ in hf_levels]
    # the API's other units, a fraction of its own (predicted) activation peak without
    # recomputation: HF's measured activation peak (gradients apart) in them, and the
    # smallest fraction the plan accepts (asked 1e-6: refused, run at smallest_feasible)
    store_all = probe.plan.profile.store_all_bytes
    asked += [(f"hf{k}-fraction", min(1.0, a / store_all),
               f"hf_checkpointing:{k}'s measured activation peak {a} B over the plan's "
               f"predicted store-all {store_all} B") for k, _, a in hf_levels]
    asked.append(("fraction-smallest", 1e-6, "a fraction below any plan's"))
    if budgets is None:  # the plan's levels in fractions (activations alone), lowest kept
        fracs, fsmall, _ = inplace_breakpoints(
            probe, solver, max_points=max(4, max_points // 2), fraction=True, keep_lowest=3,
            cover=[a for _, _, a in hf_levels])
        asked += [(f"f{f:.4f}", f, "the least activation fraction the plan accepts"
                   if f == fsmall else "a breakpoint of the plan's predicted time over "
                   "fractions") for f in fracs if f < 1.0]
    asked.append(("store-all", 1.0, "fraction 1.0: plain autograd through the hooks"))
    probe.remove()
    for label, b, why in asked:
        out.append(_inplace_point(w, label, b, why, solver, example, loss_fn))
    return out


def _remat_compiled(w: Workload, tree, stages, pt: Point, backend: str, index: int) -> Method:
    prelude = traceable_prelude(stages)
    pt.backend = backend

    def loss():
        return w.loss_fn(run_traceable(tree, w.example_input, stages, prelude))
    fn = _fresh_function(loss, f"remat_compiled_{index}")
    try:
        compiled = torch.compile(fn, backend=backend, fullgraph=True)

        def step():
            compiled().backward()
        # a captured stage hands constants (masks) to later stages through a context: inside
        # a checkpoint a side effect that needs no replay in the backward (traceable_stages
        # makes those puts no-ops; the flag covers a stage that puts a new key there)
        with torch._dynamo.config.patch(skip_fwd_side_effects_in_bwd_under_checkpoint=True):
            step()
    except Exception as e:  # noqa: BLE001 - a compiler failure is a result
        return _error(pt, e)
    return Method(pt, step)


#: chains up to this many stages: every single-level schedule is evaluated (2^(L-1) sets)
FLAT_EXHAUSTIVE_STAGES = 14


def single_level_tree(checkpoints, length: int) -> Segment:
    """The nested form of the single-level schedule with these checkpoints (0 < c_1 < .. <
    c_k < length): each segment [c_j, c_{j+1}) one checkpoint replayed once with every
    stage kept, the last segment [c_k, length) kept (what ``checkpoint_sequential`` runs
    with its own cuts)."""
    bounds = [0, *sorted(set(checkpoints)), length]
    if any(not 0 < c < length for c in bounds[1:-1]):
        raise RematError(f"checkpoints {list(checkpoints)} must lie in 1..{length - 1}")

    def kept(a: int, b: int, end: End) -> Segment:
        node = end
        for s in range(b - 1, a - 1, -1):
            node = Kept(s, node)
        return node
    tree = kept(bounds[-2], length, End(length, loss=True))
    for j in range(len(bounds) - 3, -1, -1):
        a, b = bounds[j], bounds[j + 1]
        tree = Checkpointed(a, b, tree, kept(a, b, End(b)))
    return tree


def flat_levels(chain) -> list:
    """The single-level schedules the compiler's partitioner can realise, fastest at each
    peak: ``[(peak, makespan, checkpoints)]`` by increasing peak, each strictly faster than
    every one below it (the simulator's peak and makespan of :func:`single_level_tree`).

    One joint graph recomputes each forward operation at most once in its backward, so a
    nested schedule compiles as its outermost checkpoints alone (measured: GPT-2's lowest
    nested schedule, 5.44 MB predicted, held 12.34 MB compiled, and its outer checkpoints
    alone predict 12.41 MB).  Single-level schedules (checkpoints c_1 < .. < c_k, each
    segment replayed once) are exactly what it can run.  Every checkpoint set is evaluated
    up to :data:`FLAT_EXHAUSTIVE_STAGES` stages (so the front is exact there); longer chains
    get the sets of ``checkpoint_sequential`` (every k), the front of those."""
    L = chain.length
    if L <= FLAT_EXHAUSTIVE_STAGES:
        sets = (c for r in range(L) for c in itertools.combinations(range(1, L), r))
    else:
        sets = {tuple(periodic_checkpoints(L, k)) for k in range(1, L + 1)}
    cands = []
    for cps in sets:
        sim = simulate(chain, nested_schedule(single_level_tree(cps, L), L))
        cands.append((int(sim.peak_memory), round(float(sim.makespan), 12), tuple(cps)))
    cands.sort(key=lambda c: (c[0], c[1], len(c[2])))
    front, best = [], math.inf
    for c in cands:
        if c[1] < best:
            front.append(c)
            best = c[1]
    return front


def flat_drop_in(chain, stages, checkpoints):
    """(nested form, predicted peak, predicted makespan) of the single-level schedule with
    these checkpoints, predicted as the drop-in predicts its own (the simulator's peak plus
    the summed gradients of shared parameters held); the form is None for store-all."""
    tree = single_level_tree(checkpoints, chain.length)
    sched = nested_schedule(tree, chain.length)
    sim = simulate(chain, sched)
    if not checkpoints:
        return None, sim.peak_memory, sim.makespan
    return tree, dropin_peak(stages, sim, None, sched), sim.makespan


def compiled_chain(stages, w: Workload, backend: str, repeats: int = 3):
    """The chain of ``stages`` as the compiler runs them: each stage compiled on its own with
    ``backend`` and profiled.  A compiled graph saves its own tensors (decomposed kernels need
    other intermediates than eager autograd keeps, the partitioner recomputes cheap ones) and
    its backward holds other temporaries, so the eager chain's sizes mispredict a compiled
    schedule (ViT, ``aot_eager_decomp_partition``: compiled single-level schedules held
    1.08-1.27 times the eager chain's prediction; 0.93-1.05 of this chain's)."""
    compiled = [torch.compile(s, backend=backend) for s in stages]
    return profile(compiled, w.example_input, w.loss_fn, repeats=repeats,
                   clock=profile_clock(w.example_input))


def _compiled_sweep(w: Workload, points: int, backend: str, profile_repeats: int) -> list:
    """``remat_compiled`` points: single-level schedules (:func:`flat_levels`: the fastest at
    each peak, optimal over that class, the class one compiled graph realises) over the
    graph-captured stages (:meth:`Workload.graph_stages`; their chain profiled with each stage
    compiled by ``backend``, :func:`compiled_chain`, the eager stages' where that fails), at
    ``points`` of their levels spread from the lowest to store-all, each compiled as one
    graph."""
    try:
        stages = w.graph_stages()
    except Exception as e:  # noqa: BLE001 - a capture failure is a result
        return [_error(Point("remat_compiled", "remat_compiled"), e)]
    try:
        chain, source = compiled_chain(stages, w, backend, profile_repeats), "compiled stages"
    except Exception as e:  # noqa: BLE001 - then the eager stages' chain predicts
        try:
            chain = profile(stages, w.example_input, w.loss_fn, repeats=profile_repeats,
                            clock=profile_clock(w.example_input))
        except Exception as e2:  # noqa: BLE001 - a profile failure is a result
            return [_error(Point("remat_compiled", "remat_compiled"), e2)]
        source = f"eager stages (compiling them one by one failed: {str(e)[:200]})"
    levels = flat_levels(chain)
    n = len(levels)
    k = min(n, points)
    pick = sorted({round(i * (n - 1) / max(1, k - 1)) for i in range(k)})
    store_all = chain.store_all_memory()
    gw = Workload(w.name, w.model, w.call, w.loss_fn, w.example_input, stages)
    out = []
    for j, i in enumerate(pick):
        cps = levels[i][2]
        tree, peak, makespan = flat_drop_in(chain, stages, cps)
        pt = Point(f"remat_compiled:{peak / store_all:.4f}", "remat_compiled", int(peak),
                   detail=f"single-level, checkpoints {list(cps)}; predicted from the {source}")
        pt.budget, pt.predicted_peak, pt.predicted_time = int(peak), int(peak), makespan
        out.append(_remat_compiled(gw, tree, stages, pt, backend, j))
    return out


def profile_clock(x: torch.Tensor) -> str:
    """The clock the chain's stage times are profiled by: on the CPU the process's CPU time
    (one torch thread: the stages' own work; wall-clock profiles of the same model on a
    loaded machine differed threefold between runs, which steered the DP's choice among
    schedules of nearly equal cost), elsewhere the device's own timer."""
    return "process" if x.device.type == "cpu" else "wall"


def prepare(w: Workload, *, solver: str = "dp", budgets=None, max_points: int = 16,
            compile_budgets=DEFAULT_COMPILE_BUDGETS, compiled_points: int = 4,
            backend: str = "inductor", step_budgets=(), optimizer_bytes: int = 0,
            segments=None, hf: bool = True, profile_repeats: int = 3, offload_solvers=(),
            bandwidth="measure", offload_budgets=None, offload_points: int = 4,
            families=None, inplace_max_points: int = 16, inplace_budgets=None) -> tuple:
    """Build every method for ``w``; returns ``(methods, chain)`` (chain None when the model
    could not be captured: the remat points then say why).

    ``budgets``: remat budgets in bytes of the chain (default: :func:`remat_breakpoints`).
    ``compile_budgets``: ``activation_memory_budget`` values (empty: no compiler points).
    ``compiled_points``: how many ``remat_compiled`` points (spread over the breakpoints of
    the graph-captured chain, the lowest and store-all included; 0: none).  ``backend``: the
    ``torch.compile`` backend of both compiled families.  ``step_budgets``: budgets of the
    whole step (``"6GiB"``), run by the drop-in; ``optimizer_bytes``: the optimizer state
    those budgets also hold (the measured step runs no optimizer, so a point is within its
    budget when its step peak plus these bytes is).  ``offload_solvers``: solvers of the
    ``remat_offload`` points, with ``bandwidth``, ``offload_budgets`` and ``offload_points``
    (:func:`~remat_theory.torch.frontier_offload.offload_methods`; empty: none).

    ``families``: the method families to run (:data:`FAMILIES`; default
    :data:`DEFAULT_FAMILIES`, every one but ``remat_inplace``; ``plain`` always runs).  The
    chain is profiled only for the families that run over captured stages.
    ``remat_inplace`` (:func:`inplace_methods`): the in-place API on copies of the original
    model, at its plan's breakpoints (at most ``inplace_max_points``) or ``inplace_budgets``,
    and at each Hugging Face every-K level's step peak, measured here first by the same
    meter (when ``hf_checkpointing`` runs too)."""
    fams = set(DEFAULT_FAMILIES if families is None else families) | {"plain"}
    unknown = fams - set(FAMILIES)
    if unknown:
        raise RematError(f"unknown method families {sorted(unknown)}: choose from "
                         f"{', '.join(FAMILIES)}")
    methods = [Method(Point("plain", "plain", 1), plain_method(w)),
               Method(Point("plain:2", "plain", 2), plain_method(w))]
    hf = hf and "hf_checkpointing" in fams
    if hf:
        methods += hf_methods(w)
    staged = {"remat", "checkpoint_sequential", "remat_offload", "remat_compiled"}
    if "remat" not in fams:
        step_budgets = ()
    if "remat_offload" not in fams:
        offload_solvers = ()
    if "remat_compiled" not in fams:
        compiled_points = 0
    if "compile_budget" not in fams:
        compile_budgets = ()
    chain = None
    if fams & staged and w.stages is None:
        methods.append(Method(Point("remat", "remat", status="error",
                                     detail=f"capture failed: {w.capture_error}")))
    elif fams & staged:
        prof = profile_details(list(w.stages), w.example_input, w.loss_fn,
                               repeats=profile_repeats, clock=profile_clock(w.example_input))
        chain = prof.chain
        sizes = dict(loss_bytes=prof.loss_bytes, input_grad_bytes=prof.input_grad_bytes)
        L = len(w.stages)
        segs = list(segments if segments is not None else range(2, L + 1))
        if "remat" not in fams:
            budgets = []
        elif budgets is None:
            states = drop_in_states(w.stages, w.example_input)
            cover = baseline_schedule_peaks(chain, w.stages, segs, states["carried"])
            if hf and w.hf:  # each Hugging Face every-K-layers schedule's level too
                cover += hf_schedule_peaks(chain, w.stages, range(1, _hf_layers(w.model) + 1),
                                           loss_bytes=prof.loss_bytes, **states)
            budgets = remat_breakpoints(chain, w.stages, solver, max_points=max_points,
                                        cover=cover, **sizes, **states)
        store_all = chain.store_all_memory()
        for b in budgets:
            pt = Point(f"remat:{b / store_all:.4f}", "remat", int(b))
            ck = drop_in(w, int(b), solver, chain, pt, sizes=sizes)
            methods.append(Method(pt, None if ck is None else remat_method(w, ck)))
        for text in step_budgets:
            total = parse_bytes(text, "step budget")
            pt = Point(f"remat_step:{text}", "remat", text)
            ck = drop_in(w, str(text), solver, chain, pt, optimizer_bytes, sizes=sizes)
            pt.budget = total - optimizer_bytes
            methods.append(Method(pt, None if ck is None else remat_method(w, ck)))
        if offload_solvers:
            from remat_theory.torch.frontier_offload import offload_methods
            methods += offload_methods(w, chain, Point, Method, remat_method,
                                       solvers=offload_solvers, bandwidth=bandwidth,
                                       budgets=offload_budgets, points=offload_points)
        if compiled_points:
            methods += _compiled_sweep(w, compiled_points, backend, profile_repeats)
        seq = nn.Sequential(*w.stages)
        for k in (segs if "checkpoint_sequential" in fams else ()):
            methods.append(Method(Point(f"checkpoint_sequential:{k}", "checkpoint_sequential", k),
                                   checkpoint_sequential_method(w, seq, k)))
    for i, r in enumerate(compile_budgets):
        methods.append(_compile_budget(w, float(r), backend, i))
    if "remat_inplace" in fams:
        levels = []
        for m in methods:  # each HF every-K level's step peak, by the meter measure() uses
            if m.point.family == "hf_checkpointing" and m.step is not None:
                dev = next(iter(m.params)).device
                _run(m, m.params, dev)
                _measure_peaks(m, m.params, dev)
                levels.append((m.point.param, m.point.step_peak, m.point.peak))
        methods += inplace_methods(w, solver, hf_levels=levels, max_points=inplace_max_points,
                                   budgets=inplace_budgets)
    return methods, chain


def _run(m: Method, params, device):
    """One step: (wall seconds, the calling thread's CPU seconds).  On the CPU with one torch
    thread the whole step (forward, the autograd engine's CPU backward, compiled kernels)
    runs on the calling thread, so its CPU time is the step's work without the time other
    processes held the core (what a shared machine adds to the wall clock)."""
    params = m.params or params
    if m.setup:
        m.setup()
    try:
        _zero_grads(params)
        _sync(device)
        c0 = time.thread_time()
        t0 = time.perf_counter()
        m.step()
        _sync(device)
        t1 = time.perf_counter()
        return t1 - t0, time.thread_time() - c0
    finally:
        if m.teardown:
            m.teardown()


def _measure_peaks(m: Method, params, device):
    params = m.params or params
    if m.setup:
        m.setup()
    try:
        _zero_grads(params)
        m.point.peak = allocator_peak(m.step, device,
                                      persistent=lambda: [p.grad for p in params])
        _zero_grads(params)
        m.point.step_peak = allocator_peak(m.step, device)
    finally:
        if m.teardown:
            m.teardown()


def _grads(m: Method, params, seed: int) -> list:
    params = m.params or params
    if m.setup:
        m.setup()
    try:
        _zero_grads(params)
        torch.manual_seed(seed)
        m.step()
        out = [None if p.grad is None else p.grad.detach().clone() for p in params]
        _zero_grads(params)
        return out
    finally:
        if m.teardown:
            m.teardown()


def _compare(got: list, want: list) -> tuple:
    equal, worst = True, 0.0
    scale = max((float(w.abs().max()) for w in want if w is not None), default=0.0) or 1.0
    for g, w in zip(got, want):
        if (g is None) != (w is None):
            return False, math.inf
        if g is None:
            continue
        if not torch.equal(g, w):
            equal = False
            worst = max(worst, float((g.float() - w.float()).abs().max()) / scale)
    return equal, worst


def measure(methods: list, params, device: torch.device, *, repeats: int = 5,
            warmup: int = 1, seed: int = 0) -> list:
    """Warm up, measure peaks and gradients, then ``repeats`` interleaved timed rounds."""
    runnable = [m for m in methods if m.step is not None]
    for m in runnable:
        for _ in range(warmup):
            _run(m, params, device)
    for m in runnable:
        _measure_peaks(m, params, device)
    want = _grads(runnable[0], params, seed)  # plain
    for m in runnable:
        m.point.grads_equal, m.point.grad_rel_diff = _compare(_grads(m, params, seed), want)
    for m in runnable:
        if m.params:
            _zero_grads(m.params)
    rng = random.Random(seed)
    for _ in range(repeats):
        order = list(runnable)
        rng.shuffle(order)
        for m in order:
            wall, cpu = _run(m, params, device)
            m.point.times.append(wall)
            if device.type == "cpu":  # on an accelerator the thread's CPU time is not the step's
                m.point.cpu_times.append(cpu)
    for m in runnable:
        m.point.time, m.point.spread = _median_spread(m.point.times)
        if m.point.cpu_times:
            m.point.cpu_time, m.point.cpu_spread = _median_spread(m.point.cpu_times)
        if ((isinstance(m.point.param, str) or m.point.family == "remat_inplace")
                and m.point.budget is not None):
            m.point.within_budget = m.point.step_peak <= m.point.budget
    _zero_grads(params)
    return [m.point for m in methods]


def _median_spread(ts: list) -> tuple:
    q = statistics.quantiles(ts, n=4) if len(ts) > 1 else [ts[0]] * 3
    return statistics.median(ts), [q[0], q[2]]


# ------------------------------------------------------------------------ analysis
CLOCKS = {"thread_cpu": "cpu_times", "wall": "times"}
"""The two clocks every CPU point is timed by: the timing thread's CPU time (one torch
thread: the step's own work) and the wall clock (what a user waits)."""


def _paired(a: dict, b: dict, key: str = "times") -> float:
    """Median over rounds of a's time / b's time in the same round (``key``: the clock)."""
    return statistics.median(x / y for x, y in zip(a[key], b[key]))


def _half_iqr(a: dict, b: dict, key: str = "times") -> float:
    r = [x / y for x, y in zip(a[key], b[key])]
    if len(r) < 2:
        return 0.0
    q = statistics.quantiles(r, n=4)
    return (q[2] - q[0]) / 2


def noise(points: list, clock: str = "wall") -> dict:
    """The noise floor on one clock (:data:`CLOCKS`), from two pairs that run the same
    kernels: repeated plain, and remat at store-all against plain.  The tolerance is the
    largest of 2%, each pair's median per-round ratio's distance from 1, and half the
    interquartile range of each pair's per-round ratios (the spread of one comparison from
    round to round).  Empty (no ``tolerance``) when no point was timed on that clock."""
    key = CLOCKS[clock]
    ok = {p["method"]: p for p in points if p["status"] == "ok" and p.get(key)}
    out, spreads = {}, []
    if "plain" in ok and "plain:2" in ok:
        out["plain_repeat"] = _paired(ok["plain:2"], ok["plain"], key)
        out["plain_repeat_half_iqr"] = _half_iqr(ok["plain:2"], ok["plain"], key)
        spreads.append(out["plain_repeat_half_iqr"])
    full = [p for p in points if p["family"] == "remat" and p["status"] == "ok" and p.get(key)
            and p["predicted_peak"] is not None and p["method"].startswith("remat:")]
    if full and "plain" in ok:
        top = max(full, key=lambda p: p["param"])
        out["remat_store_all"] = _paired(top, ok["plain"], key)
        out["remat_store_all_half_iqr"] = _half_iqr(top, ok["plain"], key)
        out["remat_store_all_peak_ratio"] = top["peak"] / max(1, ok["plain"]["peak"])
        spreads.append(out["remat_store_all_half_iqr"])
    inplace = [p for p in points if p["family"] == "remat_inplace" and p["status"] == "ok"
               and p.get(key) and p.get("recomputed") == 0]
    if inplace and "plain" in ok:  # the in-place API's plain-autograd plan: plain's kernels
        top = next((p for p in inplace if p["method"] == "remat_inplace:store-all"), inplace[-1])
        out["inplace_store_all"] = _paired(top, ok["plain"], key)
        out["inplace_store_all_half_iqr"] = _half_iqr(top, ok["plain"], key)
        spreads.append(out["inplace_store_all_half_iqr"])
    if not ok:
        return out
    out["tolerance"] = max([MIN_TOLERANCE] + spreads
                           + [abs(v - 1) for k, v in out.items()
                              if k in ("plain_repeat", "remat_store_all", "inplace_store_all")])
    return out


def choose_clock(points: list) -> tuple:
    """``(clock, noise by clock)``: the clock whose measured noise (tolerance) is the smaller
    (ties: the thread's CPU time), among those every compared point was timed by."""
    by = {c: noise(points, c) for c in CLOCKS}
    have = [c for c in CLOCKS if "tolerance" in by[c]]
    if not have:
        return "wall", by
    return min(have, key=lambda c: by[c]["tolerance"]), by


def dominance(points: list, tolerance: float | None = None, clock: str | None = None,
              families=REMAT, memory: str = "peak") -> dict:
    """For every baseline point, the remat point (of ``families``: by default the drop-in,
    compiled and in-place ones) with no more memory and the least time (per-round ratio on
    ``clock``, default :func:`choose_clock`'s: the one with less noise), and whether that
    ratio is within ``1 + tolerance`` (default: :func:`noise`'s on that clock).  Also each
    family's lowest peak and the issue's goals.  ``memory``: the measure compared, ``peak``
    (parameter gradients apart, the frontier's) or ``step_peak`` (the whole step: what the
    in-place API's byte budgets bound); the rows' and ``lowest``'s ``peak`` are that one."""
    pts = [asdict(p) if isinstance(p, Point) else p for p in points]
    clock, by_clock = choose_clock(pts) if clock is None else (clock, {
        c: noise(pts, c) for c in CLOCKS})
    key = CLOCKS[clock]
    nz = by_clock[clock]
    tol = nz.get("tolerance", MIN_TOLERANCE) if tolerance is None else tolerance
    ok = [p for p in pts if p["status"] == "ok" and p[memory] is not None and p.get(key)]
    remat = [p for p in ok if p["family"] in families and not p["method"].startswith("remat_step")]
    rows = []
    for b in (p for p in ok if p["family"] in BASELINES and p["method"] != "plain:2"):
        cands = [(r, _paired(r, b, key)) for r in remat if r[memory] <= b[memory]]
        best = min(cands, key=lambda c: c[1], default=None)
        compiled = [c for c in cands if c[0]["family"] == "remat_compiled"]
        bestc = min(compiled, key=lambda c: c[1], default=None)
        rows.append({
            "baseline": b["method"], "family": b["family"], "peak": b[memory],
            "time": statistics.median(b[key]),
            "remat": None if best is None else best[0]["method"],
            "remat_peak": None if best is None else best[0][memory],
            "remat_time": None if best is None else statistics.median(best[0][key]),
            "time_ratio": None if best is None else best[1],
            "compiled_time_ratio": None if bestc is None else bestc[1],
            "dominated": best is not None and best[1] <= 1 + tol,
        })
    lowest = {}
    for p in ok:
        if p["method"].startswith("remat_step"):
            continue
        if p["family"] not in lowest or p[memory] < lowest[p["family"]]["peak"]:
            lowest[p["family"]] = {"method": p["method"], "peak": p[memory], "time": p["time"],
                                   "cpu_time": p.get("cpu_time")}
    remat_low = min((lowest[f]["peak"] for f in families if f in lowest), default=None)
    base_low = {f: lowest[f]["peak"] for f in BASELINES if f in lowest}
    below = remat_low is not None and all(remat_low < v for v in base_low.values())
    fam_ok = {f: all(r["dominated"] for r in rows if r["family"] == f) for f in BASELINES}
    comp_rows = [r for r in rows if r["family"] == "compile_budget"]
    return {
        "rows": rows, "lowest": lowest, "noise": nz, "tolerance": tol, "clock": clock,
        "memory": memory,
        "noise_by_clock": by_clock,
        "remat_lowest_below_baselines": below,
        "all_dominated": bool(rows) and all(r["dominated"] for r in rows),
        "goals": {
            "lowest_memory": below,
            "hf_and_checkpoint_sequential_dominated": fam_ok["hf_checkpointing"]
            and fam_ok["checkpoint_sequential"],
            "compile_budget_dominated": fam_ok["compile_budget"],
            "below_compile_lowest": (remat_low is not None and "compile_budget" in base_low
                                     and remat_low < base_low["compile_budget"]),
            # the compiler against the compiler: remat's schedule compiled as one graph
            "compile_budget_dominated_by_compiled_remat": bool(comp_rows) and all(
                r["compiled_time_ratio"] is not None and r["compiled_time_ratio"] <= 1 + tol
                for r in comp_rows),
            "compiled_remat_below_compile_lowest": (
                "remat_compiled" in lowest and "compile_budget" in base_low
                and lowest["remat_compiled"]["peak"] < base_low["compile_budget"]),
        },
    }


def run_frontier(w, *, device="cpu", repeats: int = 5, seed: int = 0, **kw) -> dict:
    """Prepare, measure and analyse one workload (or a
    :class:`~remat_theory.torch.networks.Network`); returns a JSON-ready record."""
    if not isinstance(w, Workload):
        w = from_network(w)
    dev = torch.device(device)
    w.to(dev)
    params = [p for p in w.model.parameters() if p.requires_grad]
    seen = {id(p) for p in params}
    for s in w.stages or []:
        params += [p for p in s.parameters() if p.requires_grad and id(p) not in seen
                   and not seen.add(id(p))]
    t0 = time.perf_counter()
    limit = torch._dynamo.config.cache_size_limit
    torch._dynamo.config.cache_size_limit = max(limit, 64)
    try:
        methods, chain = prepare(w, **kw)
        points = measure(methods, params, dev, repeats=repeats, seed=seed)
    finally:
        torch._dynamo.config.cache_size_limit = limit
    rec = {
        "network": w.name,
        "config": w.config,
        "input_shape": list(w.example_input.shape),
        "device": str(dev),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "repeats": repeats,
        "backend": kw.get("backend", "inductor"),
        "profile_clock": profile_clock(w.example_input),
        "stages": None if chain is None else chain.length,
        "capture_error": w.capture_error,
        "store_all_predicted": None if chain is None else chain.store_all_memory(),
        "parameter_gradient_bytes": sum(p.numel() * p.element_size() for p in params),
        "points": [asdict(p) for p in points],
    }
    rec["dominance"] = dominance(rec["points"])
    if any(p["family"] == "remat_inplace" for p in rec["points"]):
        rec["dominance_inplace"] = dominance(rec["points"], families=("remat_inplace",))
        rec["dominance_inplace_step"] = dominance(rec["points"], families=("remat_inplace",),
                                                  memory="step_peak")
    rec["wall_time"] = time.perf_counter() - t0
    return rec


def format_table(record: dict) -> str:
    """One line per baseline point: its memory and time, and the best remat point at no more
    memory (MiB, ms, per-round time ratio)."""
    d = record["dominance"]
    low = d["lowest"]
    base_low = min((v["peak"] for k, v in low.items() if k in BASELINES), default=None)
    remat_low = min((low[f]["peak"] for f in REMAT if f in low), default=None)
    head = (f"{record['network']} {record['input_shape']} ({record['stages']} stages): "
            f"noise {d['tolerance']:.3f} ({d.get('clock', 'wall')} clock); "
            f"{'remat dominates every baseline point' if d['all_dominated'] else 'NOT all dominated'}; "
            f"lowest memory remat {_mib(remat_low)} MiB vs baselines {_mib(base_low)} MiB")
    lines = [head, f"{'baseline':<26}{'MiB':>9}{'ms':>9}  {'best remat at <= memory':<24}"
                   f"{'MiB':>9}{'ms':>9}{'ratio':>7}"]
    for r in d["rows"]:
        lines.append(f"{r['baseline']:<26}{_mib(r['peak']):>9}{r['time'] * 1e3:>9.1f}  "
                     f"{(r['remat'] or '-'):<24}{_mib(r['remat_peak']):>9}"
                     f"{'' if r['remat_time'] is None else format(r['remat_time'] * 1e3, '.1f'):>9}"
                     f"{'' if r['time_ratio'] is None else format(r['time_ratio'], '.3f'):>7}")
    for p in record["points"]:
        if p["status"] != "ok":
            lines.append(f"  {p['method']}: {p['status']}: {p['detail'][:160]}")
        elif p["within_budget"] is not None:
            lines.append(f"  {p['method']}: step peak {format_bytes(p['step_peak'])} "
                         f"{'within' if p['within_budget'] else 'ABOVE'} the budget "
                         f"{format_bytes(p['budget'])}"
                         + ("; the asked budget was refused" if "refused:" in p["detail"]
                            else ""))
    return "\n".join(lines)


def _mib(v) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v / 2**20:.2f}"


_STYLE = {"remat": ("o", "C0", "-"), "remat_compiled": ("o", "C9", "-"),
          "plain": ("s", "k", "none"), "hf_checkpointing": ("v", "C3", ":"),
          "checkpoint_sequential": ("^", "C1", "none"), "compile_budget": ("D", "C2", ":"),
          "remat_offload": ("P", "C4", "--"), "remat_inplace": ("*", "C5", "-")}


def plot(records: list, path, title: str = "") -> None:
    """Time per step against peak activation memory, one panel per record."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(records)
    fig, axes = plt.subplots(1, n, figsize=(6.0 * n, 4.6), squeeze=False)
    for ax, rec in zip(axes[0], records):
        pts = [p for p in rec["points"] if p["status"] == "ok" and p["peak"] is not None
               and not p["method"].startswith("remat_step")]
        for fam in FAMILIES:
            ps = sorted((p for p in pts if p["family"] == fam), key=lambda p: p["peak"])
            if not ps:
                continue
            marker, color, ls = _STYLE[fam]
            xs = [p["peak"] / 2**20 for p in ps]
            ys = [p["time"] * 1e3 for p in ps]
            err = [[(p["time"] - p["spread"][0]) * 1e3 for p in ps],
                   [(p["spread"][1] - p["time"]) * 1e3 for p in ps]]
            ax.errorbar(xs, ys, yerr=err, marker=marker, color=color, linestyle=ls,
                        label=fam, markersize=4, capsize=2, linewidth=1)
        ax.set_xlabel("peak activation memory (MiB, allocator, gradients apart)")
        ax.set_ylabel("time per training step (ms)")
        ax.set_title(f"{rec['network']} {rec['input_shape']} (noise "
                     f"{rec['dominance']['tolerance']:.3f})", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


__all__ = ["Point", "Method", "prepare", "plain_method", "hf_methods", "checkpoint_sequential_method",
           "drop_in", "remat_method", "measure", "noise", "dominance", "run_frontier", "format_table",
           "plot", "remat_breakpoints", "drop_in_states", "hf_schedule_tree", "hf_schedule_peaks",
           "FAMILIES", "BASELINES", "DEFAULT_COMPILE_BUDGETS", "DEFAULT_FAMILIES",
           "inplace_methods", "inplace_breakpoints"]
