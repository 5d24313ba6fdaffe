"""``remat solve CHAIN.json --budget B --solver NAME [--json]``"""
from __future__ import annotations

import solvers

from remat_theory.model.solution import INFEASIBLE
from remat_theory.cli.commands._common import (budget_arg, check_budget_feasible_at_all, load_chain, positive_float,
                      positive_int, print_json)

NAME = "solve"
ORDER = 20
HELP = "find a schedule for a chain under a memory budget with a named solver"


def add_arguments(p) -> None:
    p.add_argument("chain", metavar="CHAIN.json", help="chain file (remat-chain/1 layout)")
    p.add_argument("--budget", type=budget_arg, required=True, help="memory budget in bytes")
    p.add_argument("--solver", default="store-all",
                   help="solver name or variant label (see `remat solvers`), or a solver of "
                        "your own as package.module:function")
    p.add_argument("--slots", type=positive_int, default=None,
                   help="memory slots for slot-discretized solvers (sizes rounded up)")
    p.add_argument("--time-limit", type=positive_float, default=None, dest="time_limit",
                   help="time limit in seconds for solvers that take one")
    p.add_argument("--option", "-o", action="append", default=[], metavar="KEY=VALUE",
                   type=option_arg, dest="options",
                   help="any other solver option, e.g. -o passes=1 -o pairs=true (ilp), "
                        "-o schedule_class=weak (exhaustive); values are read as JSON "
                        "when they parse, else as text")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def option_arg(text: str) -> tuple:
    """argparse type for ``KEY=VALUE``."""
    import argparse
    import json

    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"option {text!r} is not KEY=VALUE")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def long_solve_note(chain, solver: str, options: dict, budget: int | None = None) -> str | None:
    """The note the solver registered for a solve that may run very long (e.g. the default
    ``ilp`` on a chain beyond its quick range with no time limit), or None."""
    return solvers.registry.note(chain, budget, solver, options)


def run(args) -> int:
    import sys

    chain = load_chain(args.chain)
    check_budget_feasible_at_all(chain, args.budget)
    options = dict(args.options)
    if args.slots is not None:
        options["slots"] = args.slots
    if args.time_limit is not None:
        options["time_limit"] = args.time_limit
    note = long_solve_note(chain, args.solver, options, args.budget)
    if note:
        print(note, file=sys.stderr, flush=True)
    sol = solvers.solve(chain, args.budget, args.solver, **options)
    if args.json:
        print_json(sol.to_dict())
    else:
        print(f"solver {sol.solver}: {sol.status}" + (f" ({sol.message})" if sol.message else ""))
        if sol.schedule is not None:
            print(f"makespan {sol.makespan:.6g}, peak memory {sol.peak_memory} (budget {sol.budget})")
            if sol.bound is not None:
                print(f"lower bound {sol.bound:.6g} (optimal for: {sol.optimal_for})")
            print(f"schedule: {sol.schedule}")
        print(f"solve time {sol.wall_time:.3g} s")
    if sol.status == INFEASIBLE:
        if not args.json:
            smallest = f"; the smallest feasible budget for it is {sol.min_budget}" if sol.min_budget is not None else ""
            print(f"remat: error: budget {args.budget} is infeasible for solver {sol.solver}{smallest}",
                  file=sys.stderr)
        return 2
    return 0
