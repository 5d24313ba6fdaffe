"""``remat solve CHAIN.json --budget B [--solver NAME] [--time-limit S] [--json]``

Without ``--solver`` the ``auto`` solver answers: the best exact answer the chain's size
allows within the time limit (``solvers/auto.py``), saying which solver answered and what
it proved."""
from __future__ import annotations

import importlib
import math
import os
import time

import solvers
from solvers.auto import DEFAULT_TIME_LIMIT as AUTO_TIME_LIMIT

from remat_theory.model.errors import AT_LEAST, RematError, Remedy, SolverLimitError
from remat_theory.model.solution import INFEASIBLE
from remat_theory.cli.commands._common import (Ticker, budget_arg, load_chain, positive_float,
                                               positive_int, print_json, progress_wanted)
from remat_theory.cli.render import note_text, printable

NAME = "solve"
ORDER = 20
HELP = "find a schedule for a chain under a memory budget (default solver: auto)"
AUTO = "auto"
#: Seconds of start-up and loading that ``--time-limit`` ignores; beyond, they are taken off
#: the limit given to the solver (a chain of a million stages takes seconds to load; in a
#: running process a collection of the garbage collector alone can take a tenth of one).
LOAD_ALLOWANCE_S = 0.25
DEFAULT_SOLVER = AUTO
#: Bytes of chain file read and checked per second, between what was measured on the shared
#: 2-core machine (a 34 MB file of 1,000,000 stages: 1.4 s at a load of about 1, 2.6-3.7 s
#: at a load of 6.5-10): with ``--time-limit``, a file whose reading alone would take the
#: rest of the limit is refused before it is read (benchmarks/bench_scale.py).
READ_BYTES_PER_S = 15e6
#: Files read faster than this (seconds, estimated) are never refused: whatever the limit,
#: the answer (``time_limit`` at worst) comes within its 2 s of allowed overrun.
READ_REFUSE_MIN_S = 0.5


def add_arguments(p) -> None:
    p.add_argument("chain", metavar="CHAIN.json", help="chain file (remat-chain/1 layout)")
    p.add_argument("--budget", type=budget_arg, required=True, help="memory budget in bytes")
    p.add_argument("--solver", default=DEFAULT_SOLVER,
                   help=f"solver name or variant label (see `remat solvers`), or a solver of "
                        f"your own as package.module:function; default {DEFAULT_SOLVER}: the "
                        f"best exact answer within the time limit (default "
                        f"{AUTO_TIME_LIMIT:g} s): store-all when it fits, the certified ilp on "
                        f"short chains, else dp-weak, else dp (with slots when needed); the "
                        f"output says which solver answered and what it proved")
    p.add_argument("--slots", type=positive_int, default=None,
                   help="memory slots for slot-discretized solvers (sizes rounded up)")
    p.add_argument("--time-limit", type=positive_float, default=None, dest="time_limit",
                   help="time limit in seconds, passed to the solver when it takes one "
                        "(auto, ilp, exhaustive, ...; see `remat solvers`); a solver that "
                        "takes none runs to the end, and a note says so")
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
    ``ilp`` on a chain beyond its quick range with no time limit), as a ``remat: note:``
    line in this command's syntax, or None."""
    note = solvers.registry.note(chain, budget, solver, options)
    return None if note is None else note_text(note, NAME)


def infeasible_line(sol, budget: int, slots: int | None) -> str:
    """The error line of an infeasible answer: the smallest feasible budget, and, when the
    solver counted memory in slots and the budget is feasible in exact memory, that the
    rounding to slots is the cause."""
    line = f"remat: error: budget {budget} is infeasible for solver {sol.solver}"
    if sol.optimal_for not in (None, "none"):  # what the answer is about: its class
        line += f" (over its class {sol.optimal_for})"
    exact_min = sol.min_budget
    if slots is not None and sol.info.get("memory") == "slots":
        unit = sol.info.get("slot_size")
        rounding = (f"at --slots {slots} every size is rounded up to whole slots"
                    + (f" of {unit:.6g} bytes" if unit else f" of budget/{slots} bytes"))
        if exact_min is not None and budget >= exact_min:
            return (f"{line} only because {rounding} (in exact memory the smallest feasible "
                    f"budget is {exact_min}, which this budget meets); use more slots, or leave "
                    f"out --slots")
        return f"{line} ({rounding})" + (
            f"; the smallest feasible budget in exact memory is {exact_min}"
            if exact_min is not None else "")
    if exact_min is not None and budget >= exact_min:
        # the smallest budget is over more schedules than the solver's answer (ilp-offload
        # with a small max_ops: only schedules of at most N ops were searched)
        return (f"{line}, but a schedule outside that class fits (the smallest feasible "
                f"budget is {exact_min}, which this budget meets)")
    if exact_min is not None:
        line += f"; the smallest feasible budget for it is {exact_min}"
    return line


