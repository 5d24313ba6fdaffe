"""``remat simulate CHAIN.json --budget B --schedule "..." [--json]``"""
from __future__ import annotations

from remat_theory.model.schedule import Schedule
from remat_theory.model.simulator import simulate
from remat_theory.cli.commands._common import budget_arg, load_chain, print_json

NAME = "simulate"
ORDER = 10
HELP = "replay a schedule on a chain and report makespan, peak memory and the profile"


def add_arguments(p) -> None:
    p.add_argument("chain", metavar="CHAIN.json", help="chain file (remat-chain/1 layout)")
    p.add_argument("--budget", type=budget_arg, default=None,
                   help="memory budget in bytes (omit to only measure)")
    p.add_argument("--schedule", required=True, help='op tokens, e.g. "Fall0 Loss B0"')
    p.add_argument("--allow-drop", action="store_true",
                   help="allow explicit deletions Dropx<i> / Dropt<i> (extension of the model)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args) -> int:
    chain = load_chain(args.chain)
    schedule = Schedule.parse(args.schedule)
    result = simulate(chain, schedule, args.budget, allow_drop=args.allow_drop)
    if args.json:
        d = result.to_dict()
        d.update(solver="simulate", status="valid", schedule=schedule.tokens())
        print_json(d)
        return 0
    print(f"chain {chain.name}: {chain.length} stages")
    print(f"{'step':>4}  {'op':<8}{'start':>10}{'time':>9}{'before':>10}{'peak':>10}{'after':>10}  held after")
    for s in result.profile:
        print(f"{s.step:>4}  {s.op:<8}{s.start:>10.4g}{s.time:>9.4g}{s.memory_before:>10}"
              f"{s.peak:>10}{s.memory_after:>10}  {s.held}")
    budget = "" if args.budget is None else f" (budget {args.budget})"
    print(f"valid: makespan {result.makespan:.6g}, peak memory {result.peak_memory}{budget}")
    return 0
