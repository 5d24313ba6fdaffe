"""``remat verify --library``: every solver against the instance library.

Each selected solver (default: every registered one and the variants declared for verify,
plug-ins included) runs on each instance it supports (its registered ``max_stages`` for
sweeps, the optional chain fields it models); its schedule is replayed by the simulator,
the referee, under the instance's budget, and its answer is judged against the record:

- ``solved``: a valid schedule; its *gap* is ``makespan / best known - 1``;
- ``no-schedule``: none found (a heuristic's None, a time limit without incumbent);
- ``refused`` (a limit the solver states before any work) and ``skipped`` (too long for its
  sweeps, or a chain field it does not model): no claim;
- ``improvement``: a valid schedule shorter than the best known on an open instance, and
  not below its proved bound: the library's record can be improved;

and, each a bug that makes the command exit 1:

- ``invalid``: the schedule does not replay, or the solver's claimed makespan or peak is
  not the simulated one, or it crashed on valid input;
- ``false-optimum``: it claims the optimum of a class containing the best known schedule
  (classified by the rules, :func:`remat_theory.model.classes.classify`) above that
  schedule's makespan, or a proved bound of such a class above it;
- ``false-infeasible``: it claims no schedule of such a class fits;
- ``below-bound``: a valid schedule shorter than the instance's proved lower bound (then
  the library's proof is wrong).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import solvers
from remat_theory.analysis.library import Instance, instance_from_dict, load, same
from remat_theory.analysis.parallel import TaskFailedError, parallel_map
from remat_theory.analysis.verify import resolve_solvers
from remat_theory.model import classes
from remat_theory.model.errors import (InfeasibleBudgetError, InvalidScheduleError,
                                       SolverLimitError, SolverOptionError)
from remat_theory.model.schedule import Schedule
from remat_theory.model.simulator import simulate
from remat_theory.model.solution import INFEASIBLE, OPTIMAL
from solvers import registry

BUGS = ("invalid", "false-optimum", "false-infeasible", "below-bound")
OUTCOMES = ("solved", "improvement", "no-schedule", "refused", "skipped") + BUGS

__all__ = ["LibraryVerifyConfig", "run_library_verify", "verify_instance", "group_of",
           "BUGS", "OUTCOMES"]


@dataclass
class LibraryVerifyConfig:
    """What ``remat verify --library`` runs: the library (None: the shipped one), the
    solvers (None: the registry's verify labels), a time limit per solve, a selection of
    classes (a trailing ``*``: a prefix) or ids, the workers."""

    path: str | None = None
    solvers: tuple | None = None
    time_limit: float | None = 10.0
    classes: tuple | None = None
    ids: tuple | None = None
    max_stages: int | None = None
    max_stages_for: tuple = ()  # ((label, stages), ...): replaces the registered sweep limits
    workers: int | None = 1
    progress: bool = True


def group_of(cls: str) -> str:
    """The row of the per-class table: the ``certificate-<name>`` classes share one, and
    so do the network classes of each size (``network-<preset>-small``, ``network-<preset>``)."""
    if cls.startswith("certificate-"):
        return "certificate"
    if cls.startswith("network-"):
        return "network-small" if cls.endswith("-small") else "network"
    return cls


def _bug(rec: dict, outcome: str, detail: str) -> dict:
    rec.update(outcome=outcome, detail=detail)
    return rec


def _solve(inst: Instance, spec: tuple, best_class: str, time_limit, caps: dict) -> dict:
    label, name, _ = spec
    info, _, cap = registry.resolve(label)
    cap = caps.get(label, caps.get(name, cap))
    rec = {"solver": label, "status": None, "makespan": None, "gap": None,
           "schedule_class": None, "optimal_for": None, "outcome": None, "detail": "",
           "wall_time": 0.0}
    chain, budget = inst.chain, inst.budget
    if cap is not None and chain.length > cap:
        return _bug(rec, "skipped", f"{chain.length} stages, above its sweep limit {cap}")
    missing = () if info.external else registry.unsupported(label, chain)
    if missing:
        return _bug(rec, "skipped", f"does not model {', '.join(missing)}")
    options = {}
    if time_limit is not None and "time_limit" in info.options:
        options["time_limit"] = time_limit
    guard = info.defaults.get("max_stages")
    if guard is not None and chain.length > guard:
        options["max_stages"] = chain.length
    t0 = time.perf_counter()
    try:
        sol = solvers.solve(chain, budget, label, **options)
    except InfeasibleBudgetError as e:
        sol = None
        rec.update(status=INFEASIBLE, optimal_for=info.optimal_for if info.exact else "none")
        if info.exact and classes.subset(best_class, info.optimal_for):
            return _bug(rec, "false-infeasible", f"says no schedule fits ({e}) but the "
                        f"library's {best_class} schedule does")
        return _bug(rec, "no-schedule", str(e))
    except SolverOptionError:
        raise  # misuse: bad input, not a finding
    except SolverLimitError as e:
        return _bug(rec, "refused", str(e).split("\n")[0])
    except Exception as e:  # noqa: BLE001 - a false answer or a crash on valid input
        return _bug(rec, "invalid", f"{type(e).__name__}: {e}")
    finally:
        rec["wall_time"] = time.perf_counter() - t0
    rec.update(status=sol.status, optimal_for=sol.optimal_for, makespan=sol.makespan)
    claims = (sol.optimal_for not in (None, "none") and classes.is_class_name(sol.optimal_for)
              and classes.subset(best_class, sol.optimal_for))
    if sol.schedule is None:
        if sol.status == INFEASIBLE and claims:
            return _bug(rec, "false-infeasible", f"claims no {sol.optimal_for} schedule fits but "
                        f"the library's {best_class} schedule does")
        return _bug(rec, "no-schedule", sol.message[:200])
    try:  # the referee, once more, on the solver's own schedule
        sim = simulate(chain, Schedule(sol.schedule.tokens()), budget, allow_drop=sol.allows_drop)
    except InvalidScheduleError as e:
        return _bug(rec, "invalid", f"the schedule does not replay: {e}")
    if not same(sim.makespan, sol.makespan):
        return _bug(rec, "invalid", f"claims makespan {sol.makespan} but the simulator "
                    f"measures {sim.makespan}")
    rec["schedule_class"] = classes.classify(chain, sol.schedule).key
    best = inst.best_makespan
    rec["gap"] = (sim.makespan / best - 1.0) if best > 0 else (0.0 if sim.makespan == 0 else None)
    shorter = sim.makespan < best and not same(sim.makespan, best)
    canonical = not sol.allows_drop  # Drop is outside the model the bound is proved in
    if claims and sol.status == OPTIMAL and sim.makespan > best and not same(sim.makespan, best):
        return _bug(rec, "false-optimum", f"claims the optimum over {sol.optimal_for} is "
                    f"{sim.makespan:.10g} but the library's {best_class} schedule takes "
                    f"{best:.10g} ({inst.best_solver})")
    bound = sol.bound
    bclass = (sol.info or {}).get("bound_over") or sol.optimal_for
    if (bound is not None and classes.is_class_name(bclass) and classes.subset(best_class, bclass)
            and bound > best and not same(bound, best)):
        return _bug(rec, "false-optimum", f"claims every {bclass} schedule takes >= {bound:.10g} "
                    f"but the library's {best_class} schedule takes {best:.10g}")
    if shorter and canonical and inst.bound is not None and sim.makespan < inst.bound \
            and not same(sim.makespan, inst.bound):
        return _bug(rec, "below-bound", f"a valid schedule of {sim.makespan:.10g} is below the "
                    f"bound {inst.bound:.10g} the library says {inst.bound_solver} proved")
    if shorter and canonical:
        return _bug(rec, "improvement", f"{sim.makespan:.10g} < best known {best:.10g}")
    return _bug(rec, "solved", "")


def verify_instance(task: tuple) -> dict:
    """One instance against every solver (the unit of work; runs in a worker): ``task`` is
    ``(instance record, solver specs, time limit, stage limits)``."""
    data, specs, time_limit, caps = task
    inst = instance_from_dict(data)
    best_class = classes.classify(inst.chain, Schedule(list(inst.best_schedule))).key
    results = [_solve(inst, spec, best_class, time_limit, dict(caps)) for spec in specs]
    return {"id": inst.id, "class": inst.cls, "stages": inst.chain.length,
            "budget": inst.budget, "status": inst.status, "best": inst.best_makespan,
            "bound": inst.bound, "best_class": best_class, "results": results}


def _summary(rows: list, labels: list) -> list:
    out = []
    groups = list(dict.fromkeys(group_of(r["class"]) for r in rows))
    for g in groups:
        mine = [r for r in rows if group_of(r["class"]) == g]
        for label in labels:
            recs = [x for r in mine for x in r["results"] if x["solver"] == label]
            ran = [x for x in recs if x["outcome"] not in ("skipped", "refused")]
            if not ran:
                continue
            gaps = [x["gap"] for x in ran if x["gap"] is not None]
            count = {o: sum(x["outcome"] == o for x in ran) for o in OUTCOMES}
            out.append({"group": g, "solver": label, "instances": len(mine), "ran": len(ran),
                        "solved": count["solved"] + count["improvement"],
                        "at_best": sum(1 for x in gaps if abs(x) <= 1e-9),
                        "mean_gap": sum(gaps) / len(gaps) if gaps else None,
                        "max_gap": max(gaps) if gaps else None,
                        "improvements": count["improvement"],
                        "bugs": sum(count[b] for b in BUGS),
                        "time": sum(x["wall_time"] for x in ran)})
    return out


def run_library_verify(cfg: LibraryVerifyConfig) -> dict:
    """Run the solvers on the library's selected instances; the report (JSON-ready):
    ``instances``, ``proved``, per group and solver the summary, every bug and improvement,
    ``ok`` (no bug)."""
    lib = load(cfg.path).select(cfg.classes, cfg.ids, cfg.max_stages)
    specs = resolve_solvers(cfg.solvers)
    labels = [s[0] for s in specs]
    tasks = [(i.to_dict(), specs, cfg.time_limit, tuple(cfg.max_stages_for))
             for i in lib.instances]
    solvers.names()  # every solver module imported before any worker starts
    t0 = time.perf_counter()
    try:
        rows = parallel_map(verify_instance, tasks, workers=cfg.workers, progress=cfg.progress,
                            desc="library")
    except TaskFailedError as e:
        if isinstance(e.error, SolverOptionError):
            raise e.error from None
        raise
    flat = [(r, x) for r in rows for x in r["results"]]
    bugs = [{"id": r["id"], "solver": x["solver"], "outcome": x["outcome"],
             "detail": x["detail"]} for r, x in flat if x["outcome"] in BUGS]
    better = [{"id": r["id"], "solver": x["solver"], "makespan": x["makespan"],
               "best": r["best"]} for r, x in flat if x["outcome"] == "improvement"]
    return {"library": lib.source, "instances": len(lib), "proved": lib.proved,
            "classes": lib.classes(), "solvers": labels, "time_limit": cfg.time_limit,
            "solves": sum(1 for _, x in flat if x["outcome"] not in ("skipped", "refused")),
            "summary": _summary(rows, labels), "bugs": bugs, "improvements": better,
            "ok": not bugs, "wall_time": time.perf_counter() - t0, "details": rows}


def _pct(x) -> str:
    return "-" if x is None else f"{100 * (0.0 if abs(x) < 5e-10 else x):.2f}%"


def markdown_table(report: dict) -> list:
    """One row per solver, one column per group of classes: the mean gap to the best known
    and, in parentheses, schedules found / instances it ran on (``-``: none ran)."""
    groups = list(dict.fromkeys(s["group"] for s in report["summary"]))
    cell = {(s["group"], s["solver"]): s for s in report["summary"]}
    lines = ["| solver | " + " | ".join(groups) + " |", "|---|" + "---|" * len(groups)]
    for label in report["solvers"]:
        row = []
        for g in groups:
            s = cell.get((g, label))
            row.append("-" if s is None else f"{_pct(s['mean_gap'])} ({s['solved']}/{s['ran']})")
        lines.append(f"| {label} | " + " | ".join(row) + " |")
    return lines


def format_table(report: dict, markdown: bool = False) -> str:
    """Per group of classes and solver: instances it ran on, schedules found, at the best
    known, mean and max gap, improvements, bugs; then the bugs.  ``markdown``: the pivot of
    :func:`markdown_table` instead."""
    head = ("class", "solver", "ran", "solved", "at best", "mean gap", "max gap", "better",
            "bugs")
    rows = [(s["group"], s["solver"], str(s["ran"]), str(s["solved"]), str(s["at_best"]),
             _pct(s["mean_gap"]), _pct(s["max_gap"]), str(s["improvements"]), str(s["bugs"]))
            for s in report["summary"]]
    if markdown:
        lines = markdown_table(report)
    else:
        widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(head)]
        fmt = lambda r: "  ".join(v.ljust(w) if i < 2 else v.rjust(w)  # noqa: E731
                                  for i, (v, w) in enumerate(zip(r, widths)))
        lines = [fmt(head), "  ".join("-" * w for w in widths)] + [fmt(r) for r in rows]
    lines.append("")
    lines.append(f"{report['instances']} instances ({report['proved']} with a proved optimum), "
                 f"{report['solves']} solves in {report['wall_time']:.1f} s, time limit "
                 f"{report['time_limit']} s; gap = makespan / best known - 1")
    if report["improvements"]:
        lines.append(f"{len(report['improvements'])} improvement(s) over the best known: "
                     + ", ".join(f"{x['id']} by {x['solver']} ({x['makespan']:.6g} < "
                                 f"{x['best']:.6g})" for x in report["improvements"][:10]))
    if report["bugs"]:
        lines.append(f"{len(report['bugs'])} BUG(S):")
        lines += [f"  [{b['solver']}] {b['id']}: {b['outcome']}: {b['detail']}"
                  for b in report["bugs"][:30]]
    else:
        lines.append("no bug: every schedule replays, no false optimum, nothing below a proved bound")
    return "\n".join(lines)
