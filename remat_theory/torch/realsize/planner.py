"""``remat plan``: which layers to keep and which to recompute for a model at its real size
on a named device, against store-all and Hugging Face's every-layer checkpointing (torch's
``sac_milp`` does not run without CUDA: docs/plan.md).

Memory (bytes, the whole device): resident = the parameters + the optimizer's state (Adam:
two moments in the parameters' dtype; SGD: none) + the device's reserve (the CUDA context);
the training step (forward and backward) may use the rest, the step budget of the in-place
API (:mod:`remat_theory.torch.inplace.plan`: activations, the parameters' gradients as the
backward makes them, 1% kept free: the engine margin).  Every strategy's step peak is
predicted the same way,
by :func:`~remat_theory.torch.inplace.plan.step_peak` on the chain profiled on fake tensors
(:mod:`.chain`), and fits when the budget holds it with the same 1% free.  Times are the
device's cost model (:mod:`.devices`) summed over the strategy's operations.
"""
from __future__ import annotations

import dataclasses
import math

from remat_theory.model.errors import InfeasibleBudgetError, RematError
from remat_theory.torch.inplace.plan import make_plan, step_budget, step_peak
from remat_theory.torch.realsize.chain import real_size_profile
from remat_theory.torch.realsize.devices import Device, op_time


__all__ = ["OPTIMIZERS", "CONV_CAUTION", "plan_model", "hf_schedule", "store_all_schedule",
           "timed"]

OPTIMIZERS = {"adam": 2, "sgd": 0}  # optimizer states per parameter
CONV_CAUTION = ("the GPU's convolution workspaces (cuDNN's) are not in the peaks: measured "
                "for this CPU only (docs/plan.md)")
"""The plan's ``caution`` for a model with convolutions on a GPU.  Elsewhere there is none
(the fake profile equals the in-place CPU profile at small sizes on ten families, and the
1 GiB reserve holds cuBLAS's workspaces), but for this CPU where one of its kernels refused
the fake tensors' dtypes, so that its workspace could not be measured (bf16 autocast's
layer norms)."""


def store_all_schedule(n: int) -> list:
    return [f"Fall{i}" for i in range(n)] + ["Loss"] + [f"B{i}" for i in reversed(range(n))]


def hf_schedule(n: int) -> list:
    """Hugging Face's ``gradient_checkpointing_enable()``: every layer's forward without
    its tape (its input kept), and each layer recomputed with its tape just before its
    backward."""
    out = [f"Fck{i}" for i in range(n)] + ["Loss"]
    for i in reversed(range(n)):
        out += [f"Fall{i}", f"B{i}"]
    return out


def timed(rs, device: Device):
    """``rs.profile`` with the device's times (a new LayerProfile)."""
    t = lambda w: op_time(w, device)  # noqa: E731
    chain = rs.profile.chain.replace(fwd_time=[t(w) for w in rs.fck],
                                     fall_time=[t(w) for w in rs.fall],
                                     bwd_time=[t(w) for w in rs.bwd] + [t(rs.loss)])
    return dataclasses.replace(rs.profile, chain=chain, prefix_time=t(rs.prefix))


def _caution(rs, device) -> str | None:
    out = []
    if device.name != "cpu" and rs.convolutions:
        out.append(CONV_CAUTION)
    if device.name == "cpu" and rs.unmeasured:  # where its kernels refused the fake dtypes
        out.append(f"this CPU's workspaces of {', '.join(rs.unmeasured)} could not be "
                   f"measured (the kernel refused the fake tensors' dtypes) and are not in "
                   f"the peaks")
    return "; ".join(out) or None


def _resident(rs, optimizer: str) -> int:
    if optimizer not in OPTIMIZERS:
        raise RematError(f"optimizer {optimizer!r} must be one of {', '.join(OPTIMIZERS)}")
    return rs.param_bytes * (1 + OPTIMIZERS[optimizer])


def _option(name, prof, schedule, grads, budget):
    peak, makespan = step_peak(prof, schedule, grads)
    fwd = sum(1 for op in schedule if op.startswith(("Fn", "Fck", "Fall")))
    return dict(name=name, step_peak=peak, time=makespan + prof.prefix_time,
                recomputed=fwd - prof.chain.length, fits=step_budget(peak) <= budget,
                needs=step_budget(peak))


def _remat(prof, grads, chained, budget, solver):
    try:
        p = make_plan(("realsize",), prof, budget, grads, chained, solver=solver)
    except InfeasibleBudgetError as e:
        return None, e
    sched = store_all_schedule(prof.chain.length) if p.schedule is None else list(
        p.schedule.ops if hasattr(p.schedule, "ops") else p.schedule)
    return p, [str(op) for op in sched]


def _fits(spec, batch, seq, dtype, device, memory, optimizer, solver) -> bool:
    """Whether :func:`plan_model` finds a schedule that fits (the same criterion)."""
    return plan_model(spec, batch, seq, dtype, device, memory=memory, optimizer=optimizer,
                      solver=solver, search=False)["fits"]


def _largest(lo_ok, hi_bad, fits) -> int | None:
    """Largest value in [lo_ok, hi_bad) that fits (fits(lo_ok) assumed true)."""
    while hi_bad - lo_ok > 1:
        mid = (lo_ok + hi_bad) // 2
        if fits(mid):
            lo_ok = mid
        else:
            hi_bad = mid
    return lo_ok


