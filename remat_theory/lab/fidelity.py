"""Is the chain the user's model?  One network, three questions, each against an
independent oracle (``remat_theory.lab.fidelity.check_network``; used by the tests and by
``benchmarks/capture_families.py``):

1. **Hold what the model holds.**  One training step of the ORIGINAL eager model (its own
   ``forward``, the loss, ``backward``) and one of the drop-in
   (:class:`~remat_theory.torch.modules.checkpointed.CheckpointedSequential`) at budget 1.0, on the same
   input from the same random seed, both measured by torch's allocator
   (:class:`~remat_theory.torch.tracker.AllocatorMeter`: bytes above the start, parameter
   gradients apart; the drop-in's step primed as the profiler's are, see ``_step``): the
   two peaks, and whether every parameter gradient is equal bit for bit.
2. **The same below store-all.**  The drop-in on the DP's schedule at each budget: its
   gradients against the eager model's, and its allocator peak.
   The drop-in's ratio is against its plan's ``predicted_peak`` (the simulator's, plus the
   generator states its checkpoints keep and the summed gradient of a tied parameter
   where autograd holds it, and B_0 without the input's gradient, which a training batch
   does not need: ``ProfileResult.input_grad_bytes``).
3. **Predict to the byte.**  The profiled chain's simulator peak for each schedule against
   the executor's allocator peak (:func:`~remat_theory.lab.confirm.measure_run`, what
   ``remat confirm`` measures): the ratio measured / predicted.
"""
from __future__ import annotations

import torch

import solvers as solver_registry
from remat_theory.lab.confirm import measure_run
from remat_theory.lab.networks import build
from remat_theory.model.errors import InfeasibleBudgetError
from remat_theory.model.simulator import simulate
from remat_theory.torch.capture.call_inputs import example_inputs
from remat_theory.torch.capture.carried import release_carried
from remat_theory.torch.capture.chain import StageChain
from remat_theory.torch.capture.stages import split_stages, stage_parameters
from remat_theory.torch.modules.checkpointed import (Budget, CheckpointOptions,
                                                     CheckpointedSequential)
from remat_theory.torch.plan.budget import carried_step_bytes
from remat_theory.torch.plan.levels import shared_parameter_bytes
from remat_theory.torch.plan.rounding import auto_unit, rounded_chain
from remat_theory.torch.profiling.profiler import prime_forward, profile_details
from remat_theory.torch.tracker import AllocatorMeter, storage_bytes


SEED = 1234
# where the budgets of ``budgets=None`` sit between the smallest feasible one (0) and store-all (1)
BUDGET_STEPS = (0.01, 0.5, 0.9)


def _grads(params) -> list:
    return [None if p.grad is None else p.grad.detach().clone() for p in params]


def _equal(a: list, b: list) -> tuple:
    """(bit-identical, max relative difference) of two gradient lists."""
    same, rel = True, 0.0
    for x, y in zip(a, b):
        if x is None or y is None:
            if x is not y:
                same = False
            continue
        if not torch.equal(x, y):
            same = False
            d = (x.double() - y.double()).abs().max().item()
            s = x.double().abs().max().item()
            rel = max(rel, d / s if s else float("inf"))
    return same, rel


def _step(fn, params, stages=None, x0=None):
    """One training step ``fn()`` (returns the loss), from absent gradients and the fixed
    seed: (allocator peak above the start, parameter gradients apart; the gradients).

    With ``stages`` and ``x0``, a no-grad forward of the stages runs first inside the
    measurement (:func:`~remat_theory.torch.profiling.profiler.prime_forward`, as the profiler and the
    executor's measurement do): state the stages keep from one call to the next (the
    arguments a chain captured at the model's seams hands its layers: GPT-Neo's 512 KiB
    float attention mask) is then replaced inside the session, where the CPU meter sees
    both its allocation and the free of the copy it replaces.  Without it, the free of the
    copy made before the session is not reported and the replacement counts as held.
    Those values are then released (inside the session: the meter sees the frees), so that
    the step's own copy counts as the step's memory, as the model holds it (it makes them in
    its forward and frees them at the step's end) and as the drop-in reserves it
    (:func:`~remat_theory.torch.plan.budget.carried_step_bytes`)."""
    for p in params:
        p.grad = None
    torch.manual_seed(SEED)

    def prime():
        prime_forward(stages, x0, x0.device)
        release_carried(stages)

    if stages is None:
        prime = None
    meter = AllocatorMeter(None, persistent=lambda: [p.grad for p in params], prime=prime)
    with meter:
        with meter.op("step"):
            fn().backward()
    return meter.peak, _grads(params)


