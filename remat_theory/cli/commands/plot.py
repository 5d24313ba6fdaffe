"""``remat plot``: the Pareto frontier (makespan against budget) of every solver on one chain,
and the memory profile over time of one schedule, as a PNG (needs matplotlib)."""
from __future__ import annotations

import re
import sys

from remat_theory.analysis import families
from remat_theory.model.errors import RematError
from remat_theory.cli.commands._common import (IMAGE_SUFFIXES, budget_arg, check_output_file,
                                               default_output_dir, load_chain, name_list,
                                               positive_float, positive_int, print_json,
                                               seed_arg, stdout_to_stderr)

NAME = "plot"
ORDER = 70
HELP = "plot makespan against budget for every solver on a chain, and one memory profile"


def add_arguments(p) -> None:
    p.add_argument("chain", metavar="CHAIN.json", nargs="?", default=None,
                   help="chain file (or use --family)")
    p.add_argument("--family", default=None,
                   help=f"instead of a file: a generated chain ({', '.join(families.FAMILIES)})")
    p.add_argument("--stages", type=positive_int, default=7, help="length for --family (default 7)")
    p.add_argument("--seed", type=seed_arg, default=0, help="seed for --family (default 0)")
    p.add_argument("--out", default=None, metavar="FILE.png",
                   help=f"output image ({', '.join(IMAGE_SUFFIXES)}; default: "
                        f"<chain name>_pareto.png in a new folder under the system's temporary "
                        f"folder, whose path is printed)")
    p.add_argument("--solvers", type=name_list, default=None,
                   help="solvers to plot (default: every registered one; a size-guarded one "
                        "such as exhaustive only up to its max_stages, `remat solvers --json`)")
    p.add_argument("--schedule-solver", default=None, dest="schedule_solver", metavar="NAME",
                   help="solver whose schedule's memory profile is drawn (default: the best "
                        "exact one available)")
    p.add_argument("--budget", type=budget_arg, default=None,
                   help="budget of that schedule (default: a quarter of the way from the "
                        "smallest budget it fits to store-all)")
    p.add_argument("--no-profile", action="store_true", dest="no_profile",
                   help="draw the Pareto frontier only")
    p.add_argument("--max-points", type=positive_int, default=80, dest="max_points",
                   help="budgets per solver (default 80; every integer budget when fewer)")
    p.add_argument("--time-limit", type=positive_float, default=30.0, dest="time_limit",
                   help="seconds per solve for solvers that take a limit (default 30)")
    p.add_argument("--workers", type=positive_int, default=None)
    p.add_argument("--json", action="store_true", help="also print the plotted data as JSON")


def run(args) -> int:
    import solvers

    from remat_theory.analysis import plotting

    if (args.chain is None) == (args.family is None):
        raise RematError("give either CHAIN.json or --family NAME (not both, not neither)")
    if args.out is not None:
        check_output_file(args.out, "--out", IMAGE_SUFFIXES)
    chain = load_chain(args.chain) if args.chain else families.make(args.family, args.stages, args.seed)
    plotting._pyplot()  # fail early, before the solves, when matplotlib is missing
    names = list(args.solvers) if args.solvers else plotting.default_solvers(chain)
    budgets = plotting.pareto_budgets(chain, args.max_points)
    with stdout_to_stderr(args.json):  # keep native solver banners out of the JSON
        pareto = plotting.pareto_data(chain, names, budgets, time_limit=args.time_limit,
                                      workers=args.workers, progress=not args.json)
    for e in pareto["errors"]:
        print(f"remat plot: {e['solver']} at budget {e['budget']}: {e['error']}", file=sys.stderr)
    profile = None
    title = ""
    if not args.no_profile:
        name = args.schedule_solver
        if name is None:
            order = ["exhaustive", "ilp", "dp-weak", "dp", "store-all"]
            name = next((n for n in order if n in names), names[0])
        solvers.get(name)
        budget = args.budget
        if budget is None:
            pts = pareto["series"].get(name) or []
            fits = [b for b, m in pts if m is not None]
            low = min(fits) if fits else chain.store_all_memory()
            g = chain.size_gcd()
            budget = (low + (chain.store_all_memory() - low) // 4) // g * g
            budget = max(budget, low)
        with stdout_to_stderr(args.json):
            sol = solvers.solve(chain, budget, name)
        if sol.schedule is None:
            raise RematError(f"{name} finds no schedule at budget {budget} ({sol.status}); "
                             f"give a larger --budget" + (f" (at least {sol.min_budget})"
                                                          if sol.min_budget else ""))
        profile = plotting.profile_series(chain, sol.schedule, budget)
        profile["budget"] = budget
        title = (f"{name} at budget {budget}: makespan {sol.makespan:.6g} "
                 f"({sol.status}), peak {sol.peak_memory}")
    if args.out is not None:
        out = args.out
    else:
        stem = re.sub(r"[^A-Za-z0-9._-]+", "_", chain.name or "chain").strip("._") or "chain"
        out = default_output_dir("plot") / f"{stem[:80]}_pareto.png"
    path = plotting.plot(chain, pareto, out, profile=profile, profile_title=title)
    if args.json:
        print_json({"chain": chain.to_dict(), "budgets": budgets, "series": pareto["series"],
                    "errors": pareto["errors"], "profile": profile})
    print(f"wrote {path}", file=sys.stderr)
    return 0
