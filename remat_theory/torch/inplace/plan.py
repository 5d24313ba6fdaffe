"""The plan of one input shape: a budget in the user's units, the layers' chain, a schedule.

Budgets (:func:`parse_budget`): a float in (0, 1] is a fraction of the step's activation
peak without recomputation (``LayerProfile.store_all_activations``); an int, or a str with
a unit (``"6GiB"``), is the whole training step's peak above the resident model, as the
allocator measures it from the start of the forward to the end of ``backward()``:
activations, the parameters' gradients as the backward makes them (:class:`Gradients`),
the loss; :data:`ENGINE_MARGIN` of it is kept free where the plan rests on its prediction.
A plan may instead be *verified* (:func:`_verified`): where the fastest schedule whose
predicted peak fits the whole budget is faster than the one fitting it less the margin, or
nothing fits with the margin, that schedule (or the least-memory one) is run once at plan
time on the call's inputs, the allocator measuring the step, and accepted if it measured
within the budget (``LayerPlan.measured_step_peak``).

The solver sees the layers' chain with sizes rounded up to a unit
(:mod:`remat_theory.torch.plan.rounding`) and the budget left once what is held beside the chain
(the prefix's tape, values several layers read) and the gradients are taken out; each
schedule is then replayed on the exact chain by the simulator, with the gradients on the
step's timeline and the profile's calibration (:func:`step_peak`), which gives the
predicted peak and time.  An empirical prediction, not a bound: measured / predicted
0.867-1.009 on the frontier's networks (docs/torch.md), 0.981-1.004 over every
keep-or-recompute schedule of nine networks (docs/train.md).
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
from remat_theory.torch.inplace.records import LayerProfile
from remat_theory.torch.plan.budget import format_bytes, parse_bytes
from remat_theory.torch.plan.nested_form import (Segment, nested_form, opened_segments,
                                                 recomputed_stages)
from remat_theory.torch.plan.rounding import auto_unit, rounded_chain


__all__ = ["ENGINE_MARGIN", "Gradients", "LayerPlan", "calibrate", "make_plan",
           "measured_gradients", "parse_budget", "step_budget", "step_peak"]

ENGINE_MARGIN = 0.01
"""Share of a step budget (bytes) the plan keeps free: what the prediction still misses.
Measured / predicted step peaks (CPU, small configurations, the allocator meter), once the
step's model placed each gradient where autograd makes it, took the rises from what is
live and counted what the code between two unchained layers holds where it is held:
0.991-1.004 at the least-memory plan on llama, qwen2, gpt2, opt, bert, t5, bart,
deberta-v2 (benchmarks/inplace_vs_hf.py); 0.981-1.004 over every keep-or-recompute schedule
of nine six-layer networks, T5, BART and Pegasus included (``--sweep``; T5 reached 1.042
before the hand-off between its encoder and decoder was counted, docs/train.md).  Not a
proven bound.  (It was 3% while the prediction missed by up to 1.7%.)  A plan verified by
a step run at plan time keeps no margin: it rests on that measurement, not on a
prediction (:func:`make_plan`'s ``measure``)."""


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
    predicted_step_peak: int  # activations and the parameters' gradients as they appear
    # the step's peak as the allocator measured it at plan time (bytes, gradients included):
    # a verified plan, accepted on its measurement rather than on its prediction less the
    # margin; None where the plan rests on its prediction
    measured_step_peak: int | None = None

    @property
    def chain(self) -> Chain:
        return self.profile.chain

    @property
    def schedule(self) -> Schedule | None:
        return None if self.solution is None else self.solution.schedule

    @property
    def recomputed(self) -> int:
        """Layer forwards recomputed per step."""
        return 0 if self.tree is None else recomputed_stages(self.tree)

    @property
    def verified(self) -> bool:
        """Accepted on the measured peak of one step run at plan time (see :func:`make_plan`)."""
        return self.measured_step_peak is not None

    def __repr__(self) -> str:
        what = ("plain autograd" if self.tree is None
                else f"{self.recomputed} layer forwards recomputed, solver {self.solution.solver}")
        proof = ("" if self.measured_step_peak is None else
                 f", verified by measurement: {self.measured_step_peak} B")
        return (f"LayerPlan({self.chain.length} layers, {what}; predicted step peak "
                f"{format_bytes(self.predicted_step_peak)}{proof}, time "
                f"{self.predicted_time:.4g} s)")


@dataclass(frozen=True)
class Gradients:
    """When the parameters' gradients appear in a step (bytes): ``by_layer[i]`` at the first
    backward of layer i's module (the backward runs from the last layer down, so a module
    called several times gets it at its last call's backward), ``other`` (the prefix's and
    the suffix's parameters, tied embeddings included) from the loss on.  (Counting the
    embeddings' from the prefix's backward only, at the step's end, under-predicted Llama's
    every-layer step by 5%: a step's peak is not where the table puts it.)"""

    by_layer: dict
    other: int
    end: int = 0  # made by the prefix's backward, the step's last operation (embeddings)

    @property
    def total(self) -> int:
        return sum(self.by_layer.values()) + self.other + self.end


def measured_gradients(prof: LayerProfile, default: Gradients) -> Gradients:
    """Where one real step of the profile made each parameter's gradient
    (``LayerProfile.grads_made``): the loss stage's (``other``), layer i's (``by_layer``),
    the prefix's at the step's end (``end``: an embedding's gradient is made after every
    layer's backward, which counting it from the loss on put 0.78 MB too high on BERT's
    every-layer step); ``default`` (by the modules' structure) where not measured."""
    made = prof.grads_made
    if made is None:
        return default
    by_layer = {k: v for k, v in made.items() if isinstance(k, int) and v}
    return Gradients(by_layer, made.get("loss", 0), made.get("end", 0))


def _index(op: str, n: int) -> int:
    return n if op == "Loss" else int(op.lstrip("FalckBn"))


def step_peak(prof: LayerProfile, schedule, grads: Gradients):
    """(the step's peak in bytes, activations and gradients together, the makespan) of
    ``schedule``: the simulator's memory at every operation, what is held beside the chain
    there (``LayerProfile.held_at``), and the gradients made so far.  A layer's backward's
    peak is what it was measured to rise above the memory held when it starts
    (``LayerProfile.bwd_rise``), which autograd keeps below the operation table's by freeing
    the tape as it goes, less the layer's output where its backward does not read it (the
    table's tape holds it to B_i; autograd let it go at B_{i+1}); the loss stage's, what it
    rose by in a real step (``LayerProfile.loss_rise``) where that is more than the table's."""
    sim = simulate(prof.chain, schedule)
    n = prof.chain.length
    made, peak, backward = 0, 0, False
    factor = prof.calibration
    for st in sim.profile:
        at = st.peak
        i = _index(st.op, n)
        if st.op == "Loss":  # the gradients outside the layers, counted from the loss on
            backward = True
            row = at + grads.other
            if prof.loss_rise is not None:  # as one real step rose (its gradients in it)
                row = max(row, st.memory_before + prof.loss_rise)
            peak = max(peak, row + prof.held_at(i, True, st.state.tapes) + made)
            made += grads.other
            continue
        if st.op.startswith("B"):
            at = st.memory_before + prof.bwd_rise[i]  # the layer's gradients in its rise
            if not prof.saves_output[i]:  # x_{i+1}, in the table's tape, is gone by now
                at -= prof.chain.x_size[i + 1]
            peak = max(peak, at + prof.held_at(i, True, st.state.tapes) + made)
            made += grads.by_layer.get(i, 0)
            continue
        peak = max(peak, at + prof.held_at(i, backward, st.state.tapes) + made)
    return int(math.ceil(factor * max(peak, prof.end_peak + grads.total))), sim.makespan


def calibrate(prof: LayerProfile, grads: Gradients) -> None:
    """Set ``prof.calibration``: the factor (at least 1) by which the model under-predicts
    the plain step the profile measured (the allocator's peak of one real step without
    recomputation); every prediction is raised by it.  What it covers: memory the chain
    does not model, chiefly the backward of code between two layers that are not chained
    (a convolutional network's downsampling, whose kernels allocate workspaces)."""
    prof.calibration = 1.0
    measured = prof.plain_step_measured
    predicted = step_peak(prof, _store_all(prof.chain), grads)[0]
    if measured and predicted:
        prof.calibration = max(1.0, measured / predicted)


def _say(kind, v) -> str:
    """A budget in its units; a fraction rounded up (the figure named must be accepted)."""
    return (f"{math.ceil(v * 10_000) / 10_000:.4f} of store-all" if kind == "fraction"
            else format_bytes(v))


def _solve(chain, budget: int, solver, options, unit):
    if budget <= 0:
        return None
    sol = solver_registry.solve(rounded_chain(chain, unit), budget, solver, **options)
    return sol if sol.schedule is not None else None


def _fits(prof, grads, kind, limit, chain_budget, solver, options, unit):
    """The solver's schedule for ``chain_budget`` if the step it makes fits ``limit``."""
    sol = _solve(prof.chain, chain_budget, solver, options, unit)
    if sol is None:
        return None
    if kind == "fraction":
        peak = _activations(prof, grads, sol.schedule)
    else:
        peak = step_peak(prof, sol.schedule, grads)[0]
    return (sol, peak) if peak <= limit else None


def _least(prof, solver, options, unit):
    """The solver's least chain budget on the profile's rounded chain (cached), or None."""
    key = (solver, unit, repr(sorted(options.items())))
    cache = prof.__dict__.setdefault("_least_budgets", {})
    if key not in cache:
        cache[key] = solver_registry.solve(rounded_chain(prof.chain, unit), 1, solver,
                                           **options).min_budget
    return cache[key]


def _search(prof, grads, kind, limit, solver, options, unit, fine=False):
    """(solution, peak) of the fastest schedule found whose step fits ``limit``, or None: a
    binary search on the chain's budget, from the solver's least to what the limit leaves
    once the prefix's tape is taken out (a larger chain budget, a faster schedule that holds
    more; the gradients and the values beside the chain are on the step's timeline), to a
    resolution of 1/64 of the gradients (a step budget) or of the range (a fraction).

    ``fine`` (the search for a schedule to verify by measurement): to one rounding unit,
    and up to the rounded chain's store-all peak.  The chain's operation table holds more
    than the step's model (a backward's rise is taken from the real step, below the table's
    tape and overhead), so a schedule whose step fits can need a chain budget above what the
    limit leaves: under HF's every-4-layers step peak on the frontier's ViT, 7,487,344 B,
    recomputing layer 0 or 1 has its step predicted at 7,482,287 B and its rounded chain
    peak at 7,630,848 B, which the search capped at the limit (7,487,337 B of chain) never
    gives the solver.  Not exhaustive: where the solver's times make another schedule of
    the same chain peak the fastest (recomputing ViT's layer 2: step 8,142,255 B), the
    search passes that chain budget by."""
    room = int(limit / prof.calibration)  # the predictions are raised by the calibration
    least = _least(prof, solver, options, unit)
    if least is None:
        return None
    lo, hi = least, room - prof.always_bytes
    if fine:
        rounded = rounded_chain(prof.chain, unit)
        hi = max(hi, simulate(rounded, _store_all(prof.chain)).peak_memory)
    if hi < lo:
        return None
    got = _fits(prof, grads, kind, limit, hi, solver, options, unit)
    if got is not None:
        return got
    best = _fits(prof, grads, kind, limit, lo, solver, options, unit)
    if best is None:
        return None
    resolution = unit if fine else max(unit, (hi - lo) // 64 if kind == "fraction"
                                       else grads.total // 64)
    while hi - lo > resolution:
        mid = (lo + hi) // 2
        got = _fits(prof, grads, kind, limit, mid, solver, options, unit)
        if got is not None:
            best, lo = got, mid
        else:
            hi = mid
    return best


def _limit(kind, value, prof) -> int:
    """The bytes a budget gives the step's activations (a fraction) or the whole step."""
    if kind == "fraction":
        return int(value * prof.store_all_activations)
    return value - int(math.ceil(value * ENGINE_MARGIN))


def make_plan(key, prof: LayerProfile, budget, grads: Gradients, chained: list, *,
              solver: str = "dp", solver_options=None, describe: str = "",
              measure=None) -> LayerPlan:
    """Solve one shape's chain for ``budget`` (see the module docstring).

    A fraction is of the activations alone: the solver gets it less what is held beside the
    chain.  A step budget also holds the gradients, which appear as the backward goes: the
    solver is first given the budget less all of them (always safe), then larger shares,
    each schedule checked against the step's real timeline (:func:`step_peak`), and the
    largest share that fits is kept (the fastest schedule).

    ``measure`` (plan -> the allocator's peak of one step run under it, or None; the API
    gives :func:`.verify.measure_plan`): a step budget's plan may then be verified by
    measurement (:func:`_verified`) instead of resting on its prediction less
    :data:`ENGINE_MARGIN`."""
    kind, value = parse_budget(budget)
    options = dict(solver_options or {})
    chain = prof.chain
    barriers = [j for j in range(chain.length - 1) if not chained[j]]
    if barriers and solver == "dp" and "barriers" not in options:
        # the model's own code between two layers: no checkpointed segment may span it
        options["barriers"] = barriers
    total = grads.total
    limit = _limit(kind, value, prof)
    plain_step = step_peak(prof, _store_all(chain), grads)[0]
    plain = prof.store_all_activations if kind == "fraction" else plain_step
    plain_time = sum(chain.fall_time) + sum(chain.bwd_time) + prof.prefix_time
    verify = kind == "bytes" and measure is not None
    if plain <= limit and not (verify and prof.plain_step_measured is not None
                               and prof.plain_step_measured > value):
        return LayerPlan(key, prof, limit, None, None, prof.store_all_activations, total, plain_time,
                         plain_step)
    if verify and prof.plain_step_measured is not None and prof.plain_step_measured <= value:
        # the profile's own plain step, measured by the same meter, fits the whole budget
        return LayerPlan(key, prof, value, None, None, prof.store_all_activations, total,
                         plain_time, plain_step, prof.plain_step_measured)
    unit = auto_unit(chain)
    best = _search(prof, grads, kind, limit, solver, options, unit)
    if verify:
        got = _verified(key, prof, grads, value, best, chained, solver, options, unit, measure)
        if got is REFUSED:  # the margin's plan too, run, measured above the budget
            best = None
        elif got is not None:
            return got
    if best is None:
        raise _infeasible(prof, grads, kind, value, plain, solver, options, unit, describe,
                          verify)
    return _plan_of(key, prof, limit, best[0], grads, chained, solver)


def _plan_of(key, prof, limit, sol, grads, chained, solver) -> LayerPlan:
    """The plan of the solver's solution ``sol`` (its nested form checked against the
    model's own code between layers)."""
    tree = nested_form(sol.schedule, prof.chain.length)
    for seg in opened_segments(tree):
        for j in range(seg.s, seg.k - 1):
            if not chained[j]:
                raise RematError(
                    f"the schedule of solver {solver!r} recomputes layers {seg.s}..{seg.k - 1} "
                    f"as one segment, but the model runs code of its own between layer {j} "
                    f"and layer {j + 1} (its output is not the next layer's input): such a "
                    f"segment cannot be recomputed layer by layer; solver 'dp' keeps its "
                    f"segments apart there (its barriers option)")
    step, makespan = step_peak(prof, sol.schedule, grads)
    act = _activations(prof, grads, sol.schedule)
    return LayerPlan(key, prof, limit, sol, tree, act, grads.total, makespan + prof.prefix_time,
                     step)


def _least_solution(prof, solver, options, unit):
    """The solver's least-memory schedule of the profile's chain, or None."""
    least = _least(prof, solver, options, unit)
    return None if least is None else _solve(prof.chain, least, solver, options, unit)


def _every_layer_solution(prof):
    """Every layer's input checkpointed, each layer recomputed once (the last kept): the
    computation HF's every-layer gradient checkpointing runs, or None for one layer."""
    n = prof.chain.length
    if n < 2:
        return None
    ops = [f"Fck{i}" for i in range(n - 1)] + [f"Fall{n - 1}", "Loss", f"B{n - 1}"]
    for i in range(n - 2, -1, -1):
        ops += [f"Fall{i}", f"B{i}"]
    schedule = Schedule.parse(" ".join(ops))
    sim = simulate(prof.chain, schedule)
    return Solution.feasible("every-layer", None, schedule, sim.makespan, sim.peak_memory)


def _least_step_solutions(prof, grads, solver, options, unit) -> list:
    """The schedules run where nothing else fits, in this order: every layer checkpointed
    (:func:`_every_layer_solution`), the fastest schedule whose predicted step peak is the
    least-memory schedule's (found by :func:`_search`), the least-memory schedule itself.
    Where several schedules share the least predicted step (a peak of the step that no
    keep-or-recompute choice moves), the solver's least chain budget picks the one
    recomputing most, which can measure more than one recomputing less.  Tiny Mamba
    (``test_inplace_families``): four schedules predicted at 759,632 B; one checkpoint and
    six layer forwards recomputed measured 706,936 B, every layer checkpointed 696,824 B
    (HF's every-layer step, to the byte).  Tiny Pegasus: predicted 244,440 B each; the
    least 254,000 B, the fastest of them 251,528 B, every layer checkpointed 248,944 B
    (HF's every-layer step: 249,376 B)."""
    least = _least_solution(prof, solver, options, unit)
    if least is None:
        return []
    got = _search(prof, grads, "bytes", step_peak(prof, least.schedule, grads)[0], solver,
                  options, unit, fine=True)
    out = []
    for sol in (_every_layer_solution(prof), None if got is None else got[0], least):
        if sol is not None and all(str(sol.schedule) != str(o.schedule) for o in out):
            out.append(sol)
    return out


def _measured(prof, plan, measure):
    """The measured step peak of ``plan``'s schedule, measured once per profile (cached: a
    schedule is run at most once for one input shape, whatever the budgets asked)."""
    cache = prof.__dict__.setdefault("_measured_steps", {})
    text = "plain" if plan.solution is None else str(plan.solution.schedule)
    if text not in cache:
        cache[text] = measure(plan)
    return cache[text]


REFUSED = "refused"  # _verified: every candidate, run, measured above the budget


def _verified(key, prof, grads, value, best, chained, solver, options, unit, measure):
    """A plan for step budget ``value`` accepted on a measurement, :data:`REFUSED` where
    every candidate measured above it, or None where the profile cannot measure a step (the
    prediction less the margin stands).

    The margin exists for predictions nobody measured.  Where the fastest schedule whose
    predicted peak fits the whole budget (:func:`_search` at ``value``) is faster than
    ``best`` (the one fitting the budget less the margin, or None), it is run once and
    accepted if its measured peak is within ``value``; else ``best`` is run and accepted on
    the same terms (its prediction can miss by more than the margin: 2.9% on a tiny
    Pegasus, 9% on a tiny ALBERT), else the least-memory schedules
    (:func:`_least_step_solutions`).  At most five steps per input shape and budget, each
    schedule measured at most once per shape
    (:func:`_measured`).  Acceptance on measurements is not proven monotone in the
    budget: a larger budget can pick a faster candidate that measures above it and then
    fall back to the least-memory schedule, which may measure above it too, where a smaller
    budget's candidate measured within (not seen on the networks measured)."""
    candidates = []
    raw = _search(prof, grads, "bytes", value, solver, options, unit, fine=True)
    if raw is not None and (best is None or step_peak(prof, raw[0].schedule, grads)[1]
                            < step_peak(prof, best[0].schedule, grads)[1]):
        candidates.append(raw[0])
    for sol in ([None if best is None else best[0]]
                + _least_step_solutions(prof, grads, solver, options, unit)):
        if sol is not None and all(str(sol.schedule) != str(c.schedule) for c in candidates):
            candidates.append(sol)
    for sol in candidates:
        plan = _plan_of(key, prof, value, sol, grads, chained, solver)
        got = _measured(prof, plan, measure)
        if got is None:  # the profile could not measure its step: the prediction stands
            return None
        if got <= value:
            plan.measured_step_peak = got
            return plan
    return REFUSED


def _activations(prof, grads, schedule) -> int:
    """The step's activation peak (gradients apart) of ``schedule``, calibrated: the
    simulator's memory at every operation and what is held beside the chain there."""
    n, backward, peak = prof.chain.length, False, prof.end_peak
    for st in simulate(prof.chain, schedule).profile:
        backward = backward or st.op == "Loss"
        peak = max(peak, st.peak + prof.held_at(_index(st.op, n), backward,
                                                  st.state.tapes))
    return int(math.ceil(prof.calibration * peak))


def _store_all(chain):
    n = chain.length
    return [f"Fall{i}" for i in range(n)] + ["Loss"] + [f"B{i}" for i in reversed(range(n))]


def _infeasible(prof, grads, kind, value, plain, solver, options, unit, describe,
                verified=False):
    """The error for a budget no schedule of the solver fits, naming the smallest budget the
    plan accepts (searched from the solver's least-memory schedule upward, to a resolution
    of one rounding unit or 1/1024 of the budget: the budget named is accepted, one
    resolution less is not), in the same units as the budget and store-all.  ``verified``
    (a step budget whose plan :func:`_verified` tried): where the least-memory schedule's
    measured step is below that, it is named instead (accepted: that schedule, run, fits
    it; a budget below it is accepted only if another schedule, run, measures within it,
    which this search does not run)."""
    chain = prof.chain
    probe = solver_registry.solve(rounded_chain(chain, unit), 1, solver, **options)
    smallest = None
    if probe.min_budget is not None:
        least = probe.min_budget + prof.always_bytes  # no schedule below: a lower bound
        sol = _solve(chain, probe.min_budget, solver, options, unit)
        guess = least if sol is None or kind == "fraction" else max(
            least, step_peak(prof, sol.schedule, grads)[0])
        if kind == "fraction":
            whole = prof.store_all_activations
            lo, hi = least / whole, max(guess, prof.end_peak) * prof.calibration / whole
            resolution = unit / whole
        else:
            lo, hi = step_budget(least), step_budget(max(guess, prof.end_peak))
            resolution = max(unit, hi // 1024)

        def accepted(v):
            return _search(prof, grads, kind, _limit(kind, v, prof), solver, options,
                           unit) is not None

        gap = resolution
        for _ in range(64):  # a budget that is accepted, then down to the resolution
            if accepted(hi):
                smallest = hi
                break
            lo, hi, gap = hi, hi + gap, gap * 2
        while smallest is not None and hi - lo > resolution:
            mid = (lo + hi) / 2 if kind == "fraction" else (lo + hi) // 2
            if accepted(mid):
                smallest = hi = mid
            else:
                lo = mid
    measured = None
    if verified:  # the least-memory schedule's step, as _verified measured it: that
        # schedule is the solver's least chain budget's, whatever the profile's layer times,
        # so a budget of its measured step is accepted on any profile of this shape (the
        # fastest schedule at its predicted step, also run, rests on those times: what it
        # measured is not named, though it may be less)
        sol = _least_solution(prof, solver, options, unit)
        if sol is not None:
            measured = prof.__dict__.get("_measured_steps", {}).get(str(sol.schedule))
        if measured is not None:  # accepted: that schedule, run, is within it (the
            smallest = measured   # margin's figure rests on a prediction, run and refused)
    store_all = 1.0 if kind == "fraction" else step_budget(plain)
    if verified and prof.plain_step_measured is not None:  # plain autograd, measured
        store_all = min(store_all, prof.plain_step_measured)
    msg = f"budget {_say(kind, value)} cannot be met on input {describe} by solver {solver!r}"
    if measured is not None:  # accepted for sure, but another schedule may measure less
        msg += (f"; a budget of {_say(kind, smallest)} is accepted (the step of the solver's "
                "least-memory schedule, run once at plan time and measured by the allocator; "
                "a schedule predicted to need more may measure less)")
    elif smallest is not None:
        msg += f"; the smallest feasible budget is {_say(kind, smallest)}"
    msg += f" (store-all needs {_say(kind, store_all)}"
    if kind == "bytes":
        msg += (f"; both figures are the whole step, the parameters' gradients "
                f"({format_bytes(grads.total)}) included, and the engine's margin where a "
                f"figure rests on a prediction, not a measurement")
    return InfeasibleBudgetError(msg + ")", value, smallest)


def step_budget(need: int) -> int:
    """The smallest step budget whose share after :data:`ENGINE_MARGIN` is ``need``."""
    step = int(math.ceil(need / (1 - ENGINE_MARGIN)))
    while step - int(math.ceil(step * ENGINE_MARGIN)) < need:
        step += 1
    while step - 1 - int(math.ceil((step - 1) * ENGINE_MARGIN)) >= need:
        step -= 1
    return step
