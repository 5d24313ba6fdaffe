"""The in-place API's points on a frontier: :func:`remat_theory.torch.rematerialize` attached to
the workload's own model at each of its plan levels (or fractions of store-all), run as the
user runs the model."""
from __future__ import annotations

import copy

from remat_theory.lab.frontier_methods import Method, Point, level_breakpoints, method_error
from remat_theory.lab.frontier_networks import Workload
from remat_theory.model.errors import InfeasibleBudgetError


# ------------------------------------------------------------------------ the in-place API
def _inplace_example(w: Workload):
    """The ``example`` the in-place API takes for ``w``: what ``w.call`` calls the model
    with (a kwargs dict, or the one positional tensor); None for a workload built from
    stages (no call of the original model to give)."""
    return w.inputs


def _inplace_loss(w: Workload):
    """output -> the frontier's loss, as the in-place API's ``loss_fn`` (profiled as the
    chain's loss stage): the workload's own loss on the tensor ``w.call`` hands it."""
    from remat_theory.lab.frontier_networks import primary_output

    def loss_fn(out, _loss=w.loss_fn):
        return _loss(primary_output(out))
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
    out = level_breakpoints(level, smallest, plain_budget, max(1, plain_budget // resolution),
                             max_points, cover, keep_lowest)
    return out, smallest, plain_budget


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
    out = level_breakpoints(level, smallest, store_all, max(1, store_all // resolution),
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
        return [method_error(Point("remat_inplace", "remat_inplace"), e)]
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
