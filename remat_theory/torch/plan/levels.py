"""The schedules a budget admits for a profiled chain, as the drop-in runs them: the
solver's schedule for a budget with the states the step adds (random-generator states the
checkpoints keep, the loss value, the summed gradients of shared parameters), each level's
predicted peak, the smallest budget that holds.  The one home of these rules: the drop-in,
the in-place API and the lab's frontier ask here."""
from __future__ import annotations

import solvers as solver_registry
from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError
from remat_theory.model.schedule import LOSS, B, Schedule
from remat_theory.model.simulator import simulate
from remat_theory.torch.plan.nested_form import (NotNestedError, checkpoint_state_bytes,
                                                 nested_form, recomputed_stages)
from remat_theory.torch.plan.offload import OffloadRun
from remat_theory.torch.plan.rounding import rounded_chain


LOSS_BYTES = 8
"""What the drop-in's step holds beside the chain from the loss on: the loss value and the
gradient seeding the backward (a float32 scalar each; the profile's Loss op keeps neither,
measured: the drop-in's peak was 8 B above the plan's on BERT, test scale, at every
budget).  Counted in :func:`dropin_peak`, so a schedule fitted with the random-generator
states counted fits with them too."""


def solve_with_states(chain: Chain, unit: int, budget: int, draws, state_bytes: int, *,
                      solver: str, solver_options=None, stages=(), shared_reserve: int = 0,
                      loss_bytes: int | None = None):
    """How :class:`CheckpointedSequential` solves a budget of ``budget`` bytes of the chain
    (the one home of that rule; :func:`~remat_theory.lab.frontier.remat_breakpoints` asks
    it too): the solver's schedule on the chain rounded to ``unit``, for the budget less
    ``shared_reserve`` (the summed gradient of shared parameters), provided the simulator's
    peak with the random-generator states its checkpoints keep (``state_bytes`` each, only
    for segments where a stage draws: ``draws``; counted at each operation by
    :func:`~remat_theory.torch.run.nested.checkpoint_state_bytes`) and the loss tensor with its
    seed (``loss_bytes``, ``ProfileResult.loss_bytes``; default :data:`LOSS_BYTES`) fits that
    too.  Where it does not,
    the schedule is the best (least makespan) of the solver's schedule levels
    (:func:`schedule_levels`: its schedules from store-all down, one per distinct peak) whose
    peak with the states fits.  So, for a solver whose schedule at a budget is the first
    level that fits it (``dp``), the budgets that fit are exactly those at or above
    :func:`smallest_with_states`'s answer: a budget is never refused while a smaller one
    fits (fitting is not monotone in the target the solver gets, because the states sit
    where the checkpoints are, and a schedule for less can keep more of them at its peak).
    Returns (solution, nested form or None, the drop-in's predicted peak, bytes: where a
    level was taken, the budget less ``shared_reserve`` less its peak on the rounded chain,
    and where nothing fits, how far the states take the solver's schedule over); the peak
    is None when nothing fits."""
    opts = dict(solver_options or {})
    room = budget - shared_reserve
    sol = solver_registry.solve(rounded_chain(chain, unit), max(0, room), solver, **opts)
    if sol.schedule is None:
        return sol, None, None, 0
    tree, peak, fit = schedule_level(chain, sol, solver, stages, draws, state_bytes, loss_bytes)
    # without states (``state_bytes`` 0: CUDA, or a caller that counts none) the solver's
    # schedule is taken as it is, as the solver's levels are (remat_breakpoints)
    if not state_bytes or isinstance(tree, OffloadRun) or fit <= room:
        return sol, tree, peak, 0
    best = None
    for lsol, ltree, lpeak, lfit in schedule_levels(chain, unit, draws, state_bytes,
                                                    solver=solver, solver_options=opts,
                                                    stages=stages, loss_bytes=loss_bytes):
        if lfit <= room and (best is None or lsol.makespan < best[0].makespan - 1e-12):
            best = (lsol, ltree, lpeak)
    if best is None:  # how far the states take the solver's schedule over
        return sol, None, None, fit - room
    return best[0], best[1], best[2], max(0, room - best[0].peak_memory)


