"""Summarize benchmarks/results/frontier_inplace_<network>.json
(``bash benchmarks/frontier_inplace_cpu.sh``) into the table of docs/torch.md ("The frontier
through the in-place API").

Per network: Hugging Face's every-layer checkpointing (``hf_checkpointing:1``: MiB above the
step's start, parameter gradients apart, as the frontier's ``peak``; the whole step's
``step_peak``; ms on the clock judged on); what the in-place API did when given HF's
measured step peak as its budget (accepted, on its prediction less the engine's margin or
verified by a step run at plan time, or refused and the ``smallest_feasible`` it named); the fastest in-place point at no more memory than HF's (or, where none is, the
in-place point of least memory, marked ABOVE), its memory and the median per-round time
ratio to HF; the noise (the frontier's tolerance on each clock, the clock judged on:
max(2%, repeated plain, the in-place plain-autograd plan against plain)); the verdict at HF's
every-layer memory and over every HF every-K point; the in-place points whose measured step
peak went above their budget; gradients (bit for bit against plain); then the range of
measured / predicted step peak over every in-place point.
``--reanalyse`` first recomputes each file's ``dominance_inplace`` from its points.
Usage: python benchmarks/frontier_inplace_table.py [--reanalyse] [--results DIR] [NETWORK ...]
(``--results``: the folder of the JSON files, default benchmarks/results; a rerun written
elsewhere with ``OUT=DIR bash benchmarks/frontier_inplace_cpu.sh``)."""
from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
ORDER = ("llama", "qwen2", "opt", "gpt-neo", "gpt2", "distilbert", "vit", "convnext", "swin",
         "resnet")
KEYS = {"thread_cpu": "cpu_times", "wall": "times"}


def _mib(v) -> str:
    return "-" if v is None else f"{v / 2**20:.2f}"


def _ms(p: dict, clock: str) -> str:
    return f"{statistics.median(p[KEYS[clock]]) * 1e3:.0f}"


def _ratio(a: dict, b: dict, clock: str) -> float:
    key = KEYS[clock]
    return statistics.median(x / y for x, y in zip(a[key], b[key]))


def row(n: str, rec: dict) -> str:
    pts = {p["method"]: p for p in rec["points"]}
    inplace = [p for p in rec["points"] if p["family"] == "remat_inplace"]
    failed = [p for p in inplace if p["status"] != "ok"]
    ok = [p for p in inplace if p["status"] == "ok"]
    d = rec.get("dominance_inplace")
    shape = "x".join(map(str, rec["input_shape"]))
    if not ok:
        why = failed[0]["detail"] if failed else "no in-place point"
        hf = pts.get("hf_checkpointing:1")
        hf_cell = ("-" if hf is None or hf["status"] != "ok" else
                   f"{_mib(hf['peak'])} / {_mib(hf['step_peak'])}")
        return (f"| {n} {shape} | {hf_cell} | - | in-place API failed: `{why[:300]}` "
                + "| - " * 9 + "|")
    clock = d["clock"]
    by = d.get("noise_by_clock", {})
    nz = " / ".join("-" if "tolerance" not in by.get(c, {}) else f"{by[c]['tolerance']:.3f}"
                    for c in ("thread_cpu", "wall"))
    nz += f" ({'CPU' if clock == 'thread_cpu' else 'wall'})"
    tol = d["tolerance"]
    over = [p for p in ok if p.get("within_budget") is False]
    over_cell = "none" if not over else "; ".join(
        f"{p['method']}: {p['step_peak']:,} > {p['budget']:,} B "
        f"({p['step_peak'] / p['budget']:.4f})" for p in over)
    eager_ok = [p for p in rec["points"] if p["status"] == "ok" and p["grads_equal"] is not None]
    grads = ("equal" if all(p["grads_equal"] for p in eager_ok) else
             "differ (<= %.1e)" % max(p["grad_rel_diff"] or 0 for p in eager_ok))
    hf = pts.get("hf_checkpointing:1")
    if hf is None or hf["status"] != "ok":
        low = min(ok, key=lambda p: p["peak"])
        plain = pts["plain"]
        hf_text = "-" if hf is None else f"{hf['status']}: {hf['detail'][:120]}"
        cells = []
        for mem in ("peak", "step_peak"):
            low = min(ok, key=lambda p: (p[mem], p["step_peak"]))
            cells += [f"no HF point; lowest {low['method'].removeprefix('remat_inplace:')} "
                      f"({low['recomputed']} recomputed): {_mib(low[mem])}",
                      f"{_ratio(low, plain, clock):.2f} x plain", "-"]
        return (f"| {n} {shape} | {hf_text} | - | " + " | ".join(cells)
                + f" | {nz} | {len(ok)} | {over_cell} | {grads} |")
    at = pts.get("remat_inplace:hf1")
    if at is None:
        asked = "-"
    elif "refused:" in at["detail"]:
        asked = (f"refused; smallest_feasible {at['budget']:,} B = "
                 f"{at['budget'] / hf['step_peak']:.3f} x HF's step peak; ran there: "
                 f"{at['recomputed']} recomputed, step {_mib(at['step_peak'])} MiB")
    else:
        # a plan whose prediction is above the budget less the engine's margin was accepted
        # on the step it ran at plan time (a verified plan), not on its prediction
        from remat_theory.torch.inplace.plan import ENGINE_MARGIN
        limit = at["budget"] - math.ceil(at["budget"] * ENGINE_MARGIN)
        how = "verified by measurement" if at["predicted_peak"] > limit else "on its prediction"
        asked = (f"accepted ({how}): {at['recomputed']} recomputed, step "
                 f"{_mib(at['step_peak'])} MiB = {at['step_peak'] / hf['step_peak']:.3f} x HF's")
    cells = []
    for dd in (d, rec["dominance_inplace_step"]):
        mem = dd["memory"]
        r1 = next(r for r in dd["rows"] if r["baseline"] == "hf_checkpointing:1")
        tol = dd["tolerance"]
        if r1["remat"] is not None:
            p = pts[r1["remat"]]
            ratio = r1["time_ratio"]
            best = (f"{p['method'].removeprefix('remat_inplace:')} ({p['recomputed']} "
                    f"recomputed): {_mib(p[mem])}, {_ms(p, clock)} ms")
            verdict = "no slower" if ratio <= 1 + tol else f"SLOWER ({ratio - 1:+.1%})"
        else:
            p = min(ok, key=lambda q: (q[mem], q["step_peak"]))
            ratio = _ratio(p, hf, clock)
            best = (f"none; nearest {p['method'].removeprefix('remat_inplace:')}: "
                    f"{_mib(p[mem])} (ABOVE by {p[mem] - hf[mem]:,} B), {_ms(p, clock)} ms")
            verdict = "NOT at HF's memory"
        hf_rows = [r for r in dd["rows"] if r["family"] == "hf_checkpointing"]
        bad = [r for r in hf_rows if not r["dominated"]]
        every_k = (f"{len(hf_rows) - len(bad)}/{len(hf_rows)}" + ("" if not bad else " (not: " + ", ".join(
            f"K={r['baseline'].split(':')[1]} " + ("none at <= memory" if r["time_ratio"] is None
                                                   else f"{r['time_ratio']:.3f}")
            for r in bad) + ")"))
        cells += [best, f"{ratio:.3f} {verdict}", every_k]
    return (f"| {n} {shape} | {_mib(hf['peak'])} / {_mib(hf['step_peak'])}, {_ms(hf, clock)} ms "
            f"| {asked} | " + " | ".join(cells) + f" | {nz} | {len(ok)} | {over_cell} "
            f"| {grads} |")


