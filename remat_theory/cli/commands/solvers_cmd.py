"""``remat solvers [NAME]``: list the registry (solvers, their variants and their facts), or
one solver's facts and the help of each of its options (as scipy's ``show_options``)."""
from __future__ import annotations

import solvers
from solvers import registry

from remat_theory.cli.commands._common import print_json

NAME = "solvers"
ORDER = 30
HELP = "list the registered solvers and their variants, or one solver's options"


def add_arguments(p) -> None:
    p.add_argument("name", nargs="?", default=None,
                   help="one solver (or variant label): its facts and each option's type, "
                        "range, default and meaning")
    p.add_argument("--json", action="store_true", help="print a JSON list (one object with NAME)")


def _entry(i) -> dict:
    return {"name": i.name, "exact": i.exact, "optimal_for": i.optimal_for,
            "options": list(i.options), "description": i.description,
            "max_stages": i.max_stages, "reference_max_stages": i.reference_max_stages,
            "may_drop": i.may_drop, "classes": list(i.classes), "external": i.external,
            "variants": {v.label: v.option_dict for v in i.variants},
            "supports": list(i.supports)}


def _detail(i) -> dict:
    d = _entry(i)
    d["option_help"] = {
        name: {"type": i.schema[name].type_text() if name in i.schema else None,
               "default": i.defaults.get(name), "doc": i.schema[name].doc
               if name in i.schema else None} for name in i.options}
    return d


def _show(label: str, as_json: bool) -> int:
    info, fixed, cap = registry.resolve(label)
    if as_json:
        print_json(_detail(info) if not fixed else {**_detail(info), "fixed": fixed})
        return 0
    kind = f"exact ({info.optimal_for})" if info.exact else "heuristic"
    print(f"{info.name}: {kind}. {info.description}")
    if fixed:
        print(f"{label} is {info.name} with " + ", ".join(f"{k}={v!r}" for k, v in fixed.items()))
    print(f"models the optional chain fields: {', '.join(info.supports) or 'none'}")
    if cap is not None:
        print(f"in sweeps: chains of up to {cap} stages")
    if not info.options:
        print("options: none")
        return 0
    print("options (-o NAME=VALUE):")
    for line in info.option_help():
        print(f"  {line}")
    return 0


def run(args) -> int:
    if args.name is not None:
        return _show(args.name, args.json)
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
