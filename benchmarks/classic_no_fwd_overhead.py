"""Random classic chains without forward overheads: does ``dp-weak`` ever lose?
(proofs/classic_model.md, C.5: every loss of the complete enumerations has a forward
overhead.)

    python benchmarks/classic_no_fwd_overhead.py --chains 8098 --seed 43 \
        --out benchmarks/results/classic_no_fwd_overhead.json

Chains of 3-5 stages, every output saved, no recording costs, ``fwd_overhead = 0``;
``x_0 = 0``, activations in ``0..k`` (``k`` drawn from 2, 3, 4, zero sizes allowed), tapes
their output plus ``0..k``, backward overheads in ``0..k``, backward times 0 and one costly
stage (time 1, stage 0 or 1; Lemma C.2). Each chain is scored by
``hard_objectives.score_chain`` (``dp-weak`` against exhaustive search at the last budget of
every step of its profile).  The stream of chains depends on ``--seed`` only.
"""
from __future__ import annotations

import argparse
import json
import random
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from remat_theory.analysis import hard_objectives as H  # noqa: E402
from remat_theory.model.chain import Chain  # noqa: E402


def chains(seed: int):
    rng = random.Random(seed)
    while True:
        L = rng.randint(3, 5)
        k = rng.choice([2, 3, 4])
        x = [0] + [rng.randint(0, k) for _ in range(L)]
        t = [x[i + 1] + rng.randint(0, k) for i in range(L)]
        f = [0.0] * L
        f[rng.randrange(min(2, L))] = 1.0
        yield Chain(name="r", fwd_time=f, bwd_time=[0.0] * (L + 1), x_size=x, tape_size=t,
                    fwd_overhead=[0] * L,
                    bwd_overhead=[rng.randint(0, k) for _ in range(L + 1)])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--chains", type=int, required=True)
    p.add_argument("--seed", type=int, default=43)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    cfg = H.GapConfig("dp-weak-gap", opt_time_limit=20)
    t0 = time.process_time()
    best, scored, losses = None, 0, 0
    for n, c in zip(range(a.chains), chains(a.seed)):
        s = H.score_chain(c, cfg)
        if s is None:
            continue
        scored += 1
        if s.score > 1 + 1e-12:
            losses += 1
        if best is None or s.score > best["ratio"]:
            best = {"ratio": s.score, "budget": s.budget, "chain": c.to_dict()}
    out = {"command": "python benchmarks/classic_no_fwd_overhead.py " + " ".join(
        shlex.quote(x) for x in (argv if argv is not None else sys.argv[1:])),
        "chains": a.chains, "scored": scored, "losses": losses, "best": best,
        "cpu_s": round(time.process_time() - t0, 1)}
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "best"}), "best ratio",
          best and best["ratio"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
