"""The report of a verify run (``remat verify``): the summary of its records by relation and
solver, and the table it prints."""
from __future__ import annotations

from remat_theory.model.solution import OPTIMAL, TIME_LIMIT


def summarize(chains: list, solver_names) -> list:
    """One row per solver: instances it ran on, schedules found, proven optima, instances
    where it took part in no violation, gap to the proven optimum (max and mean over the
    instances that have one), total solve time."""
    rows = []
    for name in solver_names:
        n = feasible = proven = agree = 0
        gaps = []
        wall = 0.0
        unproven = 0
        for c in chains:
            for inst in c["instances"]:
                recs = [r for r in inst["results"] if r["solver"] == name]
                if not recs:
                    continue
                r = recs[0]
                n += 1
                wall += r["wall_time"] or 0.0
                if r["schedule_class"] is not None:
                    feasible += 1
                if r["status"] == OPTIMAL:
                    proven += 1
                if r["status"] == TIME_LIMIT:
                    unproven += 1
                if not any(name in v["solvers"] for v in inst["violations"]):
                    agree += 1
                if r.get("gap") is not None:
                    gaps.append(r["gap"])
        info_exact = any(r["exact"] for c in chains for i in c["instances"]
                         for r in i["results"] if r["solver"] == name)
        rows.append({"solver": name, "exact": info_exact, "instances": n, "feasible": feasible,
                     "proven": proven, "time_limited": unproven,
                     "agreements": agree, "disagreements": n - agree,
                     "gap_count": len(gaps), "max_gap": max(gaps) if gaps else None,
                     "mean_gap": (sum(gaps) / len(gaps)) if gaps else None, "time": wall})
    return rows


def _pct(x) -> str:
    if x is None:
        return "-"
    if abs(x) < 5e-7:  # float noise around an exact tie: do not print "-0.00%"
        x = 0.0
    return f"{100 * x:.2f}%"


def format_table(report: dict) -> str:
    """The summary as a fixed-width text table, followed by the violations (if any)."""
    head = ("solver", "kind", "instances", "feasible", "proven", "agree", "max gap",
            "mean gap", "time (s)")
    rows = []
    for r in report["summary"]:
        rows.append((r["solver"], "exact" if r["exact"] else "heuristic", str(r["instances"]),
                     str(r["feasible"]), str(r["proven"]),
                     f"{r['agreements']}/{r['instances']}", _pct(r["max_gap"]),
                     _pct(r["mean_gap"]), f"{r['time']:.2f}"))
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h)
              for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) if i < 2 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths)))]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append("  ".join(v.ljust(w) if i < 2 else v.rjust(w)
                               for i, (v, w) in enumerate(zip(row, widths))))
    lines.append("")
    lines.append(f"{report['chains']} chains, {report['instances']} instances, "
                 f"{report['solves']} solves in {report['wall_time']:.1f} s; gap = makespan / "
                 "proven optimum over all schedules - 1")
    v = report["violations"]
    if v:
        lines.append(f"{len(v)} VIOLATION(S):")
        for x in v[:30]:
            lines.append(f"  [{', '.join(x['solvers'])}] {x['chain']} budget {x['budget']}: "
                         f"{x['relation']}: {x['detail']}")
        if len(v) > 30:
            lines.append(f"  ... and {len(v) - 30} more (see --json)")
    else:
        lines.append("no violation: every schedule valid, every relation holds")
    if any((r["max_gap"] is not None and r["max_gap"] < -5e-7) or
           (r["mean_gap"] is not None and r["mean_gap"] < -5e-7) for r in report["summary"]):
        lines.append("(a negative gap is a schedule with Drop ops or transfers, outside the "
                     "canonical model the optimum is taken in)")
    return "\n".join(lines)