def refuse_slow_read(path: str, solver: str, limit: float, started: float) -> None:
    """Raise :class:`SolverLimitError` (exit code 2, naming a limit that would do) when the
    time spent starting plus the estimated time to read the chain file (its size at
    :data:`READ_BYTES_PER_S`, at least :data:`READ_REFUSE_MIN_S`) is over ``limit``: the
    answer would come past the limit before any solver ran.  A file that cannot be read is left to the loader's error."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return
    read_s = size / READ_BYTES_PER_S
    spent = time.perf_counter() - started
    if read_s < READ_REFUSE_MIN_S or spent + read_s <= limit:
        return
    need = math.ceil(2 * (spent + read_s))
    raise SolverLimitError(
        f"solver {solver!r}: reading the chain file {os.path.basename(path)!r} "
        f"({size / 1e6:.1f} MB) takes about {read_s:.1f} s, and starting took {spent:.1f} s: "
        f"past --time-limit {limit:g} before any solver runs; refused before reading it",
        solver=solver, estimate_s=spent + read_s,
        remedies=(Remedy(options=(("time_limit", AT_LEAST, need),)),))


def _takes_time_limit(solver: str) -> bool:
    """Whether ``solver`` applies a time limit (False for an unknown one: its error comes
    after the chain's, as always)."""
    try:
        return "time_limit" in solvers.get(solver).options
    except RematError:
        return False


def run(args) -> int:
    import sys

    # --time-limit is the whole command's: from the process's start when run as a program
    # (start-up, imports and loading the chain count), else from here
    process_start = importlib.import_module("remat_theory.cli.main").PROCESS_START
    takes = (args.time_limit is not None and not solvers.registry.is_path(args.solver)
             and _takes_time_limit(args.solver))  # the first call imports the solver modules
    # in a running process those imports are start-up: not counted
    started = process_start or time.perf_counter()
    if takes:
        refuse_slow_read(args.chain, args.solver, args.time_limit, started)
    chain = load_chain(args.chain)
    options = dict(args.options)
    t_get = time.perf_counter()
    info = solvers.get(args.solver)  # the first call imports the solver modules
    if process_start is None:  # in a running process that import is start-up: not counted
        started += time.perf_counter() - t_get
    if args.slots is not None:
        if "slots" not in info.options:
            takes = [n for n in solvers.names() if "slots" in solvers.get(n).options]
            raise RematError(f"solver {args.solver!r} does not take option 'slots' (--slots); "
                             f"solvers that do: {', '.join(takes)}")
        options["slots"] = args.slots
    notes = []
    if args.time_limit is not None and "time_limit" in info.options:
        options["time_limit"] = args.time_limit
    solvers.registry.checked_options(chain, args.solver, options)  # before any work
    solvers.check_feasible(chain, args.budget)
    if args.time_limit is not None:
        if "time_limit" in info.options:
            spent = time.perf_counter() - started
            if spent > LOAD_ALLOWANCE_S:
                options["time_limit"] = max(0.01, round(args.time_limit - spent, 2))
            if spent >= 0.1 * args.time_limit:
                notes.append(f"remat: note: {spent:.2g} s of --time-limit "
                             f"{args.time_limit:g} went to starting and loading the chain")
        else:
            notes.append(f"remat: note: solver {args.solver!r} takes no time limit; "
                         f"--time-limit {args.time_limit:g} was not applied")
    note = long_solve_note(chain, args.solver, options, args.budget)
    if note:
        notes.append(note)
    limit = options.get("time_limit", AUTO_TIME_LIMIT if args.solver == AUTO else None)
    with Ticker(f"remat solve: {args.solver}", limit=limit,
                enabled=progress_wanted(args.json), notes=notes) as ticker:
        sol = solvers.solve(chain, args.budget, args.solver, **options)
    if sol.status != INFEASIBLE:
        ticker.print_notes()
    if args.json:
        print_json(sol.to_dict())
    else:
        print(f"solver {sol.solver}: {sol.status}"
              + (f" ({printable(sol.message)})" if sol.message else ""))
        if sol.schedule is not None:
            print(f"makespan {sol.makespan:.6g}, peak memory {sol.peak_memory} (budget {sol.budget})")
            if sol.bound is not None:
                over = (sol.info or {}).get("bound_over", sol.optimal_for)
                print(f"lower bound {sol.bound:.6g} (optimal for: {sol.optimal_for})"
                      if over == sol.optimal_for else
                      f"lower bound {sol.bound:.6g} over {over} (optimal for: "
                      f"{sol.optimal_for})")
            print(f"schedule: {sol.schedule}")
        print(f"solve time {sol.wall_time:.3g} s")
    if sol.status == INFEASIBLE:
        print(infeasible_line(sol, args.budget, args.slots), file=sys.stderr)
        return 2
    return 0
