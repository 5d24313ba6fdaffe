"""Pictures of one chain: the Pareto frontier (makespan against memory budget) of every
solver, and the memory profile over time of one schedule (``remat plot``).

matplotlib is an optional extra (``pip install 'remat[plot]'``), imported only when a figure
is drawn; the data functions (:func:`pareto_budgets`, :func:`pareto_data`,
:func:`profile_series`) need nothing beyond the package.  This module sits on the solver
floor: it imports :mod:`solvers`.
"""
from __future__ import annotations

from pathlib import Path

from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError, SolverContractError
from remat_theory.analysis.parallel import parallel_map
from remat_theory.model.simulator import simulate


def pareto_budgets(chain: Chain, max_points: int = 80) -> list[int]:
    """Budgets (bytes) from just below the memory lower bound to store-all: every integer
    budget when there are at most ``max_points`` (makespans are step functions of the
    budget, so this shows every step), otherwise ``max_points`` evenly spaced ones.

    Sizes are first divided by their common divisor, so chains in bytes with large units
    still get every step."""
    if max_points < 2:
        raise RematError(f"max_points = {max_points} must be >= 2")
    g = chain.size_gcd()
    lo = max(0, chain.memory_lower_bound() // g - 1)
    hi = -(-chain.store_all_memory() // g)
    if hi - lo + 1 <= max_points:
        return [b * g for b in range(lo, hi + 1)]
    step = (hi - lo) / (max_points - 1)
    return sorted({int(round(lo + k * step)) * g for k in range(max_points)})


def _pareto_task(item):
    import solvers

    chain_dict, name, budget, time_limit = item
    chain = Chain.from_dict(chain_dict)
    info = solvers.get(name)
    opts = {"time_limit": time_limit} if time_limit and "time_limit" in info.options else {}
    try:
        sol = solvers.solve(chain, budget, name, **opts)
    except (RematError, SolverContractError) as e:
        return {"solver": name, "budget": budget, "status": "error", "makespan": None,
                "error": str(e)}
    return {"solver": name, "budget": budget, "status": sol.status, "makespan": sol.makespan,
            "peak_memory": sol.peak_memory, "optimal_for": sol.optimal_for}


def default_solvers(chain: Chain) -> list[str]:
    """Every registered solver, without those with a size guard (a ``max_stages`` option:
    exhaustive search) on chains beyond their registered ``max_stages``; the others take a
    time limit instead."""
    import solvers

    return [n for n in solvers.names()
            if "max_stages" not in solvers.get(n).options or solvers.get(n).practical_for(chain)]


def pareto_data(chain: Chain, solver_names, budgets, *, time_limit: float | None = 30.0,
                workers=None, progress: bool = True) -> dict:
    """``{solver: [(budget, makespan or None), ...]}``; None where it found no schedule.
    Solver errors are kept as ``{solver: ...}`` entries in ``data["errors"]``."""
    import solvers

    for n in solver_names:
        solvers.get(n)
    cd = chain.to_dict()
    items = [(cd, n, b, time_limit) for n in solver_names for b in budgets]
    res = parallel_map(_pareto_task, items, workers=workers, progress=progress, desc="plot")
    data: dict = {n: [] for n in solver_names}
    errors = []
    for r in res:
        data[r["solver"]].append((r["budget"], r["makespan"]))
        if r["status"] == "error":
            errors.append(r)
    return {"series": data, "errors": errors}


def profile_series(chain: Chain, schedule, budget: int | None = None) -> dict:
    """The memory profile of a schedule as plottable steps: for each operation its start and
    end time (seconds), the memory held before it, its peak while it runs, and its token."""
    sim = simulate(chain, schedule, budget)
    return {"makespan": sim.makespan, "peak": sim.peak_memory,
            "steps": [(s.start, s.start + s.time, s.memory_before, s.peak, s.memory_after, s.op)
                      for s in sim.profile]}


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise RematError("plotting needs matplotlib, which is not installed "
                         "(pip install 'remat[plot]')") from None
    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    return plt


def plot(chain: Chain, pareto: dict, out: str | Path, *, profile: dict | None = None,
         profile_title: str = "", title: str | None = None) -> Path:
    """Draw the Pareto frontier (and the profile, when given) into a PNG at ``out``."""
    plt = _pyplot()
    ncols = 2 if profile is not None else 1
    fig, axes = plt.subplots(1, ncols, figsize=(7.5 * ncols, 5.2), squeeze=False)
    ax = axes[0][0]
    styles = ["-", "--", "-.", ":"]
    markers = "osD^v<>xP*h"
    ideal = chain.ideal_makespan()
    cmap = plt.get_cmap("tab20")
    import solvers

    for k, (name, pts) in enumerate(pareto["series"].items()):
        xs = [b for b, m in pts if m is not None]
        ys = [m / ideal for b, m in pts if m is not None]
        if not xs:
            continue
        exact = solvers.get(name).exact if name in solvers.names() else False
        ax.step(xs, ys, where="post", linestyle=styles[k % len(styles)], color=cmap(k % 20),
                marker=markers[k % len(markers)], markersize=2.5 if len(xs) < 40 else 1.5,
                linewidth=2.2 if exact else 1.2, label=name + (" (exact)" if exact else ""),
                zorder=3 if exact else 2)
    ax.axvline(chain.memory_lower_bound(), color="grey", linewidth=0.8, linestyle=":")
    ax.axvline(chain.store_all_memory(), color="grey", linewidth=0.8, linestyle=":")
    ax.set_xlabel("memory budget (bytes)   [dotted: memory lower bound, store-all]")
    ax.set_ylabel("makespan / (sum of forward and backward times)")
    ax.set_title(title or f"{chain.name}: makespan against budget ({chain.length} stages)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    if profile is not None:
        ax2 = axes[0][1]
        ts, held, peaks = [], [], []
        for start, end, before, peak, after, op in profile["steps"]:
            ts += [start, end]  # piecewise constant: held before the op while it runs
            held += [before, before]
            peaks += [peak, peak]
        if profile["steps"]:
            ts.append(profile["steps"][-1][1])
            held.append(profile["steps"][-1][4])
            peaks.append(profile["steps"][-1][4])
        ax2.fill_between(ts, 0, peaks, step=None, alpha=0.25, label="peak while an op runs")
        ax2.plot(ts, held, linewidth=1.2, label="memory held")
        if profile.get("budget") is not None:
            ax2.axhline(profile["budget"], color="red", linewidth=1.0, linestyle="--",
                        label=f"budget {profile['budget']}")
        if len(profile["steps"]) <= 60:
            for start, end, before, peak, after, op in profile["steps"]:
                ax2.annotate(op, ((start + end) / 2, peak), fontsize=6, ha="center",
                             va="bottom", rotation=90)
        ax2.set_xlabel("time")
        ax2.set_ylabel("memory (bytes)")
        ax2.set_title(profile_title or "memory profile")
        ax2.grid(True, alpha=0.3)
        ax2.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
