"""``remat solvers``: list the registry."""
from __future__ import annotations

import solvers

from remat_theory.cli.commands._common import print_json

NAME = "solvers"
ORDER = 30
HELP = "list the registered solvers"


def add_arguments(p) -> None:
    p.add_argument("--json", action="store_true", help="print a JSON list")


def run(args) -> int:
    infos = [solvers.get(n) for n in solvers.names()]
    if args.json:
        print_json([{"name": i.name, "exact": i.exact, "optimal_for": i.optimal_for,
                     "options": list(i.options), "description": i.description} for i in infos])
        return 0
    w = max(len(i.name) for i in infos)
    for i in infos:
        kind = f"exact ({i.optimal_for})" if i.exact else "heuristic"
        print(f"{i.name:<{w}}  {kind:<26} {i.description}")
    return 0
