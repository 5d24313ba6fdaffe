"""``remat solvers``: list the registry (solvers, their variants and their facts)."""
from __future__ import annotations

import solvers
from solvers import registry

from remat_theory.cli.commands._common import print_json

NAME = "solvers"
ORDER = 30
HELP = "list the registered solvers and their variants"


def add_arguments(p) -> None:
    p.add_argument("--json", action="store_true", help="print a JSON list")


def _entry(i) -> dict:
    return {"name": i.name, "exact": i.exact, "optimal_for": i.optimal_for,
            "options": list(i.options), "description": i.description,
            "max_stages": i.max_stages, "reference_max_stages": i.reference_max_stages,
            "may_drop": i.may_drop, "classes": list(i.classes), "external": i.external,
            "variants": {v.label: v.option_dict for v in i.variants}}


def run(args) -> int:
    infos = [solvers.get(n) for n in solvers.names()]
    if args.json:
        print_json([_entry(i) for i in infos])
        return 0
    w = max(len(i.name) for i in infos)
    for i in infos:
        kind = f"exact ({i.optimal_for})" if i.exact else "heuristic"
        print(f"{i.name:<{w}}  {kind:<26} {i.description}")
    vs = registry.variants()
    if vs:
        print("\nvariants (a label for a solver with fixed options):")
        wv = max(len(label) for label in vs)
        for label, v in vs.items():
            opts = ", ".join(f"{k}={val!r}" for k, val in v.options)
            print(f"{label:<{wv}}  {v.solver} with {opts}")
    return 0
