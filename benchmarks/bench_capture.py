"""What graph capture gives the solver: stages and memory at each granularity.

For every captured network (:data:`remat_theory.lab.networks.CAPTURED_NETWORKS`) and
each granularity (``block``, ``fine``), the network is captured with ``to_stages``,
profiled, and solved with the persistent DP; the table gives the capture method, the number
of stages and of valid cuts, the capture time, and the smallest feasible activation budget
as a fraction of the store-all peak (the lower, the more memory a schedule can save;
sizes rounded up as ``CheckpointedSequential`` rounds them).

    python benchmarks/bench_capture.py --scale small --threads 1

Writes ``benchmarks/results/capture_<scale>.json`` (``--out``; empty to skip).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

import solvers
from remat_theory.torch import profile
from remat_theory.lab.networks import build
from remat_theory.lab.networks import CAPTURED_NETWORKS
from remat_theory.torch.plan.rounding import auto_unit, rounded_chain


def measure(name: str, scale: str, granularity, repeats: int) -> dict:
    t0 = time.perf_counter()
    net = build(name, scale, granularity=granularity)
    capture_s = time.perf_counter() - t0
    chain = profile(net.model, net.example_input, net.loss_fn, repeats=repeats, warmup=1)
    store_all = chain.store_all_memory()
    # sizes rounded up to a unit near store-all/2048, as CheckpointedSequential solves them
    smallest = solvers.solve(rounded_chain(chain, auto_unit(chain)), store_all, "dp").min_budget
    return {"network": name, "scale": scale, "granularity": granularity,
            "method": net.model.method, "stages": chain.length, "valid_cuts": net.model.valid_cuts,
            "capture_s": round(capture_s, 3), "store_all": store_all, "dp_min_budget": smallest,
            "min_over_store_all": round(smallest / store_all, 4),
            "labels": net.model.labels}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", default="small", choices=("test", "small", "large"))
    ap.add_argument("--models", default=",".join(CAPTURED_NETWORKS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/capture_<scale>.json)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = []
    print(f"{'network':<10}{'gran':<7}{'method':<8}{'stages':>7}{'cuts':>6}{'capture s':>11}"
          f"{'min/store-all':>15}")
    for name in args.models.split(","):
        for granularity in ("block", "fine"):
            r = measure(name, args.scale, granularity, args.repeats)
            rows.append(r)
            print(f"{name:<10}{granularity:<7}{r['method']:<8}{r['stages']:>7}{r['valid_cuts']:>6}"
                  f"{r['capture_s']:>11.2f}{r['min_over_store_all']:>15.3f}")
    out = args.out if args.out is not None else str(
        Path(__file__).parent / "results" / f"capture_{args.scale}.json")
    if out:
        Path(out).write_text(json.dumps(rows, indent=1) + "\n")
        print(f"written to {out}")


if __name__ == "__main__":
    main()
