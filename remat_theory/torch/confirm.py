"""Confirm the model on real networks: profile, solve, execute, measure (``remat confirm``).

For each built-in network (:mod:`.networks`) and each budget (a fraction of the store-all
peak of its profiled chain), every requested solver's schedule is

1. predicted: replayed through the simulator on the profiled chain (peak bytes, seconds);
2. executed with the :class:`~.executor.ScheduleExecutor` under the
   :class:`~.tracker.MemoryTracker`, from the same model state and random seed as a plain
   backpropagation run: the measured peak is the tracker's peak of live activation bytes
   (x_0 included, as in the model; parameters and their pre-allocated gradients excluded),
   and every parameter gradient, the input gradient and every buffer (BatchNorm running
   statistics) are compared with plain backpropagation's;
3. timed: median time of ``repeats`` untracked executions (after one warm-up; wall time, or
   with ``clock="process"`` on a CPU the process's CPU time, which the load of other
   processes does not inflate; the profile uses the same clock); on a GPU,
   ``torch.cuda.max_memory_allocated`` is recorded as a cross-check of the tracker
   (``cuda_peak``: allocator peak minus resident memory, plus x_0).

Budgets below a solver's smallest feasible budget are reported as ``infeasible`` with that
smallest budget (``min_budget``), never clamped.

Solving in memory units.  Profiled sizes are bytes with a tiny common divisor, which would
make the tables and models of the exact DP and ILP solvers huge.  Those therefore see the chain with every size
rounded *up* to a multiple of ``unit`` bytes (default: a power of two near store-all/2048);
a schedule valid in the rounded chain under budget B is valid in the real one (every peak is
a sum of sizes), and predictions are always the simulator's replay on the *real* byte chain.
Their status (``optimal``...) refers to the rounded chain; ``unit`` is recorded (1 for
solvers run on exact bytes: the baselines and exhaustive search).
"""
from __future__ import annotations

import copy
import statistics
import time

import torch

import solvers as solver_registry

from remat_theory.model.errors import RematError
from remat_theory.model.simulator import simulate
from remat_theory.torch.executor import ScheduleExecutor, plain_backprop
from remat_theory.torch.networks import NETWORKS, build
from remat_theory.torch.profiler import profile_details
from remat_theory.torch.rounding import auto_unit, rounded_chain
from remat_theory.torch.stages import split_stages, stage_parameters
from remat_theory.torch.tracker import MemoryTracker, storage_bytes

DEFAULT_BUDGETS = (0.3, 0.5, 0.8)
# Exact solvers whose cost does not grow with budget / size gcd: they see exact bytes.
SIZE_FREE_SOLVERS = ("exhaustive",)
SEED = 1234


def solver_options(name: str, chain, *, ilp_time_limit: float, ilp_max_stages: int) -> dict | str:
    """Options for one solver, or a string saying why it is skipped."""
    info = solver_registry.get(name)
    out = {}
    if name == "ilp" and chain.length > ilp_max_stages:
        return (f"the ILP is run on chains of at most {ilp_max_stages} stages (building its "
                f"model alone takes minutes beyond); this chain has {chain.length}")
    if "time_limit" in info.options:
        out["time_limit"] = ilp_time_limit
    guard = info.defaults.get("max_stages")  # a size guard (exhaustive search), as registered
    if guard is not None and chain.length > guard:
        return f"{name} is limited to {guard} stages; this chain has {chain.length}"
    return out


def split_overhead_peak(chain, prof, sim, schedule) -> int:
    """The peak the simulator would predict if the model had two forward overheads per stage.

    The chain model has one ``fwd_overhead[i]`` for every kind of forward; the profiler
    stores the larger of the no-grad one (Fn/Fck: intermediates are freed as the stage
    runs) and the recording one (Fall: intermediates are kept in the tape, so its transient
    is usually smaller), which is safe but over-predicts Fall when the two differ (e.g. an
    encoder layer: attention scores are transient without grad, tape with grad).  This
    replays the simulator's profile with the kind-specific overhead, to show how much of a
    gap that explains; it is a diagnostic, not the model's prediction.
    """
    from remat_theory.model.schedule import FALL, FCK, FN

    peak = chain.x_size[0]
    for op, row in zip(schedule, sim.profile):
        p = row.peak
        if op.kind in (FN, FCK, FALL):
            specific = (prof.fwd_overhead_record if op.kind == FALL else prof.fwd_overhead_nograd)[op.index]
            p = p - chain.fwd_overhead[op.index] + max(0, specific)
        peak = max(peak, p)
    return peak


def split_forward_time(chain, prof, schedule) -> float:
    """The makespan with kind-specific forward times (no-grad time for Fn/Fck, recording time
    for Fall); the chain model has one forward time per stage (the recording one).  A
    diagnostic, like :func:`split_overhead_peak`."""
    from remat_theory.model.schedule import FCK, FN

    total = 0.0
    for op, row in zip(schedule, _rows(chain, schedule)):
        if op.kind in (FN, FCK):
            total += prof.fwd_time_nograd[op.index]
        else:
            total += row
    return total


