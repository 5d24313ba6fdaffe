"""The frontier the user sees: time per training step against peak memory, on the ORIGINAL
model, remat beside what users run today.

For one :class:`~remat_theory.lab.frontier_networks.Workload` (the original eager model,
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
- ``remat:B``: remat's drop-in (:class:`~remat_theory.torch.modules.checkpointed.CheckpointedSequential`,
  eager) at a budget of B bytes of the chain; the budgets are the *breakpoints* of the
  solver's makespan over the budget (:func:`remat_breakpoints`: every budget where the DP's
  optimal schedule changes, from the smallest feasible one to store-all, with each
  ``checkpoint_sequential`` schedule's own level kept where more than ``max_points`` are
  spread), so that no baseline point falls between two remat points for want of a budget.
- ``remat_compiled:B``: ``torch.compile`` over a remat schedule as ONE graph
  (:func:`~remat_theory.torch.modules.checkpointed.run_traceable`: its non-reentrant checkpoints become the
  compiler's recompute regions), over the model captured by ``torch.export``
  (:meth:`~remat_theory.lab.frontier_networks.Workload.graph_stages`: the capture at the
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

import math
import random
import statistics
import time
from dataclasses import asdict

import torch
import torch._dynamo
from torch import nn

from remat_theory.lab.frontier_inplace import inplace_breakpoints, inplace_methods
from remat_theory.lab.frontier_methods import (Method, Point, baseline_schedule_peaks,
                                               checkpoint_sequential_method, compile_budget_of,
                                               compiled_sweep, drop_in, drop_in_states, hf_layers,
                                               hf_methods, hf_schedule_peaks, hf_schedule_tree,
                                               plain_method, profile_clock, remat_breakpoints,
                                               remat_method, sync, zero_grads)
from remat_theory.lab.frontier_networks import Workload, from_network
from remat_theory.lab.frontier_noise import (CLOCKS, MIN_TOLERANCE, choose_clock, median_spread,
                                             noise, paired)
from remat_theory.model.errors import RematError
from remat_theory.torch.plan.budget import format_bytes, parse_bytes
from remat_theory.torch.profiling.profiler import profile_details
from remat_theory.torch.tracker import allocator_peak


FAMILIES = ("plain", "hf_checkpointing", "checkpoint_sequential", "compile_budget", "remat",
            "remat_compiled", "remat_offload", "remat_inplace")
BASELINES = FAMILIES[:4]
REMAT = ("remat", "remat_compiled", "remat_inplace")
DEFAULT_FAMILIES = FAMILIES[:-1]
"""What :func:`prepare` runs unless told (``remat_inplace`` is asked for by name)."""
DEFAULT_COMPILE_BUDGETS = (0.0, 0.3, 0.6, 1.0)
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
    (:func:`~remat_theory.lab.frontier_offload.offload_methods`; empty: none).

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
                cover += hf_schedule_peaks(chain, w.stages, range(1, hf_layers(w.model) + 1),
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
            from remat_theory.lab.frontier_offload import offload_methods
            methods += offload_methods(w, chain, Point, Method, remat_method,
                                       solvers=offload_solvers, bandwidth=bandwidth,
                                       budgets=offload_budgets, points=offload_points)
        if compiled_points:
            methods += compiled_sweep(w, compiled_points, backend, profile_repeats)
        seq = nn.Sequential(*w.stages)
        for k in (segs if "checkpoint_sequential" in fams else ()):
            methods.append(Method(Point(f"checkpoint_sequential:{k}", "checkpoint_sequential", k),
                                   checkpoint_sequential_method(w, seq, k)))
    for i, r in enumerate(compile_budgets):
        methods.append(compile_budget_of(w, float(r), backend, i))
    if "remat_inplace" in fams:
        levels = []
        for m in methods:  # each HF every-K level's step peak, by the meter measure() uses
            if m.point.family == "hf_checkpointing" and m.step is not None:
                dev = next(iter(m.params)).device
                _run(m, m.params, dev)
                measure_peaks(m, m.params, dev)
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
        zero_grads(params)
        sync(device)
        c0 = time.thread_time()
        t0 = time.perf_counter()
        m.step()
        sync(device)
        t1 = time.perf_counter()
        return t1 - t0, time.thread_time() - c0
    finally:
        if m.teardown:
            m.teardown()


def measure_peaks(m: Method, params, device):
    params = m.params or params
    if m.setup:
        m.setup()
    try:
        zero_grads(params)
        m.point.peak = allocator_peak(m.step, device,
                                      persistent=lambda: [p.grad for p in params])
        zero_grads(params)
        m.point.step_peak = allocator_peak(m.step, device)
    finally:
        if m.teardown:
            m.teardown()


def step_grads(m: Method, params, seed: int) -> list:
    params = m.params or params
    if m.setup:
        m.setup()
    try:
        zero_grads(params)
        torch.manual_seed(seed)
        m.step()
        out = [None if p.grad is None else p.grad.detach().clone() for p in params]
        zero_grads(params)
        return out
    finally:
        if m.teardown:
            m.teardown()


def compare_grads(got: list, want: list) -> tuple:
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
        measure_peaks(m, params, device)
    want = step_grads(runnable[0], params, seed)  # plain
    for m in runnable:
        m.point.grads_equal, m.point.grad_rel_diff = compare_grads(step_grads(m, params, seed), want)
    for m in runnable:
        if m.params:
            zero_grads(m.params)
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
        m.point.time, m.point.spread = median_spread(m.point.times)
        if m.point.cpu_times:
            m.point.cpu_time, m.point.cpu_spread = median_spread(m.point.cpu_times)
        if ((isinstance(m.point.param, str) or m.point.family == "remat_inplace")
                and m.point.budget is not None):
            m.point.within_budget = m.point.step_peak <= m.point.budget
    zero_grads(params)
    return [m.point for m in methods]


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
        cands = [(r, paired(r, b, key)) for r in remat if r[memory] <= b[memory]]
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
    :class:`~remat_theory.lab.networks.Network`); returns a JSON-ready record."""
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
