"""Every family of ``remat profile --model``, captured at its own layers, against the
ORIGINAL eager model: stages, capture method, eager vs drop-in peak at store-all (torch's
allocator, same input and seed), gradients, and measured / predicted peak of the DP's
schedule at three budgets between the smallest feasible one and store-all
(:func:`remat_theory.lab.fidelity.check_network`).

    python benchmarks/capture_families.py --scale small --threads 1
    python benchmarks/capture_families.py --models llama,opt --scale test

Writes ``benchmarks/results/capture_families.json`` (or ``--out``) and prints a table.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=None, help="comma-separated families (default: all)")
    p.add_argument("--scale", default="small", choices=("test", "small", "large"))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--profile-repeats", type=int, default=1)
    p.add_argument("--out", default="benchmarks/results/capture_families.json")
    args = p.parse_args(argv)

    import torch

    from remat_theory.lab.fidelity import check_network
    from remat_theory.lab.networks import FAMILIES

    torch.set_num_threads(args.threads)
    names = args.models.split(",") if args.models else list(FAMILIES)
    command = "python benchmarks/capture_families.py " + " ".join(argv if argv is not None else sys.argv[1:])
    records = []
    print(f"{'network':11} {'method':8} {'stages':>6} {'eager MiB':>10} {'drop-in/eager':>13} "
          f"{'grads':>6} {'measured/predicted':>19} {'drop-in/predicted':>18}")
    for name in names:
        t0 = time.perf_counter()
        try:
            rec = check_network(name, args.scale, profile_repeats=args.profile_repeats)
        except Exception as e:  # noqa: BLE001 - a family that fails is reported, not hidden
            rec = {"network": name, "scale": args.scale, "error": f"{type(e).__name__}: {e}"}
            print(f"{name:11} ERROR {rec['error'][:200]}")
            records.append(rec)
            continue
        rec["seconds"] = round(time.perf_counter() - t0, 1)
        records.append(rec)
        runs = [r for r in rec["runs"] if "ratio" in r]
        dr = [r["dropin_ratio"] for r in runs]
        print(f"{name:11} {rec['method']:8} {rec['stages']:>6} {rec['eager_peak'] / 2**20:>10.2f} "
              f"{rec['dropin_over_eager']:>13.4f} {str(rec['grads_equal']):>6} "
              f"{rec['ratio_min']:>9.4f}-{rec['ratio_max']:.4f} "
              f"{min(dr, default=0):>9.4f}-{max(dr, default=0):.4f}", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"command": command, "torch": torch.__version__,
                               "records": records}, indent=1, default=str))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