def schedule_level(chain: Chain, sol, solver: str, stages, draws, state_bytes: int,
           loss_bytes: int | None = None):
    """(nested form or None, the drop-in's predicted peak, the peak a budget less the
    shared-parameter reserve must hold: the simulator's with the random-generator states
    the checkpoints keep and the loss value, :func:`dropin_peak` without the shared
    gradients, which that reserve covers) of one solution's schedule."""
    if any(op.is_transfer for op in sol.schedule):  # run by the offload executor
        peak = simulate(chain, sol.schedule).peak_memory
        return OffloadRun(sol.schedule, chain.length), peak, peak
    try:
        tree = nested_form(sol.schedule, chain.length)
    except NotNestedError as e:
        raise RematError(f"solver {solver!r} returned a schedule that is not "
                         f"persistent ({e}); CheckpointedSequential runs persistent "
                         f"schedules (e.g. solver='dp'); run this one with "
                         f"ScheduleExecutor") from e
    sim = simulate(chain, sol.schedule)
    loss = LOSS_BYTES if loss_bytes is None else loss_bytes
    if recomputed_stages(tree) == 0:  # store-all: plain autograd
        extra = plain_loss_bytes(loss)
        return (None, dropin_peak(stages, sim, None, sol.schedule, loss_bytes=extra),
                dropin_peak((), sim, None, sol.schedule, loss_bytes=extra))
    states = checkpoint_state_bytes(tree, draws, state_bytes) if state_bytes else None
    return (tree, dropin_peak(stages, sim, states, sol.schedule, loss_bytes=loss),
            dropin_peak((), sim, states, sol.schedule, loss_bytes=loss))


def plain_loss_bytes(loss_bytes: int) -> int:
    """What plain autograd's predicted peak adds for the loss: the loss tensor's storage
    beyond a scalar and its seed (:data:`LOSS_BYTES`), which a budget of activations leaves
    aside at store-all (a reduction buffer the size of x_L, for an MSE on the CPU)."""
    return max(0, loss_bytes - LOSS_BYTES)


_LEVELS: dict = {}


def schedule_levels(chain: Chain, unit: int, draws, state_bytes: int, *, solver: str,
                    solver_options=None, stages=(), loss_bytes: int | None = None) -> list:
    """The solver's schedules on the chain rounded to ``unit`` from store-all down, one per
    level: solved for store-all, then for one byte less than the peak of the schedule found,
    until none is feasible.  For an exact solver (``dp``) every budget's schedule is one of
    them (the first whose peak fits it).  A list of (solution, nested form or None, the
    drop-in's predicted peak, the peak a budget less the shared-parameter reserve must
    hold: with the random-generator states its checkpoints keep; :func:`solve_with_states`),
    cached per chain and arguments."""
    opts = dict(solver_options or {})
    key = (chain, unit, None if draws is None else tuple(draws), state_bytes, solver,
           tuple(sorted((k, repr(v)) for k, v in opts.items())), tuple(id(s) for s in stages),
           loss_bytes)
    if key in _LEVELS:
        return _LEVELS[key]
    rc = rounded_chain(chain, unit)
    out, target = [], rc.store_all_memory()
    while target >= 0:
        sol = solver_registry.solve(rc, target, solver, **opts)
        if sol.schedule is None:
            break
        out.append((sol,) + schedule_level(chain, sol, solver, stages, draws, state_bytes, loss_bytes))
        if sol.peak_memory > target:  # a solver that answers above its budget: stop
            break
        target = sol.peak_memory - 1
    if len(_LEVELS) >= 32:
        _LEVELS.clear()
    _LEVELS[key] = out
    return out


def dropin_peak(stages, sim, states, schedule, input_grad_bytes: int = 0,
                loss_bytes: int = LOSS_BYTES) -> int:
    """The drop-in's predicted peak on a schedule (plain autograd at store-all): the
    simulator's per operation, plus the checkpoints' generator states (``states``) and the
    summed gradients of shared parameters (:func:`shared_gradient_bytes`) held then, the
    loss tensor and the gradient seeding the backward from the loss on (``loss_bytes``:
    ``ProfileResult.loss_bytes``, default :data:`LOSS_BYTES`; plain autograd passes
    :func:`plain_loss_bytes`), and B_0
    ``input_grad_bytes`` lower (``ProfileResult.input_grad_bytes``: the step's input needs
    no gradient, so B_0 makes no d_0)."""
    shared = shared_gradient_bytes(stages, schedule)
    states = states or [0] * len(shared)
    peak, held = 0, 0
    for op, row, e, g in zip(schedule, sim.profile, states, shared):
        if op.kind == LOSS:
            held = loss_bytes
        drop = input_grad_bytes if op.kind == B and op.index == 0 else 0
        peak = max(peak, row.peak + e + g + held - drop)
    return peak


