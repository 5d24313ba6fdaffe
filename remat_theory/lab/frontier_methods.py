"""The methods a frontier compares, each a way to train the same workload under a memory
budget (plain autograd, Hugging Face's checkpointing, torch's ``checkpoint_sequential``, the
drop-in at each of its breakpoints, the drop-in's schedules compiled), and the points they give."""
from __future__ import annotations

import copy
import itertools
import math
import numbers
import types
from dataclasses import dataclass, field

import torch
import torch._dynamo
from torch import nn
from torch.utils.checkpoint import checkpoint_sequential

import solvers as solver_registry
from remat_theory.lab.frontier_networks import Workload
from remat_theory.model.errors import InfeasibleBudgetError, RematError, SolverContractError
from remat_theory.model.simulator import simulate
from remat_theory.torch.modules.checkpointed import (Budget, CheckpointedSequential,
                                                     CheckpointOptions)
from remat_theory.torch.modules.traceable import run_traceable, traceable_prelude
from remat_theory.torch.plan.budget import RNG_STATE_BYTES, carried_step_bytes
from remat_theory.torch.plan.levels import (LOSS_BYTES, dropin_peak, plain_loss_bytes,
                                            shared_parameter_bytes, smallest_with_states,
                                            solve_with_states)
from remat_theory.torch.plan.nested_form import Checkpointed, End, Kept, Segment, nested_schedule
from remat_theory.torch.plan.rounding import auto_unit, rounded_chain
from remat_theory.torch.profiling.profiler import profile, stage_draws
from solvers.periodic import periodic_checkpoints


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


def method_error(point: Point, e: Exception, status: str = "error") -> Method:
    text = str(e).splitlines()[0] if str(e) else ""
    point.status, point.detail = status, f"{type(e).__name__}: {text}"[:400]
    return Method(point)


def zero_grads(params) -> None:
    for p in params:
        p.grad = None


def sync(device: torch.device) -> None:
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


def hf_layers(model) -> int:
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
    n = hf_layers(w.model)
    out = []
    for k in range(1, max(1, n) + 1):
        pt = Point(f"hf_checkpointing:{k}", "hf_checkpointing", k)
        model = copy.deepcopy(w.model)
        try:
            _hf_toggle(model, k)
        except Exception as e:  # noqa: BLE001 - the model refuses: a result
            out.append(method_error(pt, e, "unsupported"))
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


def compile_budget_of(w: Workload, r: float, backend: str, index: int) -> Method:
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
        return method_error(pt, e)
    return Method(pt, step)


def remat_breakpoints(chain, stages, solver: str = "dp", *, resolution: int = 1024,
                      max_points: int = 16, solver_options=None, cover=(), draws=None,
                      state_bytes: int = 0, loss_bytes: int | None = None,
                      input_grad_bytes: int = 0, carried: int = 0) -> list:
    """Budgets (bytes of the chain) where the drop-in's makespan steps down, from its smallest
    feasible budget to store-all, as :class:`CheckpointedSequential` solves them: through
    its own :func:`~remat_theory.torch.modules.checkpointed.solve_with_states` (the same rounding, the
    shared-gradient reserve, and the random-generator states its checkpoints keep:
    ``state_bytes`` each, :data:`~remat_theory.torch.modules.checkpointed.RNG_STATE_BYTES` on the CPU, only
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
    (:func:`~remat_theory.torch.modules.checkpointed.carried_step_bytes`; :func:`drop_in_states` gives it)."""
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
    return level_breakpoints(level, lo, store_all, max(1, store_all // resolution),
                              max_points, cover, 0)


def drop_in_states(stages, x: torch.Tensor) -> dict:
    """``draws`` and ``state_bytes`` for :func:`remat_breakpoints`, as the drop-in finds them
    for input ``x``: which stages draw random numbers (:func:`stage_draws`) and the bytes of
    one kept generator state (on the CPU; on CUDA the states are host memory: 0), and
    ``carried``: the bytes of the values the first stage hands the others, which the drop-in
    reserves at every budget (:func:`~remat_theory.torch.modules.checkpointed.carried_step_bytes`)."""
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
    on a chain captured at the model's layers (:mod:`~remat_theory.torch.capture.seams`): the stage
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
    from remat_theory.torch.plan.levels import schedule_level  # the drop-in's own fit of a schedule
    rc = rounded_chain(chain, auto_unit(chain))
    reserve = 2 * shared_parameter_bytes(stages) + carried
    out = []
    for k in ks:
        tree = hf_schedule_tree(stages, k)
        if tree is None:
            continue
        sched = nested_schedule(tree, chain.length)
        rpeak = simulate(rc, sched).peak_memory
        _, _, fit = schedule_level(chain, types.SimpleNamespace(schedule=sched), "hf", list(stages),
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
    """The drop-in at ``budget`` on ``chain`` (an int: bytes of the chain, as the lab's
    budgets are, handed to the drop-in as ``Budget.activations``, which is how the drop-in
    spells it; a str or a Budget as given); ``sizes``: the profile's ``loss_bytes`` and
    ``input_grad_bytes`` (``ProfileResult``), as the drop-in would find them profiling
    itself (without: :data:`LOSS_BYTES` and no B_0 saving)."""
    try:
        if isinstance(budget, numbers.Integral) and not isinstance(budget, bool):
            budget = Budget.activations(int(budget))
        ck = CheckpointedSequential(w.stages, budget=budget, solver=solver,
                                    example_input=w.example_input, loss_fn=w.loss_fn,
                                    optimizer_state=optimizer_bytes or None,
                                    options=CheckpointOptions(chain=chain, **(sizes or {})))
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


def level_breakpoints(level, smallest: int, largest: int, step: int, max_points: int, cover,
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


def remat_compiled(w: Workload, tree, stages, pt: Point, backend: str, index: int) -> Method:
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
        return method_error(pt, e)
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


def compiled_sweep(w: Workload, points: int, backend: str, profile_repeats: int) -> list:
    """``remat_compiled`` points: single-level schedules (:func:`flat_levels`: the fastest at
    each peak, optimal over that class, the class one compiled graph realises) over the
    graph-captured stages (:meth:`Workload.graph_stages`; their chain profiled with each stage
    compiled by ``backend``, :func:`compiled_chain`, the eager stages' where that fails), at
    ``points`` of their levels spread from the lowest to store-all, each compiled as one
    graph."""
    try:
        stages = w.graph_stages()
    except Exception as e:  # noqa: BLE001 - a capture failure is a result
        return [method_error(Point("remat_compiled", "remat_compiled"), e)]
    try:
        chain, source = compiled_chain(stages, w, backend, profile_repeats), "compiled stages"
    except Exception as e:  # noqa: BLE001 - then the eager stages' chain predicts
        try:
            chain = profile(stages, w.example_input, w.loss_fn, repeats=profile_repeats,
                            clock=profile_clock(w.example_input))
        except Exception as e2:  # noqa: BLE001 - a profile failure is a result
            return [method_error(Point("remat_compiled", "remat_compiled"), e2)]
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
        out.append(remat_compiled(gw, tree, stages, pt, backend, j))
    return out


def profile_clock(x: torch.Tensor) -> str:
    """The clock the chain's stage times are profiled by: on the CPU the process's CPU time
    (one torch thread: the stages' own work; wall-clock profiles of the same model on a
    loaded machine differed threefold between runs, which steered the DP's choice among
    schedules of nearly equal cost), elsewhere the device's own timer."""
    return "process" if x.device.type == "cpu" else "wall"
