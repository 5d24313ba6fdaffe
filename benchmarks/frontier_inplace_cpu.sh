#!/usr/bin/env bash
# The frontier of benchmarks/frontier_cpu.sh rerun through the in-place API
# (remat_theory.torch.inplace.rematerialize on the ORIGINAL transformers model, its hooks
# attached to a copy of it) against plain and Hugging Face's activation checkpointing every K
# layers, interleaved in one process, on the same ten networks (small configs, random weights).
# Only the methods the verdict needs run (--methods): nothing captured, no drop-in, no
# checkpoint_sequential, no torch.compile families.  The in-place points: every breakpoint of
# its plan's predicted time (up to MAX_POINTS), each HF every-K level's measured step peak as
# a byte budget and its measured activation peak as a fraction budget, the smallest fraction
# accepted, and plain autograd through the hooks (the noise pair beside plain).
# Writes benchmarks/results/frontier_inplace_<network>.{json,png}; then
#   python benchmarks/frontier_inplace_table.py      # the table of docs/torch.md
# Usage: bash benchmarks/frontier_inplace_cpu.sh [NETWORK ...]    (default: all ten)
# REPEATS (9 interleaved rounds), MAX_POINTS (16), SCALE (small).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results}
REPEATS=${REPEATS:-9}
MAX_POINTS=${MAX_POINTS:-16}
SCALE=${SCALE:-small}
PY=${PYTHON:-python}
nets=("$@")
[ ${#nets[@]} -gt 0 ] || nets=(llama qwen2 opt gpt-neo gpt2 distilbert vit convnext swin resnet)
for n in "${nets[@]}"; do
  echo "== $n"
  "$PY" -m remat_theory.cli frontier --network "$n" --scale "$SCALE" --threads 1 \
    --repeats "$REPEATS" --methods plain,hf_checkpointing,remat_inplace \
    --inplace-max-points "$MAX_POINTS" --tag inplace --no-progress --out "$OUT" \
    || echo "!! $n failed (exit $?)"
done
