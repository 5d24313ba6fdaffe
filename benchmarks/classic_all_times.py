"""The classic rows over **every** forward-time vector (proofs/classic_model.md, C.8).

    python benchmarks/classic_all_times.py --stages 3 --max-size 2 --zero-bwd-overhead \
        --class weak --out benchmarks/results/classic_all_times/L3_k2_bo0_weak.json

Visits every memory configuration of the range (the layout of
``benchmarks/classic_enumeration.py``: ``x_size[0] = 0``, sizes and overheads in ``0..k``,
backward times 0) and, for each, every budget where the Pareto sets of forward-count
vectors change; at each, the largest ratio of the class's optimum to the unrestricted one
over all forward-time vectors ``f >= 0`` (exact fractions,
:mod:`remat_theory.analysis.classic_times`).  Writes one JSON summary: the command, the CPU
seconds, the budgets checked, the losses, the largest ratio, the histogram of ratios and the
largest records (each a chain with a time vector attaining its ratio).
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from remat_theory.analysis.classic_enum import EnumConfig  # noqa: E402
from remat_theory.analysis.classic_times import enumerate_range  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stages", type=int, required=True)
    p.add_argument("--max-size", type=int, required=True)
    p.add_argument("--zero-fwd-overhead", action="store_true")
    p.add_argument("--zero-bwd-overhead", action="store_true")
    p.add_argument("--unsaved", action="store_true", help="every output_saved pattern")
    p.add_argument("--class", dest="cls", default="weak",
                   help="weak, monotone or persistent (default weak)")
    p.add_argument("--limit", type=int, default=None, help="only the first N configurations")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    cfg = EnumConfig(a.stages, a.max_size, zero_fwd_overhead=a.zero_fwd_overhead,
                     zero_bwd_overhead=a.zero_bwd_overhead, unsaved=a.unsaved)
    t0 = time.process_time()
    res = enumerate_range(cfg, a.cls, 0, a.limit)
    out = {"command": "python benchmarks/classic_all_times.py " + " ".join(
               shlex.quote(x) for x in (argv if argv is not None else sys.argv[1:])),
           "range": {"stages": a.stages, "max_size": a.max_size,
                     "zero_fwd_overhead": a.zero_fwd_overhead,
                     "zero_bwd_overhead": a.zero_bwd_overhead, "unsaved": a.unsaved,
                     "configurations": cfg.size()},
           "class": a.cls, "cpu_s": round(time.process_time() - t0, 1), **res}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"{a.out}: {res['configs']} configurations, {res['checks']} budgets, {res['losses']} "
          f"losses, largest ratio {res['max_ratio']}, {out['cpu_s']} CPU s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