def _rows(chain, schedule):
    from remat_theory.model.schedule import B, FALL, LOSS

    for op in schedule:
        if op.kind == FALL:
            yield chain.fwd_time[op.index]
        elif op.kind == B:
            yield chain.bwd_time[op.index]
        elif op.kind == LOSS:
            yield chain.bwd_time[chain.length]
        else:
            yield 0.0


def _grad_snapshot(params, x_grad):
    return [None if p.grad is None else p.grad.detach().clone() for p in params] + [x_grad.detach().clone()]


def _compare(ref: list, got: list) -> tuple:
    """(identical bits, max abs error, max relative error) between two gradient lists."""
    identical, abs_err, rel_err = True, 0.0, 0.0
    for a, b in zip(ref, got):
        if a is None and b is None:
            continue
        a = torch.zeros_like(b) if a is None else a
        b = torch.zeros_like(a) if b is None else b
        if not torch.equal(a, b):
            identical = False
            d = (a.double() - b.double()).abs().max().item()
            scale = a.double().abs().max().item()
            abs_err = max(abs_err, d)
            rel_err = max(rel_err, d / scale if scale > 0 else float("inf"))
    return identical, abs_err, rel_err


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def confirm_network(name: str, budgets=DEFAULT_BUDGETS, solver_names=None, *, device="cpu",
                    scale: str = "small", repeats: int = 3, profile_repeats: int = 5,
                    ilp_time_limit: float = 10.0, ilp_max_stages: int = 10, unit: int | None = None,
                    clock: str = "wall", log=None) -> list:
    """Records (dicts) for one network: one per (budget, solver)."""
    dev = torch.device(device)
    net = build(name, scale).to(dev)
    stages = split_stages(net.model)
    params = stage_parameters(stages)
    x0, loss_fn = net.example_input, net.loss_fn
    if dev.type == "cuda":
        clock = "wall"
    prof = profile_details(stages, x0, loss_fn, dev, repeats=profile_repeats, name=name, clock=clock)
    now = time.process_time if clock == "process" else time.perf_counter
    chain = prof.chain
    store_all = chain.store_all_memory()
    unit = auto_unit(chain) if not unit else int(unit)
    solve_chain = rounded_chain(chain, unit)
    if log:
        log(f"{name}: {chain.length} stages, store-all peak {store_all} B, "
            f"ideal makespan {chain.ideal_makespan():.4g} s")

    state0 = copy.deepcopy(net.model.state_dict())
    torch.manual_seed(SEED)
    ref = plain_backprop(stages, x0, loss_fn)
    ref_grads = _grad_snapshot(params, ref.input_grad)
    ref_state = copy.deepcopy(net.model.state_dict())
    for p in params:
        p.grad = torch.zeros_like(p) if p.requires_grad else None

    def restore():
        net.model.load_state_dict(state0)
        for p in params:
            if p.grad is not None:
                p.grad.zero_()

    names = list(solver_registry.names()) if solver_names is None else list(solver_names)
    records = []
    for frac in budgets:
        budget = int(frac * store_all)
        for sname in names:
            rec = {"model": name, "solver": sname, "device": str(dev), "scale": scale, "clock": clock,
                   "stages": chain.length, "budget_fraction": frac, "budget": budget,
                   "store_all_peak": store_all, "status": None, "min_budget": None,
                   "predicted_peak": None, "measured_peak": None, "peak_ratio": None,
                   "predicted_time": None, "measured_time": None, "time_ratio": None,
                   "max_grad_error": None, "max_grad_rel_error": None, "grads_identical": None,
                   "buffers_identical": None, "cuda_peak": None, "solve_time": None,
                   "schedule_length": None, "recomputed_forwards": None, "unit": unit,
                   "predicted_peak_split_overhead": None, "split_overhead_ratio": None,
                   "predicted_time_split_forward": None, "split_time_ratio": None,
                   "message": ""}
            records.append(rec)
            opts = solver_options(sname, chain, ilp_time_limit=ilp_time_limit,
                                  ilp_max_stages=ilp_max_stages)
            if isinstance(opts, str):
                rec["status"], rec["message"] = "skipped", opts
                continue
            try:
                rounded = solver_registry.get(sname).exact and sname not in SIZE_FREE_SOLVERS
                sol = solver_registry.solve(solve_chain if rounded else chain, budget, sname, **opts)
            except RematError as e:
                rec["status"], rec["message"] = "error", str(e)
                continue
            rec.update(status=sol.status, min_budget=sol.min_budget, solve_time=sol.wall_time,
                       message=sol.message, unit=unit if rounded else 1)
            if sol.schedule is None:
                continue
            schedule = sol.schedule
            allow_drop = sol.allows_drop
            sim = simulate(chain, schedule, budget, allow_drop=allow_drop)
            rec["predicted_peak_split_overhead"] = split_overhead_peak(chain, prof, sim, schedule)
            rec.update(predicted_peak=sim.peak_memory, predicted_time=sim.makespan,
                       schedule_length=len(schedule),
                       recomputed_forwards=schedule.forward_count() - chain.length)
            # -------- memory and gradients (tracked run)
            restore()
            torch.manual_seed(SEED)
            tracker = MemoryTracker()
            tracker.track(x0)
            with tracker:
                result = ScheduleExecutor(stages, loss_fn, x0, tracker=tracker).run(schedule)
            got = _grad_snapshot(params, result.input_grad)
            del result
            identical, abs_err, rel_err = _compare(ref_grads, got)
            buffers_ok = all(torch.equal(a, b) for a, b in
                             zip(ref_state.values(), net.model.state_dict().values()))
            rec["split_overhead_ratio"] = tracker.peak / rec["predicted_peak_split_overhead"]
            rec.update(measured_peak=tracker.peak, peak_ratio=tracker.peak / sim.peak_memory,
                       max_grad_error=abs_err, max_grad_rel_error=rel_err,
                       grads_identical=identical, buffers_identical=buffers_ok)
            # -------- time (untracked), CUDA allocator cross-check on the first run
            times = []
            for rep in range(1 + repeats):
                restore()
                _sync(dev)
                if dev.type == "cuda" and rep == 0:
                    torch.cuda.reset_peak_memory_stats(dev)
                    resident = torch.cuda.memory_allocated(dev)
                t0 = now()
                ScheduleExecutor(stages, loss_fn, x0).run(schedule)
                _sync(dev)
                times.append(now() - t0)
                if dev.type == "cuda" and rep == 0:
                    rec["cuda_peak"] = torch.cuda.max_memory_allocated(dev) - resident + storage_bytes(x0)
            rec["measured_time"] = statistics.median(times[1:]) if repeats else times[0]
            rec["time_ratio"] = rec["measured_time"] / sim.makespan if sim.makespan else None
            split_t = split_forward_time(chain, prof, schedule)
            rec["predicted_time_split_forward"] = split_t
            rec["split_time_ratio"] = rec["measured_time"] / split_t if split_t else None
            if log:
                log(f"  {sname:>13} @ {frac:.0%}: peak {rec['measured_peak']} / "
                    f"{rec['predicted_peak']} = {rec['peak_ratio']:.4f}, time "
                    f"{rec['measured_time']:.4g} / {rec['predicted_time']:.4g} s, grads "
                    f"{'identical' if identical else f'max rel err {rel_err:.2e}'}")
    restore()
    return records


