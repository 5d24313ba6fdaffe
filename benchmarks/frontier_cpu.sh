#!/usr/bin/env bash
# The frontier the user sees, on the CPU: time per training step against allocator-measured
# peak memory on the ORIGINAL model, remat (eager drop-in at every breakpoint of the DP's
# makespan, and compiled as one graph) beside plain, Hugging Face's activation checkpointing
# (every K layers), checkpoint_sequential and torch.compile's activation_memory_budget,
# interleaved in one process, on ten transformers networks (small configs, random weights).
# Writes benchmarks/results/frontier_<network>.{json,png}; then
#   python benchmarks/frontier_table.py           # the table of docs/torch.md
#   python benchmarks/frontier_table.py --readme  # the README headline
# Usage: bash benchmarks/frontier_cpu.sh [NETWORK ...]    (default: all ten)
# REPEATS (5), BACKEND (aot_eager_decomp_partition: the same min-cut partitioner and memory
# budget as inductor, eager kernels; inductor's C++ compilation took 170-270 s per graph on
# the 2-core machine of this sweep), MAX_POINTS (16 remat breakpoints), SCALE (small).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results}
REPEATS=${REPEATS:-5}
BACKEND=${BACKEND:-aot_eager_decomp_partition}
MAX_POINTS=${MAX_POINTS:-16}
SCALE=${SCALE:-small}
PY=${PYTHON:-python}
nets=("$@")
[ ${#nets[@]} -gt 0 ] || nets=(llama qwen2 opt gpt-neo gpt2 distilbert vit convnext swin resnet)
for n in "${nets[@]}"; do
  echo "== $n"
  "$PY" -m remat_theory.cli frontier --network "$n" --scale "$SCALE" --threads 1 \
    --repeats "$REPEATS" --backend "$BACKEND" --compile-budgets 0,0.5,1 --compiled-points 3 \
    --max-points "$MAX_POINTS" --out "$OUT"
done