def plan_model(spec, batch: int, seq: int, dtype: str, device: Device, *,
               memory: int | None = None, optimizer: str = "adam", solver: str = "dp",
               search: bool = True) -> dict:
    """The plan (a JSON-able dict; see docs/plan.md for its fields)."""
    cap = device.memory if memory is None else memory
    # this CPU as the device: its kernels' workspaces measured (none modelled for a GPU)
    rs = real_size_profile(spec, batch, seq, dtype, cpu_workspace=device.name == "cpu")
    prof, grads = timed(rs, device), rs.gradients
    n = prof.chain.length
    resident = _resident(rs, optimizer)
    budget = cap - resident
    out = dict(format="remat-plan/1", model=spec.name, model_class=spec.model_class,
               batch=batch, seq=seq, dtype=dtype, optimizer=optimizer, device=device.name,
               memory=cap, parameters=rs.params, param_bytes=rs.param_bytes,
               resident=resident, step_budget=budget, layers=rs.paths,
               profiled_layers=rs.profiled_layers, replicated_layers=rs.replicated,
               chain=prof.chain.to_dict(), prefix_time=prof.prefix_time,
               held_beside=prof.fixed_bytes, calibration=prof.calibration,
               caution=_caution(rs, device))
    options = [_option("store-all", prof, store_all_schedule(n), grads, budget),
               _option("hf-every-layer", prof, hf_schedule(n), grads, budget)]
    plan, sched = _remat(prof, grads, rs.chained, budget, solver) if budget > 0 else (None, None)
    if plan is not None:
        options.append(_option(solver, prof, sched, grads, budget))
    # remat's answer: the fastest schedule that fits among the solver's and the classical
    # ones, all in the same model (the solver plans against the operation table, which is
    # more cautious than the step's prediction: at HF's own memory it may refuse HF's
    # schedule, docs/train.md)
    best = min((o for o in options if o["fits"]), key=lambda o: o["time"], default=None)
    if best is not None:
        chosen = {"store-all": store_all_schedule(n), "hf-every-layer": hf_schedule(n)}.get(
            best["name"], sched)
        out.update(fits=True, source=best["name"], schedule=chosen,
                   recompute=_recomputed_layers(chosen, rs.paths),
                   predicted_step_peak=best["step_peak"], estimated_time=best["time"])
        options.append(dict(best, name="remat"))
    else:
        out.update(fits=False, schedule=None, recompute=None)
        if budget <= 0:
            out["reason"] = (f"the parameters and the {optimizer} state alone need "
                             f"{resident / 2**30:.2f} GiB of the {cap / 2**30:.2f} GiB")
    hf = options[1]
    # the solver alone given HF's memory; where it refuses it, at the least it accepts
    given = hf["needs"]
    at_hf, hf_sched = _remat(prof, grads, rs.chained, given, solver)
    if at_hf is None and getattr(hf_sched, "smallest_feasible", None):
        given = hf_sched.smallest_feasible
        at_hf, hf_sched = _remat(prof, grads, rs.chained, given, solver)
    if at_hf is not None:
        o = _option(f"{solver}-at-hf-memory", prof, hf_sched, grads, budget)
        o["given"] = given
        options.append(o)
        cand = [x for x in (o, hf) if step_budget(x["step_peak"]) <= hf["needs"]]
        if cand:
            options.append(dict(min(cand, key=lambda x: x["time"]), name="remat-at-hf-memory"))
    out["options"] = options
    if not out["fits"] and budget > 0:
        # the least step budget among every schedule planned here, and which one it is
        least = min((o for o in options if o["name"] != "remat-at-hf-memory"),
                    key=lambda o: (o["needs"], o["time"]))
        out["reason"] = (f"the step needs more than the {budget / 2**30:.2f} GiB left (the "
                         f"least of the schedules planned, {least['name']} with "
                         f"{least['recomputed']} layers recomputed, needs "
                         f"{least['needs'] / 2**30:.2f} GiB: its peak "
                         f"{least['step_peak'] / 2**30:.2f} GiB and the engine margin)")
    if not out["fits"] and search and budget > 0:
        out.update(_what_fits(spec, batch, seq, dtype, device, cap, optimizer, solver))
    return out


def _what_fits(spec, batch, seq, dtype, device, cap, optimizer, solver) -> dict:
    args = (dtype, device, cap, optimizer, solver)
    if batch > 1 and _fits(spec, 1, seq, *args):
        return dict(largest_batch=_largest(1, batch, lambda b: _fits(spec, b, seq, *args)))
    if spec.kind == "image" or seq <= 1 or not _fits(spec, 1, 1, *args):
        return dict(largest_batch=0, largest_seq=0)
    step = 64 if seq > 64 else 1
    lo = step if _fits(spec, 1, step, *args) else 1
    best = _largest(lo // step if step > 1 else lo, math.ceil(seq / step) if step > 1 else seq,
                    lambda k: _fits(spec, 1, k * step if step > 1 else k, *args))
    return dict(largest_batch=1 if best else 0,
                largest_seq=best * step if step > 1 and lo == step else best)


def _recomputed_layers(schedule, paths) -> list:
    """Paths of the layers whose forward runs more than once in ``schedule``."""
    count: dict = {}
    for op in schedule:
        for p in ("Fall", "Fck", "Fn"):
            if op.startswith(p):
                i = int(op[len(p):])
                count[i] = count.get(i, 0) + 1
    return [paths[i] for i in sorted(count) if count[i] > 1]