def table(nets) -> list:
    out = ["| network | HF every layer: MiB / step MiB, ms | in-place given HF's step peak as "
           "its budget | by activation MiB: fastest in-place at <= HF's | time / HF, verdict "
           "| HF every-K points matched | by step MiB: fastest in-place at <= HF's | time / HF, "
           "verdict | HF every-K points matched | noise: thread CPU / wall (judged on) "
           "| in-place points | step peak above its budget | gradients |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for n in nets:
        for rec in json.loads((RESULTS / f"frontier_inplace_{n}.json").read_text()):
            out.append(row(n, rec))
    return out


def main(argv) -> int:
    global RESULTS
    argv = list(argv)
    if "--results" in argv:
        i = argv.index("--results")
        RESULTS = Path(argv[i + 1])
        del argv[i:i + 2]
    names = [a for a in argv if not a.startswith("--")]
    have = {p.stem.removeprefix("frontier_inplace_") for p in RESULTS.glob("frontier_inplace_*.json")}
    nets = names or [n for n in ORDER if n in have]
    if "--reanalyse" in argv:
        from remat_theory.lab.frontier import dominance
        for n in nets:
            path = RESULTS / f"frontier_inplace_{n}.json"
            recs = json.loads(path.read_text())
            for rec in recs:
                rec["dominance"] = dominance(rec["points"])
                rec["dominance_inplace"] = dominance(rec["points"], families=("remat_inplace",))
                rec["dominance_inplace_step"] = dominance(rec["points"],
                                                          families=("remat_inplace",),
                                                          memory="step_peak")
            path.write_text(json.dumps(recs, indent=1) + "\n")
    print("\n".join(table(nets)))
    ratios = []
    for n in nets:
        for rec in json.loads((RESULTS / f"frontier_inplace_{n}.json").read_text()):
            ratios += [(p["step_peak"] / p["predicted_peak"], n) for p in rec["points"]
                       if p["family"] == "remat_inplace" and p.get("predicted_peak")
                       and p.get("step_peak")]
    if ratios:
        lo, hi = min(ratios), max(ratios)
        print(f"\nmeasured / predicted step peak over {len(ratios)} in-place points: "
              f"{lo[0]:.3f} ({lo[1]}) - {hi[0]:.3f} ({hi[1]})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
