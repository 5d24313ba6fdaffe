"""The frontier: time per training step against peak activation memory, remat's schedules
side by side with what users run today.

For one network (a :class:`~remat_theory.torch.networks.Network`: its stages, an input and
a loss), every *method* is one way to run a training step (forward, loss, backward):

- ``plain``: the stages as they are; autograd keeps every activation (store-all).
- ``remat:SOLVER@F``: :class:`~remat_theory.torch.module.CheckpointedSequential` with the
  named solver at a budget of ``F`` times the store-all peak of the profiled chain (by
  default a sweep from the solver's smallest feasible budget to store-all).
- ``remat-compiled:SOLVER@F`` (with ``compile_stages=True``): the same with every stage
  compiled by ``torch.compile`` (the schedule still runs eagerly between stages), profiled
  on its own since a compiled stage saves other tensors: remat's answer to the compiler's
  fusion, to set beside ``memory_budget``.
- ``checkpoint_sequential:K``: ``torch.utils.checkpoint.checkpoint_sequential`` over the same
  stage list with ``K`` segments (non-reentrant), for every K from 2 to the number of stages.
- ``memory_budget:R``: ``torch.compile`` of the same stages with
  ``torch._functorch.config.activation_memory_budget = R``, torch's own memory-budgeted
  recomputation, where the compiler runs (it needs a C++ toolchain on the CPU).

Each method is measured the same way: every step starts with no parameter gradient (as
after ``optimizer.zero_grad()``); its peak is what the allocator holds above the memory in
use when the step starts, parameter gradients taken out (memory outside the chain, the same
for every method; :func:`~remat_theory.torch.tracker.allocator_peak`); its time is the
median of ``repeats`` steps run *interleaved* (round ``r`` runs every method once, in a seeded random
order), so that a slow phase of a noisy machine hits every method alike.

:func:`dominance` then asks the question a user asks: for every point of every baseline, is
there a remat point with no more memory and no more time (``time_tolerance`` of noise
allowed)?  And is remat's lowest memory below the lowest any baseline reaches?
"""
from __future__ import annotations

import math
import random
import statistics
import time
from dataclasses import asdict, dataclass, field

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint_sequential

from remat_theory.model.errors import InfeasibleBudgetError, RematError
from remat_theory.torch.module import CheckpointedSequential
from remat_theory.torch.networks import Network
from remat_theory.torch.profiler import profile
from remat_theory.torch.stages import split_stages
from remat_theory.torch.tracker import allocator_peak

DEFAULT_STEPS = (0.0, 0.03, 0.07, 0.12, 0.2, 0.3, 0.45, 0.6, 0.8, 1.0)
DEFAULT_MEMORY_BUDGETS = (0.1, 0.3, 0.5, 0.7, 0.9)
BASELINES = ("plain", "checkpoint_sequential", "memory_budget")


@dataclass
class Point:
    """One method's measurement.  ``peak`` in bytes (allocator, above the step's start),
    ``time`` the median seconds per step; ``status`` is ``ok``, ``infeasible`` (the solver
    found no schedule: ``detail`` says the smallest budget), ``refused`` (the drop-in cannot
    run that solver's schedule, ``detail`` says why) or ``error`` (``detail`` says what
    failed, e.g. no compiler)."""

    method: str
    family: str  # "remat", or one of BASELINES
    param: float | int | None = None
    solver: str | None = None
    status: str = "ok"
    detail: str = ""
    peak: int | None = None
    time: float | None = None
    times: list = field(default_factory=list)
    predicted_peak: int | None = None
    predicted_time: float | None = None
    budget: int | None = None


def _zero_grads(params) -> None:
    """As ``optimizer.zero_grad()`` does by default: no gradient at the start of a step."""
    for p in params:
        p.grad = None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _Method:
    """A prepared way of running one training step: ``step()`` runs it."""

    def __init__(self, point: Point, step):
        self.point = point
        self.step = step


def _plain(stages: nn.Sequential, x: torch.Tensor, loss_fn):
    def step():
        loss = loss_fn(stages(x))
        loss.backward()
    return step