def confirm(models=None, budgets=DEFAULT_BUDGETS, solver_names=None, **kw) -> list:
    """Records for every requested network (default: all of :data:`NETWORKS`)."""
    models = list(NETWORKS) if models is None else list(models)
    for m in models:
        if m not in NETWORKS:
            raise RematError(f"unknown network {m!r} (known: {', '.join(NETWORKS)})")
    if solver_names is not None:
        for s in solver_names:
            solver_registry.get(s)
    out = []
    for m in models:
        out.extend(confirm_network(m, budgets, solver_names, **kw))
    return out


def plot(records: list, path, title: str = "") -> None:
    """Predicted vs measured peak memory and time, one point per executed schedule."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in records if r["measured_peak"] is not None]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    models = sorted({r["model"] for r in done})
    markers = "osD^v<>"
    for k, m in enumerate(models):
        rs = [r for r in done if r["model"] == m]
        axes[0].scatter([r["predicted_peak"] / 2 ** 20 for r in rs],
                        [r["measured_peak"] / 2 ** 20 for r in rs], label=m, marker=markers[k % 7], alpha=.7)
        axes[1].scatter([r["predicted_time"] * 1e3 for r in rs],
                        [r["measured_time"] * 1e3 for r in rs], label=m, marker=markers[k % 7], alpha=.7)
    split = [r for r in done if r.get("predicted_peak_split_overhead") not in (None, r["predicted_peak"])]
    if split:
        axes[0].scatter([r["predicted_peak_split_overhead"] / 2 ** 20 for r in split],
                        [r["measured_peak"] / 2 ** 20 for r in split], facecolors="none",
                        edgecolors="k", s=40, lw=.7,
                        label="same runs, diagnostic prediction\nwith kind-specific forward overheads")
    for ax, unit, tol in ((axes[0], "MiB", 0.10), (axes[1], "ms", 0.10)):
        lo, hi = ax.get_xlim()
        lo2, hi2 = ax.get_ylim()
        lo, hi = min(lo, lo2), max(hi, hi2)
        xs = [lo, hi]
        ax.plot(xs, xs, "k-", lw=.8, label="measured = predicted")
        ax.plot(xs, [v * (1 + tol) for v in xs], "k:", lw=.8, label=f"±{tol:.0%}")
        ax.plot(xs, [v * (1 - tol) for v in xs], "k:", lw=.8)
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel(f"predicted ({unit})")
        ax.set_ylabel(f"measured ({unit})")
        ax.grid(alpha=.3)
    axes[0].set_title("peak activation memory")
    axes[1].set_title("time of one training step" + (
        " (process CPU time)" if done and done[0].get("clock") == "process" else ""))
    axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
