"""Every registered solver on one long chain under a time limit: does the limit hold?

For each length L of ``--stages`` (a homogeneous chain: fwd 1, bwd 2, x 3, tape 5, budget a
quarter of store-all) and each solver, one solve in a fresh process (``solvers.solve``, the
registry's replay of the answer included), killed after ``--kill`` seconds.  One JSON line per
solve: status, the first words of the message, ``solve_s`` (the solve, replay included) and
``setup_s`` (imports and building the chain, outside any time limit).

    python benchmarks/bench_scale.py --stages 10000,100000 --time-limit 5

The figures of docs/solvers.md ("Time limits at scale") come from this command.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

ONE = r"""
import json, sys, time
t0 = time.perf_counter()
import solvers
from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError
L, name, tl = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
chain = Chain.homogeneous(L, fwd_time=1.0, bwd_time=2.0, x_size=3, tape_size=5)
budget = chain.store_all_memory() // 4
t1 = time.perf_counter()
opts = {"time_limit": tl} if "time_limit" in solvers.get(name).options else {}
try:
    sol = solvers.solve(chain, budget, name, **opts)
    out = {"status": sol.status, "message": sol.message[:120]}
except RematError as e:
    out = {"status": "refused", "message": str(e)[:120]}
out.update(L=L, solver=name, time_limit=tl if opts else None,
           solve_s=round(time.perf_counter() - t1, 2), setup_s=round(t1 - t0, 2))
print(json.dumps(out), flush=True)
"""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--stages", default="10000,100000")
    p.add_argument("--time-limit", type=float, default=5.0)
    p.add_argument("--kill", type=float, default=120.0, help="seconds before a solve is killed")
    p.add_argument("--solvers", default=None, help="comma-separated (default: every registered)")
    args = p.parse_args(argv)
    import solvers
    names = args.solvers.split(",") if args.solvers else solvers.names()
    for L in (int(v) for v in args.stages.split(",")):
        for name in names:
            t0 = time.perf_counter()
            try:
                r = subprocess.run([sys.executable, "-c", ONE, str(L), name, str(args.time_limit)],
                                   capture_output=True, text=True, timeout=args.kill)
                line = r.stdout.strip() or json.dumps(
                    {"L": L, "solver": name, "status": "error",
                     "message": r.stderr.strip().splitlines()[-1][:200] if r.stderr else ""})
            except subprocess.TimeoutExpired:
                line = json.dumps({"L": L, "solver": name, "status": f"killed after {args.kill:g} s",
                                   "solve_s": round(time.perf_counter() - t0, 1)})
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