def _ckpt_seq(stages: nn.Sequential, k: int, x: torch.Tensor, loss_fn):
    def step():
        out = checkpoint_sequential(stages, k, x, use_reentrant=False)
        loss = loss_fn(out)
        del out
        loss.backward()
    return step


def _remat(ck: CheckpointedSequential, x: torch.Tensor, loss_fn):
    def step():
        out = ck(x)
        loss = loss_fn(out)
        del out
        loss.backward()
    return step


def _memory_budget(stages: nn.Sequential, ratio: float, x: torch.Tensor, loss_fn):
    """torch.compile with the min-cut partitioner's activation budget; compiled (and run
    once) here, inside the config patch, so the timed steps reuse the compiled graph."""
    import torch._dynamo
    import torch._functorch.config as fconfig

    torch._dynamo.reset()
    compiled = torch.compile(stages)

    def step():
        with fconfig.patch(activation_memory_budget=ratio):
            loss = loss_fn(compiled(x))
            loss.backward()
    return step


def _remat_point(stages, budget, solver, x, loss_fn, chain, label, kind="remat") -> _Method:
    pt = Point(f"{kind}:{solver}@{label}", "remat", budget, solver)
    try:
        ck = CheckpointedSequential(stages, budget=budget, solver=solver, example_input=x,
                                    loss_fn=loss_fn, chain=chain)
    except InfeasibleBudgetError as e:
        pt.status, pt.detail = "infeasible", str(e)
        return _Method(pt, None)
    except RematError as e:  # e.g. a schedule the drop-in cannot run as autograd
        pt.status, pt.detail = "refused", str(e)
        return _Method(pt, None)
    pt.budget = ck.budget
    pt.predicted_peak = ck.plan.predicted_peak
    pt.predicted_time = ck.solution.makespan
    return _Method(pt, _remat(ck, x, loss_fn))


def remat_budgets(stages, solver, x, loss_fn, chain, steps=DEFAULT_STEPS) -> list:
    """Budgets (bytes) from the solver's smallest feasible one to the store-all peak: the
    smallest plus ``q`` times the distance, for each ``q`` in ``steps``."""
    store_all = chain.store_all_memory()
    try:
        CheckpointedSequential(stages, budget=1, solver=solver, example_input=x,
                               loss_fn=loss_fn, chain=chain)
        smallest = 1
    except InfeasibleBudgetError as e:
        smallest = e.smallest_feasible
    if smallest is None:
        return []
    return sorted({min(store_all, int(round(smallest + q * max(0, store_all - smallest))))
                   for q in steps})


def _remat_sweep(stages, solvers, fractions, x, loss_fn, chain, kind="remat") -> list:
    """remat points of every solver over the budget sweep (or the given fractions)."""
    methods = []
    for solver in solvers:
        if fractions is None:
            for b in remat_budgets(stages, solver, x, loss_fn, chain):
                methods.append(_remat_point(stages, int(b), solver, x, loss_fn, chain,
                                            f"{b / chain.store_all_memory():.3f}", kind))
        else:
            for f in fractions:
                methods.append(_remat_point(stages, float(f), solver, x, loss_fn, chain,
                                            f"{f:g}", kind))
    return methods


def _compiled_sweep(stages, solvers, fractions, x, loss_fn, profile_repeats) -> list:
    """remat over the same stages, each compiled once (parameters shared) and profiled
    compiled; a compiler failure is one ``error`` point, as for ``memory_budget``."""
    import torch._dynamo

    try:
        torch._dynamo.reset()
        compiled = nn.Sequential(*[torch.compile(s) for s in stages])
        cchain = profile(list(compiled), x, loss_fn, repeats=profile_repeats)
    except Exception as e:  # noqa: BLE001 - any compiler failure is a result here
        pt = Point("remat-compiled", "remat", status="error",
                   detail=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300])
        return [_Method(pt, None)]
    return _remat_sweep(compiled, solvers, fractions, x, loss_fn, cchain, "remat-compiled")


