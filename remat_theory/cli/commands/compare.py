"""``remat compare CHAIN.json --budget B`` (or ``--budgets B1,B2,...``) [--json]

Runs every registered solver on the chain at each budget and prints one table per budget:
status, makespan, ratio to the reference, peak memory and solve time.  The answer to "how
far from optimal is the strategy I use today?".

The reference is the best *proven* value available, said explicitly in the output:

* the optimum over all schedules of the model, when some solver proves it (the ILP within
  ``--time-limit``, exhaustive search, or store-all when it fits);
* otherwise the best value of the exact solvers restricted to a class (the persistent DPs),
  labelled as such: it is an upper bound on the optimum, so a ratio below 1 is possible and
  means a heuristic found a schedule outside that class;
* otherwise none (ratios are not printed).

A solver with a size guard (a ``max_stages`` option, e.g. exhaustive search, exponential in
L) runs with the guard raised to its registered ``reference_max_stages`` (the chains on which
it serves as the exact reference in seconds) and is skipped beyond, which the output says.  Solvers that accept ``time_limit`` (exhaustive search too) get ``--time-limit``.
Schedules that use the explicit-deletion extension (``Drop``, e.g. ``dtr``) are marked:
they belong to a larger class than the reference's.
"""
from __future__ import annotations

import argparse
import sys

import solvers

from remat_theory.analysis.progress import Progress
from remat_theory.model.errors import RematError, SolverContractError
from remat_theory.model.solution import CLASS_ALL, INFEASIBLE, OPTIMAL
from remat_theory.cli.render import printable
from remat_theory.cli.commands._common import (budget_arg, load_chain, positive_float, print_json,
                                               progress_wanted, stdout_to_stderr)

NAME = "compare"
ORDER = 25
HELP = "run every registered solver on a chain at a budget (or a sweep) and compare them"

ILP = "ilp"
DEFAULT_TIME_LIMIT = 60.0


def budget_list(text: str) -> list[int]:
    """argparse type for ``--budgets``: comma-separated non-negative integers (bytes)."""
    parts = [p.strip() for p in text.split(",")]
    if not parts or any(not p for p in parts):
        raise argparse.ArgumentTypeError(f"budgets {text!r}: expected integers separated by commas")
    return [budget_arg(p) for p in parts]


