"""dp-offload's CPU time on long chains: the ``transformer`` and ``random`` families at 60
stages (bandwidth: one tape's worth of bytes per forward second on average), a third of
store-all's memory, 500 slots.  CPU seconds of one process (``time.process_time``), so a
comparison between two versions is a ratio taken by running this file under each, one
after the other on the same machine.

    python benchmarks/offload_dp_speed.py
"""
from __future__ import annotations

import json
import sys
import time

from remat_theory.analysis import families
from solvers import registry


def main() -> int:
    rows = []
    for name in ("transformer", "random"):
        chain = families.make(name, 60, 0)
        chain = chain.replace(bandwidth=sum(chain.tape_size) / sum(chain.fwd_time))
        budget = chain.store_all_memory() // 3
        t = time.process_time()
        sol = registry.solve(chain, budget, "dp-offload", slots=500)
        rows.append({"family": name, "stages": 60, "budget": budget, "status": sol.status,
                     "makespan": sol.makespan,
                     "cpu_seconds": round(time.process_time() - t, 2)})
        print(json.dumps(rows[-1]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