def prepare(net: Network, *, solvers=("dp",), fractions=None, segments=None,
            memory_budgets=DEFAULT_MEMORY_BUDGETS, compile_budgets: bool = True,
            compile_stages: bool = False,
            chain=None, profile_repeats: int = 3) -> tuple[list, object]:
    """Build every method for ``net``; returns ``(methods, chain)``.

    ``fractions``: remat budgets as fractions of the store-all peak; None (default) sweeps
    each solver from its smallest feasible budget to store-all (:func:`remat_budgets`).
    ``chain``: a profiled chain of the network's stages (profiled here when None, once, and
    shared by every remat point).  Methods that cannot run (an infeasible budget, a schedule
    the drop-in refuses, no compiler) become points with their status and no step.
    ``compile_stages``: also remat with every stage compiled (``remat-compiled`` points).
    """
    stages = nn.Sequential(*split_stages(net.model))
    x, loss_fn = net.example_input, net.loss_fn
    if chain is None:
        chain = profile(list(stages), x, loss_fn, repeats=profile_repeats)
    methods = [_Method(Point("plain", "plain"), _plain(stages, x, loss_fn))]
    methods += _remat_sweep(stages, solvers, fractions, x, loss_fn, chain)
    if compile_stages:
        methods += _compiled_sweep(stages, solvers, fractions, x, loss_fn, profile_repeats)
    L = len(stages)
    for k in (segments if segments is not None else range(2, L + 1)):
        methods.append(_Method(Point(f"checkpoint_sequential:{k}", "checkpoint_sequential", k),
                               _ckpt_seq(stages, k, x, loss_fn)))
    if compile_budgets:
        for r in memory_budgets:
            pt = Point(f"memory_budget:{r:g}", "memory_budget", r)
            try:
                step = _memory_budget(stages, r, x, loss_fn)
                step()  # compile now, not inside a timed step
            except Exception as e:  # noqa: BLE001 - any compiler failure is a result here
                pt.status = "error"
                pt.detail = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
                methods.append(_Method(pt, None))
                continue
            methods.append(_Method(pt, step))
    return methods, chain


def measure(methods: list, params, device: torch.device, *, repeats: int = 7, warmup: int = 1,
            seed: int = 0) -> list:
    """Measure every runnable method: one allocator peak each, then ``repeats`` interleaved
    timed rounds (seeded order).  Returns the points."""
    runnable = [m for m in methods if m.step is not None]
    for m in runnable:
        for _ in range(warmup):
            _zero_grads(params)
            m.step()
    for m in runnable:
        _zero_grads(params)
        m.point.peak = allocator_peak(m.step, device, persistent=lambda: [p.grad for p in params])
    rng = random.Random(seed)
    for _ in range(repeats):
        order = list(runnable)
        rng.shuffle(order)
        for m in order:
            _zero_grads(params)
            _sync(device)
            t0 = time.perf_counter()
            m.step()
            _sync(device)
            m.point.times.append(time.perf_counter() - t0)
    for m in runnable:
        m.point.time = statistics.median(m.point.times)
    return [m.point for m in methods]


def dominance(points: list, time_tolerance: float = 0.02) -> dict:
    """Does remat dominate every baseline point?  For each baseline point that ran, the remat
    point with no more memory and the least time, and whether its time is within
    ``(1 + time_tolerance)`` of the baseline's.  Also the lowest peak of each family."""
    ok = [p for p in points if p.status == "ok" and p.peak is not None]
    remat = [p for p in ok if p.family == "remat"]
    rows = []
    for b in (p for p in ok if p.family != "remat"):
        cands = [r for r in remat if r.peak <= b.peak]
        best = min(cands, key=lambda r: r.time, default=None)
        rows.append({
            "baseline": b.method, "peak": b.peak, "time": b.time,
            "remat": None if best is None else best.method,
            "remat_peak": None if best is None else best.peak,
            "remat_time": None if best is None else best.time,
            "time_ratio": None if best is None else best.time / b.time,
            "dominated": best is not None and best.time <= b.time * (1 + time_tolerance),
        })
    lowest = {}
    for p in ok:
        if p.family not in lowest or p.peak < lowest[p.family]["peak"]:
            lowest[p.family] = {"method": p.method, "peak": p.peak, "time": p.time}
    base_low = min((v["peak"] for k, v in lowest.items() if k != "remat"), default=None)
    remat_low = lowest.get("remat", {}).get("peak")
    return {
        "rows": rows,
        "lowest": lowest,
        "all_dominated": bool(rows) and all(r["dominated"] for r in rows),
        "remat_lowest_below_baselines": (remat_low is not None and base_low is not None
                                         and remat_low < base_low),
        "time_tolerance": time_tolerance,
    }


