"""Summarize benchmarks/results/frontier_<network>.json (``bash benchmarks/frontier_cpu.sh``)
into the table of docs/torch.md, or the README headline (``--readme``).

Per network: stages of the captured chain, the plain step (MiB above the step's start,
parameter gradients apart; ms), each family's lowest memory with its time as a ratio to plain
(median of per-round ratios), remat's time at Hugging Face's every-layer memory, the noise
tolerance, the goals of the frontier (remat's lowest memory below every baseline's; no HF or
checkpoint_sequential point better in both beyond noise; no compile_budget point better in
both beyond noise) with the worst time ratio where a goal fails, and whether every eager
method's gradients equal the plain model's bit for bit.
``--reanalyse`` first recomputes each file's analysis (``dominance``) and plot from its points with
the installed :mod:`remat_theory.lab.frontier` (needs torch), keeping every measurement.
Usage: python benchmarks/frontier_table.py [--readme] [--reanalyse] [NETWORK ...]"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
ORDER = ("llama", "qwen2", "opt", "gpt-neo", "gpt2", "distilbert", "vit", "convnext", "swin",
         "resnet")
BASE = ("hf_checkpointing", "checkpoint_sequential", "compile_budget")


KEYS = {"thread_cpu": "cpu_times", "wall": "times"}


def _ratio(a: dict, b: dict, clock: str = "wall") -> float:
    key = KEYS[clock]
    return statistics.median(x / y for x, y in zip(a[key], b[key]))


def _ms(p: dict, clock: str) -> str:
    t = p.get("cpu_time") if clock == "thread_cpu" else p["time"]
    return "-" if t is None else f"{t * 1e3:.0f}"


def _mib(v) -> str:
    return "-" if v is None else f"{v / 2**20:.2f}"


def summary(rec: dict) -> dict:
    pts = [p for p in rec["points"] if p["status"] == "ok" and p["times"]
           and not p["method"].startswith("remat_step")]
    plain = next(p for p in pts if p["method"] == "plain")
    d = rec["dominance"]
    low = {}
    for p in pts:
        fam = "remat" if p["family"] in ("remat", "remat_compiled") else p["family"]
        if fam not in low or p["peak"] < low[fam]["peak"]:
            low[fam] = p
    worst = {}
    for r in d["rows"]:
        if not r["dominated"] and r["family"] != "plain":
            ratio = r["time_ratio"] if r["time_ratio"] is not None else float("inf")
            worst[r["family"]] = max(worst.get(r["family"], 0.0), ratio)
    hf1 = next((r for r in d["rows"] if r["baseline"] == "hf_checkpointing:1"), None)
    eager = [p for p in pts if p["family"] not in ("compile_budget", "remat_compiled")]
    failed = [p for p in rec["points"] if p["status"] == "error"]
    return {"rec": rec, "plain": plain, "low": low, "worst": worst, "hf1": hf1,
            "clock": d.get("clock", "wall"),
            "grads": all(p["grads_equal"] for p in eager),
            "grad_diff": max((p["grad_rel_diff"] or 0.0) for p in eager),
            "failed": failed}


def _cell(s, fam) -> str:
    p = s["low"].get(fam)
    if p is None:
        return "-"
    return f"{_mib(p['peak'])} ({_ratio(p, s['plain'], s['clock']):.2f})"


def table(nets) -> list:
    out = ["| network | stages | plain MiB (ms) | remat lowest (time x plain) | HF lowest | "
           "checkpoint_sequential lowest | compile_budget lowest | remat time at HF every-layer "
           "memory / HF | noise: thread CPU / wall (judged on) | lowest below all | HF & c_s "
           "dominated | compile dominated | compiled remat vs compile: worst time ratio at <= memory, "
           "lowest MiB (measured / predicted) | compiled backend | gradients |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for n in nets:
        for rec in json.loads((RESULTS / f"frontier_{n}.json").read_text()):
            s = summary(rec)
            d = rec["dominance"]
            g = d["goals"]
            hf1 = s["hf1"]
            at_hf = ("-" if hf1 is None else "none at <= its memory" if hf1["time_ratio"] is None
                     else f"{hf1['time_ratio']:.2f}")
            hfcs = "yes" if g["hf_and_checkpoint_sequential_dominated"] else "no: " + ", ".join(
                f"{f} {v:.2f}" for f, v in sorted(s["worst"].items()) if f != "compile_budget")
            comp = ("yes" if g["compile_budget_dominated"] else
                    f"no: {s['worst'].get('compile_budget', float('nan')):.2f}")
            crs = [r["compiled_time_ratio"] for r in d["rows"] if r["family"] == "compile_budget"]
            cl = s["rec"]["dominance"]["lowest"].get("remat_compiled")
            cpt = next((p for p in rec["points"] if cl and p["method"] == cl["method"]), None)
            held = ("" if not cpt or not cpt.get("predicted_peak") else
                    f" ({cpt['peak'] / cpt['predicted_peak']:.2f} of predicted)")
            cvc = ("-" if not crs else
                   ("none at <= memory" if any(c is None for c in crs) else f"{max(crs):.2f}")
                   + f", {_mib(cl['peak']) if cl else '-'}{held}")
            grads = "equal" if s["grads"] else f"differ (<= {s['grad_diff']:.1e})"
            stages = rec["stages"] if rec["stages"] is not None else "capture failed"
            by = d.get("noise_by_clock", {"wall": d["noise"]})
            nz = " / ".join("-" if "tolerance" not in by.get(c, {}) else
                            f"{by[c]['tolerance']:.3f}" for c in ("thread_cpu", "wall"))
            nz += f" ({'CPU' if s['clock'] == 'thread_cpu' else 'wall'})"
            backends = sorted({p["backend"] for p in rec["points"] if p.get("backend")}
                              or {rec.get("backend", "-")})
            out.append(
                f"| {n} {'x'.join(map(str, rec['input_shape']))} | {stages} "
                f"| {_mib(s['plain']['peak'])} ({_ms(s['plain'], s['clock'])}) "
                f"| {_cell(s, 'remat')} | {_cell(s, 'hf_checkpointing')} "
                f"| {_cell(s, 'checkpoint_sequential')} | {_cell(s, 'compile_budget')} "
                f"| {at_hf} | {nz} | {'yes' if g['lowest_memory'] else 'no'} "
                f"| {hfcs} | {comp} | {cvc} | {', '.join(backends)} | {grads} |")
    return out


def readme(nets) -> list:
    recs = [(n, r) for n in nets for r in json.loads((RESULTS / f"frontier_{n}.json").read_text())]
    goals = {k: sum(r["dominance"]["goals"][k] for _, r in recs)
             for k in ("lowest_memory", "hf_and_checkpoint_sequential_dominated",
                       "compile_budget_dominated", "compile_budget_dominated_by_compiled_remat",
                       "compiled_remat_below_compile_lowest")}
    ratios = []
    for n, r in recs:
        s = summary(r)
        if "remat" in s["low"] and "hf_checkpointing" in s["low"]:
            ratios.append((n, s["low"]["remat"]["peak"] / s["low"]["hf_checkpointing"]["peak"]))
    n_cpu = sum(summary(r)["clock"] == "thread_cpu" for _, r in recs)
    clock = (f"its less noisy clock: the step thread's CPU time on {n_cpu}, "
             f"wall time on {len(recs) - n_cpu}")
    if n_cpu in (0, len(recs)):
        clock = ("the step thread's CPU time" if n_cpu else "the wall clock") + (
            ", the less noisy clock on every one")
    inductor = any(p.get("backend") == "inductor" for _, r in recs for p in r["points"])
    cmd = "bash benchmarks/frontier_cpu.sh" if inductor else "INDUCTOR= bash benchmarks/frontier_cpu.sh"
    text = (f"On {len(recs)} transformers networks (`{cmd}`, CPU, one "
            f"thread, the original eager model, each judged on {clock}): remat's lowest memory is "
            f"below every baseline's on {goals['lowest_memory']}; no Hugging Face or "
            f"checkpoint_sequential point beats remat in both memory and time beyond the noise "
            f"on {goals['hf_and_checkpoint_sequential_dominated']}; no torch.compile "
            f"activation_memory_budget point does on {goals['compile_budget_dominated']}; "
            f"remat compiled as one graph is within the noise of every compiler point's time "
            f"at no more memory on {goals['compile_budget_dominated_by_compiled_remat']} and "
            f"goes below the compiler's lowest memory on "
            f"{goals['compiled_remat_below_compile_lowest']}.")
    if ratios:
        text += (" remat's lowest memory / Hugging Face's every-layer checkpointing: "
                 + ", ".join(f"{n} {v:.2f}" for n, v in ratios) + ".")
    return [text]


def main(argv) -> int:
    as_readme = "--readme" in argv
    names = [a for a in argv if not a.startswith("--")]
    have = {p.stem.removeprefix("frontier_") for p in RESULTS.glob("frontier_*.json")}
    nets = names or [n for n in ORDER if n in have]
    if "--reanalyse" in argv:
        from remat_theory.lab.frontier import dominance
        for n in nets:
            path = RESULTS / f"frontier_{n}.json"
            recs = json.loads(path.read_text())
            for rec in recs:
                rec["dominance"] = dominance(rec["points"])
            path.write_text(json.dumps(recs, indent=1) + "\n")
            from remat_theory.lab.frontier import plot
            plot(recs, RESULTS / f"frontier_{n}.png", title=f"{n}: time per step vs peak memory")
    print("\n".join(readme(nets) if as_readme else table(nets)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
