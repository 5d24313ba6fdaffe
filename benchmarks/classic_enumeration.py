"""Complete enumeration of the classic model at small sizes (proofs/classic_model.md,
``remat_theory.analysis.classic_enum``): every chain of ``L`` stages with sizes in
``0..k`` (and ``x_0 = 0``, backward times 0: Lemmas C.1-C.2), every forward-time vector of
``--times``, every budget where a measure can change.

    python benchmarks/classic_enumeration.py --stages 3 --max-size 2 --zero-bwd-overhead \
        --measures weak,budget --out benchmarks/results/classic_enum/L3_k2_bo0.jsonl

Resumable: the shards already in ``--out`` are skipped (Ctrl-C loses at most the shards in
flight); ``--workers`` spreads shards over processes.  The summary (configurations
covered, checks, losses, the largest records) is printed and written beside the shards as
``<out>.summary.json`` with the command that made it.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from remat_theory.analysis.classic_enum import EnumConfig, enumerate_classic  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stages", type=int, required=True)
    p.add_argument("--max-size", type=int, required=True)
    p.add_argument("--times", default="0,1", help="forward-time values per stage (default 0,1)")
    p.add_argument("--measures", default="weak,budget", help="weak, budget, monotone")
    p.add_argument("--zero-fwd-overhead", action="store_true")
    p.add_argument("--zero-bwd-overhead", action="store_true")
    p.add_argument("--unsaved", action="store_true", help="every output_saved pattern too")
    p.add_argument("--shard-size", type=int, default=200)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--max-shards", type=int, default=None,
                   help="run at most this many shards now (resume later)")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    cfg = EnumConfig(a.stages, a.max_size, times=tuple(int(t) for t in a.times.split(",")),
                     measures=tuple(a.measures.split(",")),
                     zero_fwd_overhead=a.zero_fwd_overhead,
                     zero_bwd_overhead=a.zero_bwd_overhead, unsaved=a.unsaved)
    s = enumerate_classic(cfg, a.out, shard_size=a.shard_size, workers=a.workers,
                          max_shards=a.max_shards)
    s["command"] = "python benchmarks/classic_enumeration.py " + " ".join(
        shlex.quote(x) for x in (argv if argv is not None else sys.argv[1:]))
    Path(a.out + ".summary.json").write_text(json.dumps(s, indent=1) + "\n")
    brief = {k: v for k, v in s.items() if k not in cfg.measures}
    brief.update({m: {k: v for k, v in s[m].items() if k != "best"} for m in cfg.measures})
    print(json.dumps(brief))
    for m in cfg.measures:
        for r in s[m]["best"][:3]:
            print(m, json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
