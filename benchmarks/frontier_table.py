"""Summarize benchmarks/results/frontier_<network>.json into the table of docs/torch.md:
per network and input, how many baseline points remat's drop-in dominates (no more memory,
no more time with 2% for noise), the worst time ratio among the others by baseline family,
and each family's lowest memory.  Usage: python benchmarks/frontier_table.py [NETWORK ...]"""
from __future__ import annotations

import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def rows(network: str) -> list[str]:
    out = []
    for rec in json.loads((RESULTS / f"frontier_{network}.json").read_text()):
        d = rec["dominance"]
        n = len(d["rows"])
        dom = sum(r["dominated"] for r in d["rows"])
        worst = {}
        for r in d["rows"]:
            if not r["dominated"]:
                fam = r["baseline"].split(":")[0]
                ratio = r["time_ratio"]
                worst[fam] = max(worst.get(fam, 0.0), ratio if ratio is not None else float("inf"))
        low = {k: v["peak"] / 2**20 for k, v in d["lowest"].items()}
        base_low = min(v for k, v in low.items() if k != "remat")
        others = ", ".join(f"{k} {v:.2f}" for k, v in sorted(worst.items())) or "-"
        out.append(f"| {network} | {'x'.join(map(str, rec['input_shape']))} | {dom}/{n} | {others} "
                   f"| {low.get('remat', float('nan')):.2f} | {base_low:.2f} "
                   f"| {low.get('checkpoint_sequential', float('nan')):.2f} "
                   f"| {low.get('memory_budget', float('nan')):.2f} |")
    return out


def main(argv) -> int:
    nets = argv or sorted(p.stem.removeprefix("frontier_") for p in RESULTS.glob("frontier_*.json"))
    print("| network | input | baseline points dominated | not dominated: worst time ratio by family "
          "| remat lowest MiB | baselines lowest MiB | checkpoint_sequential lowest | torch.compile budget lowest |")
    print("|---|---|---|---|---|---|---|---|")
    for n in nets:
        print("\n".join(rows(n)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
