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
# Every step is timed by the timing thread's CPU clock and the wall clock (one torch thread);
# each verdict uses the clock with less measured noise (see docs/torch.md).
# REPEATS (9 interleaved rounds), INDUCTOR (the networks whose compiled families use inductor,
# default "resnet", INDUCTOR= for none: its C++ compilation takes 2-5 minutes per graph on a shared 2-core
# machine, six graphs per network), BACKEND (the others': aot_eager_decomp_partition, the
# same min-cut partitioner and memory budget as inductor with eager kernels), MAX_POINTS
# (16 remat breakpoints), SCALE (small).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results}
REPEATS=${REPEATS:-9}
BACKEND=${BACKEND:-aot_eager_decomp_partition}
INDUCTOR=${INDUCTOR-resnet}
MAX_POINTS=${MAX_POINTS:-16}
SCALE=${SCALE:-small}
PY=${PYTHON:-python}
nets=("$@")
[ ${#nets[@]} -gt 0 ] || nets=(llama qwen2 opt gpt-neo gpt2 distilbert vit convnext swin resnet)
for n in "${nets[@]}"; do
  backend=$BACKEND
  case " $INDUCTOR " in *" $n "*) backend=inductor ;; esac
  echo "== $n ($backend)"
  "$PY" -m remat_theory.cli frontier --network "$n" --scale "$SCALE" --threads 1 \
    --repeats "$REPEATS" --backend "$backend" --compile-budgets 0,0.5,1 --compiled-points 6 \
    --max-points "$MAX_POINTS" --out "$OUT"
done