def check_network(name: str, scale: str = "test", budgets=None, *,
                  solver: str = "dp", profile_repeats: int = 1, net=None) -> dict:
    """The record of one network (see the module docstring).  ``budgets``: fractions of
    the store-all peak (default: three between the DP's smallest feasible budget and
    store-all, :data:`BUDGET_STEPS`); ``net``: a built
    :class:`~remat_theory.lab.networks.Network` (default ``build(name, scale)``)."""
    net = net or build(name, scale)
    chain_mod = net.model
    stages = split_stages(chain_mod)
    params = stage_parameters(stages)
    if isinstance(chain_mod, StageChain):
        model_params = list(chain_mod.original.parameters())
        params += [p for p in model_params if all(p is not q for q in params)]
    x0, loss_fn = net.example_input, net.loss_fn
    others = example_inputs(stages)  # the example's masks: the drop-in takes them per call
    rec = {"network": name, "scale": scale, "stages": len(stages),
           "labels": [getattr(s, "label", type(s).__name__) for s in stages],
           "method": getattr(chain_mod, "method", "sequential")}
    state = {k: v.clone() for k, v in chain_mod.state_dict().items()}

    def restore():
        chain_mod.load_state_dict(state)

    # 1. the original eager model, then the drop-in at budget 1.0
    if isinstance(chain_mod, StageChain):
        eager = lambda: loss_fn(chain_mod.original_forward(x0))  # noqa: E731
    else:
        eager = lambda: loss_fn(chain_mod(x0))  # noqa: E731
    prof = profile_details(stages, x0, loss_fn, repeats=profile_repeats, name=name)
    chain = prof.chain
    restore()
    eager(); restore()  # warm-up: lazily made workspaces and caches exist before measuring
    e_peak, e_grads = _step(eager, params)
    restore()
    ck = CheckpointedSequential(stages, 1.0, example_input=x0, loss_fn=loss_fn,
                                options=CheckpointOptions.from_profile(prof))
    d_peak, d_grads = _step(lambda: loss_fn(ck(x0, **others)), params, stages, x0)
    restore()
    same, rel = _equal(e_grads, d_grads)
    x0b = storage_bytes(x0)
    rec.update(eager_peak=e_peak + x0b, dropin_peak=d_peak + x0b,
               store_all_predicted=chain.store_all_memory(),
               dropin_over_eager=(d_peak + x0b) / (e_peak + x0b), grads_equal=same,
               grads_max_rel_diff=rel, param_grad_bytes=prof.param_grad_bytes,
               unsaved=[i for i, s in enumerate(chain.output_saved) if not s])
    # 2./3. budgets: the DP's schedule, measured by the executor and run by the drop-in
    # exact bytes on tiny chains, where rounding sizes up could make every budget below
    # store-all infeasible; the default unit elsewhere
    unit = 1 if chain.store_all_memory() < 2 ** 22 else auto_unit(chain)
    if budgets is None:  # three budgets between the smallest feasible one and store-all
        least = solver_registry.solve(rounded_chain(chain, unit), 0, solver).min_budget
        low = least / chain.store_all_memory()
        budgets = [min(1.0, low + (1 - low) * f) for f in BUDGET_STEPS]
    runs = []
    for frac in budgets:
        budget = int(frac * chain.store_all_memory())
        sol = solver_registry.solve(rounded_chain(chain, unit), budget, solver)
        row = {"budget_fraction": frac, "budget": budget, "status": sol.status,
               "min_budget": sol.min_budget}
        runs.append(row)
        if sol.schedule is None:
            continue
        sim = simulate(chain, sol.schedule, budget)
        for p in params:
            p.grad = None
        torch.manual_seed(SEED)
        run = measure_run(stages, loss_fn, x0, sol.schedule, params, x0.device, chain.output_saved,
                          prof.bwd_release)
        ex_grads = _grads(params)
        restore()
        # the drop-in reserves the summed gradient of shared (tied) parameters: give it
        # that much more, so that it runs the same schedule
        # (and the random-generator states its checkpoints keep, which the chain does not
        # count: where they do not fit, the drop-in runs at its own smallest feasible budget)
        # and the values the first stage hands the others (carried_step_bytes)
        dropin_budget = budget + 2 * shared_parameter_bytes(stages) + carried_step_bytes(stages, x0)
        ck = None
        for _ in range(3):
            try:
                ck = CheckpointedSequential(stages, Budget.activations(dropin_budget), solver,
                                            example_input=x0,
                                            loss_fn=loss_fn,
                                            options=CheckpointOptions.from_profile(
                                                prof, unit=unit))
                break
            except InfeasibleBudgetError as e:
                row["dropin_message"] = str(e)
                if e.smallest_feasible is None:
                    break
                dropin_budget = e.smallest_feasible
        row.update(predicted=sim.peak_memory, measured=run["peak"],
                   ratio=run["peak"] / sim.peak_memory, within_budget=run["peak"] <= budget,
                   recomputed=sol.schedule.forward_count() - chain.length,
                   executor_grads_equal=_equal(e_grads, ex_grads)[0],
                   executor_grads_max_abs_diff=max(
                       ((a.double() - b.double()).abs().max().item() for a, b in
                        zip(e_grads, ex_grads) if a is not None and b is not None), default=0.0),
                   grads_scale=max((g.abs().max().item() for g in e_grads if g is not None),
                                   default=0.0))
        if ck is None:
            continue
        dp_peak, dp_grads = _step(lambda: loss_fn(ck(x0, **others)), params, stages, x0)
        restore()
        same_schedule = ck.schedule == sol.schedule
        row.update(dropin_peak=dp_peak + x0b, dropin_budget=dropin_budget,
                   dropin_ratio=(dp_peak + x0b) / ck.plan.predicted_peak,
                   dropin_same_schedule=same_schedule,
                   dropin_within_budget=dp_peak + x0b <= ck.budget,
                   shared_parameter_bytes=shared_parameter_bytes(stages),
                   dropin_grads_equal=_equal(e_grads, dp_grads)[0])
    for p in params:
        p.grad = None
    ratios = [r["ratio"] for r in runs if "ratio" in r]
    rec.update(runs=runs, ratio_min=min(ratios, default=None), ratio_max=max(ratios, default=None))
    return rec
