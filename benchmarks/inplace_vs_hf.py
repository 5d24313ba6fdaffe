"""The in-place API against the ORIGINAL eager model and Hugging Face's every-layer
checkpointing, on small transformers configurations (CPU, one thread).

Per network: the step's peak as the allocator measures it (``AllocatorMeter``, parameter
gradients included, from the forward to the end of ``loss.backward()``) and its time, for
the eager model, ``gradient_checkpointing_enable()`` (every layer), and
``rematerialize(model, budget)`` at HF's measured peak (or, where the plan refuses it, at
the smallest budget it accepts, which it names) and at 0.5 of store-all; where the plan was
verified by a step run at plan time, the peak that step measured (``verified_step_peak``).  The three models
are copies of one; their steps are interleaved, ``--rounds`` times, the median taken.  The
losses and gradients of the remat model are checked against the eager one on each step.

    python benchmarks/inplace_vs_hf.py                       # writes results/inplace_vs_hf.json
    python benchmarks/inplace_vs_hf.py --sweep --networks t5,bart,pegasus
        # measured / predicted over every keep-or-recompute schedule: results/inplace_sweep.json
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from remat_theory.model.errors import InfeasibleBudgetError
from remat_theory.model.schedule import Schedule
from remat_theory.torch.inplace import rematerialize
from remat_theory.torch.inplace.plan import measured_gradients, step_peak
from remat_theory.torch.plan.nested_form import nested_form
from remat_theory.torch.tracker import AllocatorMeter


def networks(batch: int, length: int):
    import transformers as tf
    small = dict(vocab_size=1000)
    return {
        "llama": lambda: tf.LlamaForCausalLM(tf.LlamaConfig(**small, hidden_size=128, intermediate_size=256, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=4)),
        "qwen2": lambda: tf.Qwen2ForCausalLM(tf.Qwen2Config(**small, hidden_size=128, intermediate_size=256, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2)),
        "gpt2": lambda: tf.GPT2LMHeadModel(tf.GPT2Config(**small, n_embd=128, n_layer=6, n_head=4)),
        "opt": lambda: tf.OPTForCausalLM(tf.OPTConfig(**small, hidden_size=128, ffn_dim=256, num_hidden_layers=6, num_attention_heads=4, word_embed_proj_dim=128)),
        "bert": lambda: tf.BertForSequenceClassification(tf.BertConfig(**small, hidden_size=128, num_hidden_layers=6, num_attention_heads=4, intermediate_size=256)),
        # values several layers read: T5's position bias and encoder states, BART's encoder
        # states, DeBERTa's relative embeddings, ALBERT's one shared layer
        "t5": lambda: tf.T5ForConditionalGeneration(tf.T5Config(**small, d_model=128, d_ff=256, d_kv=32, num_layers=3, num_decoder_layers=3, num_heads=4, decoder_start_token_id=0, pad_token_id=0)),
        "bart": lambda: tf.BartForConditionalGeneration(tf.BartConfig(**small, d_model=128, encoder_layers=3, decoder_layers=3, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)),
        "deberta-v2": lambda: tf.DebertaV2ForSequenceClassification(tf.DebertaV2Config(**small, hidden_size=128, num_hidden_layers=6, num_attention_heads=4, intermediate_size=256)),
        "pegasus": lambda: tf.PegasusForConditionalGeneration(tf.PegasusConfig(**small, d_model=128, encoder_layers=3, decoder_layers=3, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256, max_position_embeddings=256, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=2)),
        "albert": lambda: tf.AlbertForSequenceClassification(tf.AlbertConfig(**small, embedding_size=128, hidden_size=128, num_hidden_layers=6, num_attention_heads=4, intermediate_size=256)),
    }


CLASSIFIERS = ("bert", "deberta-v2", "albert")


def make_batch(name, seed, batch, length):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 1000, (batch, length), generator=g)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[1, length // 2:] = 0
    labels = torch.randint(0, 2, (batch,), generator=g) if name in CLASSIFIERS else ids.clone()
    if name in ("t5", "bart", "pegasus"):
        labels = torch.randint(3, 1000, (batch, length // 2), generator=g)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def measure(model, b, seed):
    for p in model.parameters():
        p.grad = None
    meter = AllocatorMeter("cpu")
    torch.manual_seed(seed)
    with meter:
        with meter.op("step"):
            t0 = time.perf_counter()
            loss = model(**b).loss
            loss.backward()
            t = time.perf_counter() - t0
    grads = [None if p.grad is None else p.grad.clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    return meter.peak, t, float(loss), grads


def max_rel(ga, gb) -> float:
    worst = 0.0
    for a, b in zip(ga, gb):
        if a is None or b is None:
            if (a is None) != (b is None):
                return float("inf")
            continue
        worst = max(worst, float((a - b).abs().max() / b.abs().max().clamp_min(1e-12)))
    return worst


def run(name, build, rounds, batch, length):
    torch.manual_seed(0)
    base = build().train()
    b = make_batch(name, 1, batch, length)
    eager = copy.deepcopy(base)
    hf = copy.deepcopy(base)
    try:
        hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        hf_peak = measure(hf, b, 0)[0]
        hf_note = None
    except ValueError as e:  # a family HF cannot checkpoint (ALBERT)
        hf, hf_peak, hf_note = None, 1, f"{type(e).__name__}: {e}"
    rows = {}
    for label, budget in (("remat@hf", hf_peak), ("remat@0.5", 0.5)):
        m = copy.deepcopy(base)
        note = None
        t0 = time.process_time()
        try:
            h = rematerialize(m, budget, b)
        except InfeasibleBudgetError as e:
            note = f"refused {budget}: smallest it accepts {e.smallest_feasible}"
            budget = e.smallest_feasible
            t0 = time.process_time()
            h = rematerialize(m, budget, b)
        plan_cpu = time.process_time() - t0
        # the steps run at plan time to verify the plan, and what one of them costs
        steps = len(h.plan.profile.__dict__.get("_measured_steps", {}))
        t0 = time.process_time()
        if steps:
            h.measure_step(h.plan, **b)
        costs = {"plan_cpu_s": plan_cpu, "verify_steps": steps,
                 "verify_step_cpu_s": time.process_time() - t0 if steps else None}
        rows[label] = (m, h, budget, note, costs)
    models = {"eager": eager} | ({"hf_every_layer": hf} if hf is not None else {}) | {
        k: v[0] for k, v in rows.items()}
    got = {k: [] for k in models}
    worst = {k: 0.0 for k in rows}
    for r in range(rounds):
        res = {k: measure(m, b, r) for k, m in models.items()}
        for k, v in res.items():
            got[k].append(v)
        for k in rows:
            worst[k] = max(worst[k], max_rel(res[k][3], res["eager"][3]),
                           abs(res[k][2] - res["eager"][2]) / abs(res["eager"][2]))
    out = {"batch": batch, "length": length, "rounds": rounds, "layers": len(rows["remat@0.5"][1].layers)}
    if hf is None:
        out["hf_every_layer"] = {"peak_bytes": None, "time_s": None, "note": hf_note}
    for k, vals in got.items():
        out[k] = {"peak_bytes": max(v[0] for v in vals),
                  "time_s": statistics.median(v[1] for v in vals)}
    for k, (m, h, budget, note, costs) in rows.items():
        out[k].update(costs)
        out[k].update(budget=budget, note=note, predicted_step_peak=h.plan.predicted_step_peak,
                      verified_step_peak=h.plan.measured_step_peak,
                      recomputed=h.plan.recomputed, schedule=str(h.plan.schedule),
                      max_rel_diff_vs_eager=worst[k])
    return out


def keep_or_recompute(n: int) -> list:
    """Every schedule that keeps each of ``n`` layers or recomputes it once, alone."""
    out = []
    for keep in itertools.product([True, False], repeat=n):
        ops = [("Fall%d" if k else "Fck%d") % i for i, k in enumerate(keep)] + ["Loss"]
        for i in reversed(range(n)):
            ops += ([] if keep[i] else [f"Fall{i}"]) + [f"B{i}"]
        out.append(" ".join(ops))
    return out


def sweep(name, build, batch, length):
    """The step's prediction against the allocator's measurement over every keep-or-recompute
    schedule of the network's layers, each run through the in-place API (one profile: the
    handle's plan replaced by one of that schedule, its prediction by ``step_peak``)."""
    torch.manual_seed(0)
    model = build().train()
    b = make_batch(name, 1, batch, length)
    handle = rematerialize(model, 0.5, b)
    plan = handle.plan
    grads = measured_gradients(plan.profile, handle.gradients)
    rows = []
    for text in keep_or_recompute(plan.chain.length):
        schedule = Schedule.parse(text)
        predicted = step_peak(plan.profile, schedule, grads)[0]
        handle.plans[plan.key] = dataclasses.replace(
            plan, solution=dataclasses.replace(plan.solution, schedule=schedule),
            tree=nested_form(schedule, plan.chain.length), predicted_step_peak=predicted)
        measured = measure(model, b, 0)[0]
        rows.append({"schedule": text, "predicted": predicted, "measured": measured,
                     "ratio": measured / predicted})
    handle.plans[plan.key] = plan
    r = sorted(x["ratio"] for x in rows)
    return {"batch": batch, "length": length, "schedules": len(rows), "min": r[0],
            "median": r[len(r) // 2], "max": r[-1], "points": rows}


def table(path) -> str:
    """The markdown table of docs/train.md from a results file."""
    results = json.loads(Path(path).read_text())
    mb = lambda b: f"{b / 1e6:.2f} MB"  # noqa: E731
    rows = ["| network | layers | eager | HF every layer | remat at HF's peak (or the smallest it "
            "accepts) | its peak / HF's | remat at 0.5 |", "|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        if not isinstance(r, dict):
            continue
        hf, at, half = r["hf_every_layer"], r["remat@hf"], r["remat@0.5"]
        hf_text = (f"{mb(hf['peak_bytes'])}, {hf['time_s']:.2f} s" if hf["peak_bytes"]
                   else "cannot checkpoint")
        asked = "HF's peak" if at["note"] is None else f"refused; at {mb(at['budget'])}"
        if at.get("verified_step_peak") is not None:
            asked += f", verified: {at['verified_step_peak']:,} B"
        ratio = f"{at['peak_bytes'] / hf['peak_bytes']:.3f}" if hf["peak_bytes"] else "-"
        rows.append(f"| {name} | {r.get('layers', '-')} | {mb(r['eager']['peak_bytes'])}, "
                    f"{r['eager']['time_s']:.2f} s | {hf_text} | {mb(at['peak_bytes'])}, "
                    f"{at['time_s']:.2f} s ({asked}) | {ratio} | {mb(half['peak_bytes'])}, "
                    f"{half['time_s']:.2f} s |")
    return "\n".join(rows)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--networks", default="llama,qwen2,gpt2,opt,bert,t5,bart,deberta-v2,albert")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "inplace_vs_hf.json"))
    ap.add_argument("--table", action="store_true", help="print the table of --out and stop")
    ap.add_argument("--sweep", action="store_true",
                    help="measured / predicted step peak over every keep-or-recompute schedule "
                         "(writes results/inplace_sweep.json unless --out)")
    a = ap.parse_args(argv)
    if a.table:
        print(table(a.out))
        return
    torch.set_num_threads(1)
    nets = networks(a.batch, a.length)
    if a.sweep:
        out = Path(a.out) if "--out" in (sys.argv if argv is None else argv) else (
            Path(__file__).parent / "results" / "inplace_sweep.json")
        results = {"command": "python benchmarks/inplace_vs_hf.py " + " ".join(
            sys.argv[1:] if argv is None else argv)}
        for name in a.networks.split(","):
            results[name] = sweep(name, nets[name], a.batch, a.length)
            r = results[name]
            print(f"{name}: {r['schedules']} schedules, measured / predicted {r['min']:.4f} - "
                  f"{r['max']:.4f} (median {r['median']:.4f})", flush=True)
            out.write_text(json.dumps(results, indent=1) + "\n")
        return
    results = {}
    for name in a.networks.split(","):
        results[name] = run(name, nets[name], a.rounds, a.batch, a.length)
        r = results[name]
        hf = r["hf_every_layer"]
        print(f"{name}: eager {r['eager']['peak_bytes']} B {r['eager']['time_s']:.3f} s | HF "
              + (f"{hf['peak_bytes']} B {hf['time_s']:.3f} s | " if hf["peak_bytes"] else
                 f"{hf['note']} | ")
              + " | ".join(f"{k} {r[k]['peak_bytes']} B {r[k]['time_s']:.3f} s (budget "
                           f"{r[k]['budget']}, diff {r[k]['max_rel_diff_vs_eager']:.1e})"
                           for k in ("remat@hf", "remat@0.5")), flush=True)
        results["command"] = "python benchmarks/inplace_vs_hf.py " + " ".join(
            sys.argv[1:] if argv is None else argv)
        Path(a.out).write_text(json.dumps(results, indent=1) + "\n")  # after each network


if __name__ == "__main__":
    main()