def run_frontier(net: Network, *, device="cpu", repeats: int = 7, seed: int = 0, **kw) -> dict:
    """Prepare, measure and analyse one network; returns a JSON-ready record."""
    dev = torch.device(device)
    net.to(dev)
    params = [p for p in net.model.parameters() if p.requires_grad]
    t0 = time.perf_counter()
    methods, chain = prepare(net, **kw)
    points = measure(methods, params, dev, repeats=repeats, seed=seed)
    return {
        "network": net.name,
        "input_shape": list(net.example_input.shape),
        "device": str(dev),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "repeats": repeats,
        "stages": None if chain is None else chain.length,
        "store_all_predicted": None if chain is None else chain.store_all_memory(),
        "points": [asdict(p) for p in points],
        "dominance": dominance(points),
        "wall_time": time.perf_counter() - t0,
    }


def format_table(record: dict) -> str:
    """One line per baseline point: its memory and time, and the best remat point at no more
    memory (MiB, ms, ratio)."""
    d = record["dominance"]
    head = (f"{record['network']} {record['input_shape']}: "
            f"{'remat dominates every baseline point' if d['all_dominated'] else 'NOT all dominated'}; "
            f"lowest memory remat {_mib(d['lowest'].get('remat', {}).get('peak'))} MiB vs "
            f"baselines {_mib(min((v['peak'] for k, v in d['lowest'].items() if k != 'remat'), default=None))} MiB")
    lines = [head, f"{'baseline':<26}{'MiB':>9}{'ms':>9}  {'best remat at <= memory':<22}{'MiB':>9}{'ms':>9}{'ratio':>7}"]
    for r in d["rows"]:
        lines.append(f"{r['baseline']:<26}{_mib(r['peak']):>9}{r['time'] * 1e3:>9.1f}  "
                     f"{(r['remat'] or '-'):<22}{_mib(r['remat_peak']):>9}"
                     f"{'' if r['remat_time'] is None else format(r['remat_time'] * 1e3, '.1f'):>9}"
                     f"{'' if r['time_ratio'] is None else format(r['time_ratio'], '.3f'):>7}")
    return "\n".join(lines)


def _mib(v) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v / 2**20:.2f}"


def plot(records: list, path, title: str = "") -> None:
    """Time per step against peak memory, one panel per input configuration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(records)
    fig, axes = plt.subplots(1, n, figsize=(5.2 * n, 4.2), squeeze=False)
    style = {"remat": ("o", "C0"), "plain": ("s", "k"), "checkpoint_sequential": ("^", "C1"),
             "memory_budget": ("D", "C2")}
    for ax, rec in zip(axes[0], records):
        pts = [p for p in rec["points"] if p["status"] == "ok" and p["peak"] is not None]
        fams = {}
        for p in pts:
            key = p["family"] if p["family"] != "remat" else p["method"].split("@")[0]
            fams.setdefault(key, []).append(p)
        for key, ps in sorted(fams.items()):
            fam = ps[0]["family"]
            marker, color = style.get(fam, ("x", "C3"))
            if fam == "remat" and (ps[0]["solver"] != "dp"
                                   or ps[0]["method"].startswith("remat-compiled")):
                color = "C4" if ps[0]["solver"] != "dp" else "C9"
            ps.sort(key=lambda p: p["peak"])
            ax.plot([p["peak"] / 2**20 for p in ps], [p["time"] * 1e3 for p in ps],
                    marker=marker, color=color, linestyle="-" if fam == "remat" else "none",
                    label=key)
        ax.set_xlabel("peak activation memory (MiB, allocator)")
        ax.set_ylabel("time per training step (ms)")
        ax.set_title(f"{rec['network']} {rec['input_shape']}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


__all__ = ["Point", "prepare", "measure", "dominance", "run_frontier", "format_table", "plot",
           "DEFAULT_STEPS", "remat_budgets", "DEFAULT_MEMORY_BUDGETS", "BASELINES"]