def add_arguments(p) -> None:
    p.add_argument("chain", metavar="CHAIN.json", help="chain file (remat-chain/1 layout)")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--budget", type=budget_arg, help="memory budget in bytes")
    g.add_argument("--budgets", type=budget_list, help="several budgets, comma-separated (a sweep)")
    p.add_argument("--time-limit", type=positive_float, default=DEFAULT_TIME_LIMIT, dest="time_limit",
                   help=f"seconds for each solver that takes a time limit (default {DEFAULT_TIME_LIMIT:g})")
    p.add_argument("--solvers", default=None,
                   help="comma-separated solver names, variant labels or package.module:function "
                        "paths to run (default: every registered solver)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _selected(spec: str | None) -> list[str]:
    known = solvers.names()
    if spec is None:
        return known
    chosen = [s.strip() for s in spec.split(",") if s.strip()]
    if not chosen:
        raise RematError("--solvers is empty")
    for s in chosen:
        solvers.get(s)  # raises naming the unknown solver
    return chosen


def _row(name: str, info, sol=None, error: str | None = None, skipped: str | None = None) -> dict:
    row = {"solver": name, "exact": info.exact, "status": None, "makespan": None, "ratio": None,
           "peak_memory": None, "wall_time": None, "optimal_for": None, "min_budget": None,
           "uses_drop": False, "message": ""}
    if skipped is not None:
        row.update(status="skipped", message=skipped)
    elif error is not None:
        row.update(status="error", message=error)
    else:
        row.update(status=sol.status, makespan=sol.makespan, peak_memory=sol.peak_memory,
                   wall_time=sol.wall_time, optimal_for=sol.optimal_for, min_budget=sol.min_budget,
                   uses_drop=sol.allows_drop, message=sol.message)
    return row


def reference(rows: list[dict]) -> dict:
    """The best proven value among the rows, and what it is (see the module docstring)."""
    proven = [r for r in rows if r["status"] == OPTIMAL and r["optimal_for"] == CLASS_ALL
              and r["makespan"] is not None]
    if proven:
        best = min(r["makespan"] for r in proven)
        by = [r["solver"] for r in proven]
        source = ILP if ILP in by else by[0]
        return {"makespan": best, "source": source, "proven_optimal": True,
                "description": f"optimum over all schedules, proven by {', '.join(by)}"}
    exact = [r for r in rows if r["exact"] and r["status"] == OPTIMAL and r["makespan"] is not None]
    if exact:
        r = min(exact, key=lambda r: r["makespan"])
        return {"makespan": r["makespan"], "source": r["solver"], "proven_optimal": False,
                "description": (f"best exact-solver value: {r['solver']}, optimal among "
                                f"{r['optimal_for']} schedules only; no optimum over all schedules "
                                f"was proven (within the time limit), so ratios are relative to an "
                                f"upper bound")}
    proofs = [r for r in rows if r["exact"] and r["status"] == INFEASIBLE
              and r["optimal_for"] == CLASS_ALL]
    if proofs:
        by = [r["solver"] for r in proofs]
        mins = sorted({r["min_budget"] for r in proofs if r["min_budget"] is not None})
        smallest = f"; the smallest feasible budget is {mins[0]}" if mins else ""
        return {"makespan": None, "source": by[0], "proven_optimal": False,
                "proven_infeasible": True, "smallest_feasible": mins[0] if mins else None,
                "description": f"no schedule fits this budget: proven over all schedules by "
                               f"{', '.join(by)}{smallest}"}
    return {"makespan": None, "source": None, "proven_optimal": False,
            "description": "no exact value available: ratios are not computed"}


def run_one(chain, budget: int, name: str, time_limit: float | None) -> dict:
    """One solver's row: ``time_limit`` passed when the solver takes one; a size-guarded
    solver (exhaustive search) run up to its registered ``reference_max_stages`` and skipped
    above; a solver's error kept in its row."""
    info = solvers.get(name)
    guarded = "max_stages" in info.options and info.reference_max_stages is not None
    if guarded and chain.length > info.reference_max_stages:
        # a size guard is there because the search is exponential in L
        return _row(name, info, skipped=f"skipped: {name} search is exponential and runs "
                                        f"only when L <= {info.reference_max_stages} "
                                        f"(L = {chain.length})")
    opts = {"max_stages": info.reference_max_stages} if guarded else {}
    if time_limit is not None and "time_limit" in info.options:
        opts["time_limit"] = time_limit
    try:
        with stdout_to_stderr():
            sol = solvers.solve(chain, budget, name, **opts)
    except (RematError, SolverContractError) as e:
        return _row(name, info, error=f"{type(e).__name__}: {e}")
    return _row(name, info, sol)


def compare_budget(chain, budget: int, names: list[str], time_limit: float | None,
                   bar=None) -> dict:
    """Every solver of ``names`` at ``budget``, the reference and the ratios; ``bar`` (a
    :class:`~remat_theory.analysis.progress.Progress`) advances after each solver."""
    rows = []
    for name in names:
        if bar is not None:
            bar.desc = f"remat compare: {name} at {budget}"
        rows.append(run_one(chain, budget, name, time_limit))
        if bar is not None:
            bar.update()
    ref = reference(rows)
    for r in rows:
        if ref["makespan"] and r["makespan"] is not None:
            r["ratio"] = r["makespan"] / ref["makespan"]
        elif ref["makespan"] == 0 and r["makespan"] is not None:
            r["ratio"] = 1.0 if r["makespan"] == 0 else None
    return {"budget": budget, "reference": ref, "results": rows}


def _fmt(v, spec: str) -> str:
    if v is None:
        width = "".join(ch for ch in spec.split(".")[0] if ch.isdigit())
        return "-".rjust(int(width or 1))
    return format(v, spec)


def print_table(chain, res: dict) -> None:
    budget, ref = res["budget"], res["reference"]
    print(f"budget {budget} (chain {printable(chain.name)}: {chain.length} stages, store-all needs "
          f"{chain.store_all_memory()}, lower bound {chain.memory_lower_bound()})")
    rows = sorted(res["results"], key=lambda r: (r["makespan"] is None, r["makespan"] or 0, r["solver"]))
    w = max([len(r["solver"]) for r in rows] + [6])
    print(f"  {'solver':<{w}}  {'status':<10} {'makespan':>12} {'ratio':>7} {'peak':>10} {'time s':>8}  note")
    for r in rows:
        note = r["message"]
        if r["uses_drop"]:
            note = "uses Drop (explicit deletions); " + note
        if r["status"] in ("infeasible",) and r["min_budget"] is not None:
            note = f"needs >= {r['min_budget']}; " + note
        print(f"  {r['solver']:<{w}}  {r['status']:<10} {_fmt(r['makespan'], '12.6g')} "
              f"{_fmt(r['ratio'], '7.4f')} {_fmt(r['peak_memory'], '10d')} "
              f"{_fmt(r['wall_time'], '8.3f')}  {printable(note)}")
    if ref["makespan"] is not None:
        print(f"  reference {ref['makespan']:.6g}: {ref['description']}")
    else:
        print(f"  reference: {ref['description']}")


def run(args) -> int:
    chain = load_chain(args.chain)
    names = _selected(args.solvers)
    budgets = [args.budget] if args.budget is not None else args.budgets
    with Progress(total=len(names) * len(budgets), desc="remat compare",
                  enabled=progress_wanted(args.json)) as bar:
        results = [compare_budget(chain, b, names, args.time_limit, bar) for b in budgets]
    errors = sorted({r["solver"] for res in results for r in res["results"] if r["status"] == "error"})
    if args.json:
        print_json({"chain": chain.name, "stages": chain.length, "time_limit": args.time_limit,
                    "comparisons": results})
    else:
        for k, res in enumerate(results):
            if k:
                print()
            print_table(chain, res)
    if errors:
        print(f"remat: error: solver(s) {', '.join(errors)} raised an error (see the table)",
              file=sys.stderr)
        return 1
    if all(res["reference"].get("proven_infeasible") for res in results):
        ref = results[0]["reference"]
        which = "every budget" if len(results) > 1 else f"budget {results[0]['budget']}"
        print(f"remat: error: {which} is below what any schedule needs: "
              f"{ref['description'].split(': ', 1)[1]}", file=sys.stderr)
        return 2
    return 0