def smallest_with_states(chain: Chain, unit: int, start: int, draws, state_bytes: int, *,
                         solver: str, solver_options=None, stages=(),
                         shared_reserve: int = 0, loss_bytes: int | None = None) -> int | None:
    """The smallest budget from ``start`` up to store-all (plus ``shared_reserve``) at which
    :func:`solve_with_states` finds a schedule that fits (None if none): every budget from
    there up fits, none below it does (the smallest peak of the solver's schedule levels,
    :func:`schedule_levels`, plus ``shared_reserve``)."""
    hi = chain.store_all_memory() + shared_reserve + plain_loss_bytes(
        LOSS_BYTES if loss_bytes is None else loss_bytes)  # plain autograd from there
    if start >= hi:
        return hi
    levels = schedule_levels(chain, unit, draws, state_bytes, solver=solver,
                             solver_options=solver_options, stages=stages,
                             loss_bytes=loss_bytes)
    least = min((fit + shared_reserve for _, _, _, fit in levels), default=None)
    if least is None:
        return None
    return min(hi, max(start, least))


def shared_parameter_bytes(stages) -> int:
    """Bytes of the parameters that more than one stage uses (an unrolled RNN's cell).

    Autograd sums the gradients a parameter receives from its several uses in one buffer,
    held from the first of those backwards to the last, and adds each new term to it: memory
    the chain model, whose parameter gradients accumulate in place outside the budget, does
    not count.  Measured with the allocator on the built-in rnn (small scale, one cell shared
    by 33 stages, parameter gradients taken out of the peak), at six budgets from the
    smallest to store-all: 0.80-0.96 times these bytes above the simulator's prediction when
    the step starts without gradients (``zero_grad()``, the default ``set_to_none``), and
    1.26-1.42 times when the gradients are kept and accumulated into (gradient accumulation,
    ``zero_grad(set_to_none=False)``): the engine then holds the sum apart from ``.grad`` and
    meets each new term beside it.  The drop-in reserves twice these bytes at every budget,
    store-all included (a budget below store-all plus the reserve is solved with the
    reserve taken out)."""
    owner, shared = {}, {}
    for k, stage in enumerate(stages):
        for p in stage.parameters():
            if owner.setdefault(id(p), k) != k:
                shared[id(p)] = p.numel() * p.element_size()
    return sum(shared.values())


def shared_gradient_bytes(stages, schedule: Schedule) -> list:
    """Per operation of ``schedule``, the bytes of the summed gradients of shared parameters
    (:func:`shared_parameter_bytes`) that autograd's single backward holds then: a
    parameter's first gradient waits in the engine's buffer from the backward of the last
    stage that uses it (the first backward to reach it) to the backward of the first one,
    where the sum becomes ``.grad`` (a tied input/output embedding: from the head's backward
    to the embedding's).  The executor, whose backwards are separate calls, accumulates into
    ``.grad`` at once and holds none of it."""
    stages_of, size = {}, {}
    for k, stage in enumerate(stages):
        for p in stage.parameters():
            stages_of.setdefault(id(p), set()).add(k)
            size[id(p)] = p.numel() * p.element_size()
    windows = [(max(ks), min(ks), size[i]) for i, ks in stages_of.items() if len(ks) > 1]
    held, out = 0, []
    opened, closed = set(), set()
    for op in schedule:
        if op.kind == B:
            for w in windows:
                if op.index == w[0] and w not in opened:
                    opened.add(w)
                    held += w[2]
        out.append(held)
        if op.kind == B:
            for w in windows:
                if op.index == w[1] and w in opened and w not in closed:
                    closed.add(w)
                    held -= w[2]
    return out
