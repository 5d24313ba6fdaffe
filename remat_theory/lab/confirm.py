"""Confirm the model on real networks: profile, solve, execute, measure (``remat confirm``).

For each built-in network (:mod:`.networks`) and each budget (a fraction of the store-all
peak of its profiled chain), every requested solver's schedule is

1. predicted: replayed through the simulator on the profiled chain (peak bytes, seconds);
   the chain has kind-specific forward costs (``fwd_*`` for Fn/Fck, ``fall_*`` for Fall);
2. executed with the :class:`~.executor.ScheduleExecutor` under an
   :class:`~.tracker.AllocatorMeter`, the accounting the profiler used (what torch's
   allocator holds, allocations inside kernels included), from the same model state and
   random seed as a plain backpropagation run.  The measured peak is x_0 plus the largest
   number of bytes held above the start at any moment; parameter gradients, which the
   backwards allocate, are persistent memory outside the chain (``param_grad_bytes``) and
   are not in it.  ``within_budget`` says whether the measured peak fits the budget.  Every
   parameter gradient, the input gradient and every buffer (BatchNorm running statistics)
   are compared with plain backpropagation's.  ``worst_peak_op`` / ``worst_after_op`` name
   the operation whose measured peak / bytes held after it are furthest from the
   simulator's (where a value is freed earlier or later than the operation table says);
3. timed: median time of ``repeats`` unmeasured executions (after one warm-up; wall time,
   or with ``clock="process"`` on a CPU the process's CPU time, which the load of other
   processes does not inflate; the profile uses the same clock).

Budgets below a solver's smallest feasible budget are reported as ``infeasible`` with that
smallest budget (``min_budget``), never clamped.

Offloading (``offload=True``, ``remat confirm --offload``).  The profiled chain gets a
``bandwidth`` (measured by :func:`~remat_theory.torch.profiling.bandwidth.measure_bandwidth`, or
given), the solvers that model the copy channel (``exhaustive-offload``, ``save-on-cpu``,
``offload-all``, ...) solve it, and every other solver solves the chain without it (remat
only: a schedule without transfers is valid in the two-stream model with the same peak and
makespan, proofs/offload.md O.1), so both kinds sit in one table.  Schedules with transfers
run on the :class:`~.offload_executor.OffloadExecutor`; the prediction is the two-stream
referee's.  On the CPU that executor runs in its correctness mode: the measured peak is the
device peak (host buffers are not counted) and is meaningful, the time is not (copies are
synchronous memcpys, nothing overlaps), and the records say so (``time_meaningful``).

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
from dataclasses import dataclass

import torch

import solvers as solver_registry
from remat_theory.lab.networks import CAPTURED_NETWORKS, NETWORKS, build
from remat_theory.model.errors import RematError, SolverContractError
from remat_theory.model.simulator import simulate
from remat_theory.torch.capture.stages import split_stages, stage_parameters
from remat_theory.torch.plan.rounding import auto_unit, rounded_chain
from remat_theory.torch.profiling.profiler import prime_forward, profile_details
from remat_theory.torch.run.executor import plain_backprop
from remat_theory.torch.run.offload_executor import executor_for
from remat_theory.torch.tracker import AllocatorMeter, storage_bytes


DEFAULT_BUDGETS = (0.3, 0.5, 0.8)
# Exact solvers whose cost does not grow with budget / size gcd: they see exact bytes.
SIZE_FREE_SOLVERS = ("exhaustive",)
SEED = 1234


def solver_options(name: str, chain, *, ilp_time_limit: float, ilp_max_stages: int) -> dict | str:
    """Options for one solver, or a string saying why it is skipped."""
    opts = solver_registry.get(name).options
    out = {}
    if name == "ilp" and chain.length > ilp_max_stages:
        return (f"the ILP is run on chains of at most {ilp_max_stages} stages (building its "
                f"model alone takes minutes beyond); this chain has {chain.length}")
    if "time_limit" in opts:
        out["time_limit"] = ilp_time_limit
    guard = solver_registry.get(name).defaults.get("max_stages")
    if guard is not None and chain.length > guard:  # exhaustive search's own size guard
        return f"{name} is limited to {guard} stages by default; this chain has {chain.length}"
    return out


def measure_run(stages, loss_fn, x0, schedule, params, device, output_saved=None,
                release=None) -> dict:
    """Run ``schedule`` once under an :class:`AllocatorMeter`, the accounting the profiler
    uses.  ``output_saved``: the chain's (``chain.output_saved``), which the executor follows
    (an unsaved output is held only as a plain value); ``release``: the profile's
    (``ProfileResult.bwd_release``: per stage, whether B_i lets autograd free d_{i+1} and
    the tape as it goes; default all).

    Returns ``result`` (the executor's), ``ops`` (one OpMemory per operation, bytes above
    the start), ``peak`` (x_0 plus the largest allocator peak: the model's "peak while it
    runs", comparable with the simulator's) and ``param_grad_bytes``.
    Parameter gradients must be absent at the start (``p.grad = None``), as the profiler
    has them: they are persistent memory outside the chain.

    A schedule with transfers runs on the
    :class:`~remat_theory.torch.run.offload_executor.OffloadExecutor` (on the CPU in its
    correctness mode: host buffers are not counted, so ``peak`` is the device peak);
    ``host_peak`` is then the most bytes it held on the host at once (0 otherwise), and
    ``executor`` the executor run.  The device copies an offload leaves are released just
    before the next compute operation's measurement, as the referee counts them.
    """
    x0_bytes = storage_bytes(x0)
    meter = AllocatorMeter(device, persistent=lambda: [p.grad for p in params],
                           prime=lambda: prime_forward(stages, x0, device))
    with meter:
        ex = executor_for(schedule, stages, loss_fn, x0, tracker=meter,
                          output_saved=output_saved, release=release)
        release_leaving = getattr(ex, "release_leaving", None)
        for op in schedule:
            if release_leaving is not None and not op.is_transfer:
                release_leaving()
            with meter.op(op.token):
                ex.step(op)
        result = ex.run([])
    ops = meter.results()
    return {"result": result, "ops": ops, "peak": x0_bytes + meter.peak,
            "param_grad_bytes": meter.persistent_bytes, "x0": x0_bytes,
            "host_peak": getattr(ex, "host_peak", 0), "executor": ex}


def op_discrepancy(sim, ops, x0_bytes: int) -> dict:
    """Where measurement and model part, operation by operation: the operation whose
    measured peak is furthest from the simulator's, and the one whose bytes held after it
    are (a value freed earlier or later than the operation table says shows there)."""
    worst_peak = worst_after = None
    for row, m in zip(sim.profile, ops):
        dp = x0_bytes + m.peak - row.peak
        da = x0_bytes + m.after - row.memory_after
        if worst_peak is None or abs(dp) > abs(worst_peak["error"]):
            worst_peak = {"step": row.step, "op": row.op, "predicted": row.peak,
                          "measured": x0_bytes + m.peak, "error": dp}
        if worst_after is None or abs(da) > abs(worst_after["error"]):
            worst_after = {"step": row.step, "op": row.op, "predicted": row.memory_after,
                           "measured": x0_bytes + m.after, "error": da}
    return {"worst_peak_op": worst_peak, "worst_after_op": worst_after}


def _grad_snapshot(params, x_grad):
    """Copies of the parameter gradients and of d_0 (None for an input without gradient,
    such as token ids)."""
    return ([None if p.grad is None else p.grad.detach().clone() for p in params]
            + [None if x_grad is None else x_grad.detach().clone()])


def _compare(ref: list, got: list) -> tuple:
    """(identical bits, max abs error, max relative error) between two gradient lists.  The
    relative error is the largest difference over the largest reference gradient of all
    (float rounding is relative to the values a reduction adds, not to a tensor whose
    gradient happens to be near zero, where a per-tensor ratio would be meaningless)."""
    identical, abs_err = True, 0.0
    scale = max((a.double().abs().max().item() for a in ref if a is not None and a.numel()),
                default=0.0)
    for a, b in zip(ref, got):
        if a is None and b is None:
            continue
        a = torch.zeros_like(b) if a is None else a
        b = torch.zeros_like(a) if b is None else b
        if not torch.equal(a, b):
            identical = False
            abs_err = max(abs_err, (a.double() - b.double()).abs().max().item())
    rel_err = abs_err / scale if scale > 0 else (0.0 if identical else float("inf"))
    return identical, abs_err, rel_err


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def confirm_network(name: str, budgets=DEFAULT_BUDGETS, solver_names=None, *, device="cpu",
                    scale: str = "small", repeats: int = 3, profile_repeats: int = 5,
                    ilp_time_limit: float = 10.0, ilp_max_stages: int = 10, unit: int | None = None,
                    clock: str = "wall", log=None, offload: bool = False,
                    bandwidth: float | None = None) -> list:
    """Records (dicts) for one network: one per (budget, solver).  ``offload``: give the
    chain a copy channel (``bandwidth`` bytes/s, or measured on ``device``; see the module
    docstring)."""
    dev = torch.device(device)
    net = build(name, scale).to(dev)
    stages = split_stages(net.model)
    params = stage_parameters(stages)
    x0, loss_fn = net.example_input, net.loss_fn
    if dev.type == "cuda":
        clock = "wall"
    prof = profile_details(stages, x0, loss_fn, dev, repeats=profile_repeats, name=name, clock=clock)
    chain = prof.executor_chain()  # confirm runs the ScheduleExecutor: its own times
    if offload or bandwidth is not None:
        if bandwidth is None:
            from remat_theory.torch.profiling.bandwidth import measure_bandwidth

            bandwidth = measure_bandwidth(dev).bandwidth
        chain = chain.replace(bandwidth=float(bandwidth))
        if log:
            log(f"{name}: copy bandwidth {bandwidth / 1e9:.3f} GB/s"
                + ("; on the CPU the offload executor runs in its correctness mode: device "
                   "peaks are meaningful, times of schedules with transfers are not"
                   if dev.type == "cpu" else ""))
    store_all = chain.store_all_memory()
    unit = auto_unit(chain) if not unit else int(unit)
    solve_chain = rounded_chain(chain, unit)
    if log:
        log(f"{name}: {chain.length} stages, store-all peak {store_all} B, parameter gradients "
            f"{prof.param_grad_bytes} B (outside the chain), ideal makespan "
            f"{chain.ideal_makespan():.4g} s")

    state0 = copy.deepcopy(net.model.state_dict())
    for p in params:
        p.grad = None
    torch.manual_seed(SEED)
    ref = plain_backprop(stages, x0, loss_fn)
    ref_grads = _grad_snapshot(params, ref.input_grad)
    ref_state = copy.deepcopy(net.model.state_dict())
    del ref

    def restore():
        net.model.load_state_dict(state0)
        for p in params:
            p.grad = None  # a step starts without gradients, as the profile has it

    setup = _Setup(name=name, scale=scale, device=dev, clock=clock, repeats=repeats,
                   ilp_time_limit=ilp_time_limit, ilp_max_stages=ilp_max_stages, chain=chain,
                   solve_chain=solve_chain, unit=unit, param_grad_bytes=prof.param_grad_bytes,
                   stages=stages, params=params, x0=x0, loss_fn=loss_fn, restore=restore,
                   ref_grads=ref_grads, ref_state=ref_state, model=net.model,
                   release=prof.bwd_release)
    names = list(solver_registry.names()) if solver_names is None else list(solver_names)
    records = []
    for frac in budgets:
        budget = int(frac * store_all)
        for sname in names:
            rec = _run_one(setup, sname, frac, budget)
            records.append(rec)
            if log and rec["measured_peak"] is not None:
                grads = ("identical" if rec["grads_identical"]
                         else f"max rel err {rec['max_grad_rel_error']:.2e}")
                log(f"  {sname:>13} @ {frac:.0%}: peak {rec['measured_peak']} / "
                    f"{rec['predicted_peak']} = {rec['peak_ratio']:.4f}"
                    f"{'' if rec['within_budget'] else ' OVER BUDGET'}, time "
                    f"{rec['measured_time']:.4g} / {rec['predicted_time']:.4g} s, grads {grads}")
    restore()
    return records


@dataclass
class _Setup:
    """What every schedule of one network is run with."""

    name: str
    scale: str
    device: torch.device
    clock: str
    repeats: int
    ilp_time_limit: float
    ilp_max_stages: int
    chain: object  # the profiled chain (bytes)
    solve_chain: object  # the same, sizes rounded up to multiples of unit
    unit: int
    param_grad_bytes: int
    stages: list
    params: list
    x0: torch.Tensor
    loss_fn: object
    restore: object  # model state and gradients back to the start of a step
    ref_grads: list
    ref_state: dict
    model: object
    release: list  # ProfileResult.bwd_release, which the executor follows


def _new_record(st: _Setup, sname: str, frac: float, budget: int) -> dict:
    chain = st.chain
    return {"model": st.name, "solver": sname, "device": str(st.device), "scale": st.scale,
            "clock": st.clock, "stages": chain.length, "budget_fraction": frac,
            "budget": budget, "store_all_peak": chain.store_all_memory(), "status": None,
            "min_budget": None, "predicted_peak": None, "measured_peak": None,
            "peak_ratio": None, "within_budget": None, "predicted_time": None,
            "measured_time": None, "time_ratio": None, "max_grad_error": None,
            "max_grad_rel_error": None, "grads_identical": None, "buffers_identical": None,
            "solve_time": None, "schedule_length": None, "recomputed_forwards": None,
            "unit": st.unit, "param_grad_bytes": st.param_grad_bytes,
            "measured_param_grad_bytes": None, "fall_costs": chain.has_fall_costs,
            "unsaved_outputs": [i for i, s in enumerate(chain.output_saved) if not s],
            "worst_peak_op": None, "worst_after_op": None, "message": "",
            "bandwidth": chain.bandwidth, "transfers": None, "host_peak": None,
            "time_meaningful": None}


def _run_one(st: _Setup, sname: str, frac: float, budget: int) -> dict:
    """Solve, predict, measure (memory with gradients checked, then time) one schedule."""
    chain = st.chain
    rec = _new_record(st, sname, frac, budget)
    opts = solver_options(sname, chain, ilp_time_limit=st.ilp_time_limit,
                          ilp_max_stages=st.ilp_max_stages)
    if isinstance(opts, str):
        rec["status"], rec["message"] = "skipped", opts
        return rec
    # a solver that does not model the copy channel solves the chain without it (remat
    # only; its schedule is valid with the channel, proofs/offload.md O.1)
    strip = chain.bandwidth is not None and "bandwidth" not in solver_registry.get(sname).supports
    try:
        rounded = solver_registry.get(sname).exact and sname not in SIZE_FREE_SOLVERS
        target = st.solve_chain if rounded else chain
        if strip:
            target = target.replace(bandwidth=None)
        sol = solver_registry.solve(target, budget, sname, **opts)
    except (RematError, SolverContractError) as e:
        rec["status"], rec["message"] = "error", str(e)
        return rec
    rec.update(status=sol.status, min_budget=sol.min_budget, solve_time=sol.wall_time,
               message=sol.message, unit=st.unit if rounded else 1)
    if sol.schedule is None:
        return rec
    schedule = sol.schedule
    allow_drop = sol.allows_drop
    sim = simulate(chain, schedule, budget, allow_drop=allow_drop)
    transfers = sum(op.is_transfer for op in schedule)
    rec.update(predicted_peak=sim.peak_memory, predicted_time=sim.makespan,
               schedule_length=len(schedule),
               recomputed_forwards=schedule.forward_count() - chain.length,
               transfers=transfers, time_meaningful=not (transfers and st.device.type == "cpu"))
    # -------- memory (the allocator, as profiled) and gradients
    st.restore()
    torch.manual_seed(SEED)
    run = measure_run(st.stages, st.loss_fn, st.x0, schedule, st.params, st.device,
                      chain.output_saved, st.release)
    got = _grad_snapshot(st.params, run.pop("result").input_grad)
    identical, abs_err, rel_err = _compare(st.ref_grads, got)
    del got
    buffers_ok = all(torch.equal(a, b) for a, b in
                     zip(st.ref_state.values(), st.model.state_dict().values()))
    rec.update(measured_peak=run["peak"], peak_ratio=run["peak"] / sim.peak_memory,
               within_budget=run["peak"] <= budget,
               measured_param_grad_bytes=run["param_grad_bytes"],
               max_grad_error=abs_err, max_grad_rel_error=rel_err,
               grads_identical=identical, buffers_identical=buffers_ok,
               host_peak=run["host_peak"], **op_discrepancy(sim, run["ops"], run["x0"]))
    del run
    # -------- time (unmeasured runs)
    now = time.process_time if st.clock == "process" else time.perf_counter
    times = []
    for _ in range(1 + st.repeats):
        st.restore()
        _sync(st.device)
        t0 = now()
        executor_for(schedule, st.stages, st.loss_fn, st.x0, output_saved=chain.output_saved,
                     release=st.release).run(schedule)
        _sync(st.device)
        times.append(now() - t0)
    rec["measured_time"] = statistics.median(times[1:]) if st.repeats else times[0]
    rec["time_ratio"] = rec["measured_time"] / sim.makespan if sim.makespan else None
    return rec


def confirm(models=None, budgets=DEFAULT_BUDGETS, solver_names=None, **kw) -> list:
    """Records for every requested network (default: the hand-split ones, :data:`NETWORKS`;
    the captured ones, :data:`CAPTURED_NETWORKS`, by name)."""
    models = list(NETWORKS) if models is None else list(models)
    known = {**NETWORKS, **CAPTURED_NETWORKS}
    for m in models:
        if m not in known:
            raise RematError(f"unknown network {m!r} (known: {', '.join(known)})")
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
    # memory: the target band [0.97, 1.01]; time: +-10%
    for ax, unit, (down, up) in ((axes[0], "MiB", (0.97, 1.01)), (axes[1], "ms", (0.9, 1.1))):
        lo, hi = ax.get_xlim()
        lo2, hi2 = ax.get_ylim()
        lo, hi = min(lo, lo2), max(hi, hi2)
        xs = [lo, hi]
        ax.plot(xs, xs, "k-", lw=.8, label="measured = predicted")
        ax.plot(xs, [v * up for v in xs], "k:", lw=.8, label=f"x {down:g} and x {up:g}")
        ax.plot(xs, [v * down for v in xs], "k:", lw=.8)
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel(f"predicted ({unit})")
        ax.set_ylabel(f"measured ({unit})")
        ax.grid(alpha=.3)
    axes[0].set_title("peak activation memory (allocator)")
    axes[1].set_title("time of one training step" + (
        " (process CPU time)" if done and done[0].get("clock") == "process" else ""))
    axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
