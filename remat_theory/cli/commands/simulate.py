"""``remat simulate CHAIN.json --budget B --schedule "..." [--json]``"""
from __future__ import annotations

from remat_theory.model.schedule import Schedule
from remat_theory.model.simulator import simulate
from remat_theory.cli.commands._common import budget_arg, load_chain, print_json
from remat_theory.cli.render import printable

NAME = "simulate"
ORDER = 10
HELP = "replay a schedule on a chain and report makespan, peak memory and the profile"
DESCRIPTION = (HELP + "; the table lists at most 12 held values per step (the first and "
               "last few, and how many), --json lists them all")


def add_arguments(p) -> None:
    p.add_argument("chain", metavar="CHAIN.json", help="chain file (remat-chain/1 layout)")
    p.add_argument("--budget", type=budget_arg, default=None,
                   help="memory budget in bytes (omit to only measure)")
    p.add_argument("--schedule", required=True, help='op tokens, e.g. "Fall0 Loss B0"')
    p.add_argument("--allow-drop", action="store_true",
                   help="allow explicit deletions Dropx<i> / Dropt<i> (extension of the model)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


HELD_SHOWN = 12  # values listed per row of the table (--json lists them all)


def _set_bits(n: int, first: int, last: int) -> tuple[list, list, int]:
    """The ``first`` lowest and ``last`` highest set bit positions of ``n``, and how many
    are set, in time linear in n's bits (a 5,000-stage schedule has 10,000 rows)."""
    s = bin(n)[:1:-1]  # s[i] is bit i
    count = s.count("1")
    low, i = [], s.find("1")
    while i >= 0 and len(low) < first:
        low.append(i)
        i = s.find("1", i + 1)
    high, j = [], s.rfind("1")
    while j >= 0 and len(high) < last:
        high.append(j)
        j = s.rfind("1", 0, j)
    return low, high[::-1], count


def held_text(step, limit: int = HELD_SHOWN) -> str:
    """The values held after ``step``, as ``{x0, t2, d3}``; beyond ``limit`` values, the
    first and last few and how many there are."""
    if not hasattr(step, "state"):  # a two-stream step: device, host and leaving values
        return step.held
    st, L = step.state, step.length
    grad = [f"d{st.bwd_next + 1}"] if st.bwd_next < L else []
    xs_lo, xs_hi, nx = _set_bits(st.plain, limit, limit)
    ts_lo, ts_hi, nt = _set_bits(st.tapes, limit, limit)
    total = nx + nt + len(grad)
    if total <= limit:
        items = [f"x{i}" for i in xs_lo] + [f"t{i}" for i in ts_lo] + grad
        return "{" + ", ".join(items) + "}"
    head = ([f"x{i}" for i in xs_lo] + [f"t{i}" for i in ts_lo])[:limit - 4]
    tail = ([f"x{i}" for i in xs_hi] + [f"t{i}" for i in ts_hi] + grad)[-3:]
    return "{" + ", ".join(head) + ", ..., " + ", ".join(tail) + f"}} ({total} values)"


def run(args) -> int:
    chain = load_chain(args.chain)
    schedule = Schedule.parse(args.schedule)
    result = simulate(chain, schedule, args.budget, allow_drop=args.allow_drop)
    if args.json:
        d = result.to_dict()
        d.update(solver="simulate", status="valid", schedule=schedule.tokens())
        print_json(d)
        return 0
    print(f"chain {printable(chain.name)}: {chain.length} stages")
    print(f"{'step':>4}  {'op':<8}{'start':>10}{'time':>9}{'before':>10}{'peak':>10}{'after':>10}  held after")
    for s in result.profile:
        print(f"{s.step:>4}  {s.op:<8}{s.start:>10.4g}{s.time:>9.4g}{s.memory_before:>10}"
              f"{s.peak:>10}{s.memory_after:>10}  {held_text(s)}")
    budget = "" if args.budget is None else f" (budget {args.budget})"
    print(f"valid: makespan {result.makespan:.6g}, peak memory {result.peak_memory}{budget}")
    return 0
