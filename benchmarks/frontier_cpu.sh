#!/usr/bin/env bash
# The frontier on the CPU: time per training step against allocator-measured peak memory,
# remat's dp beside checkpoint_sequential (every segment count) and torch.compile's
# activation_memory_budget, on five networks at two batch sizes and two input sizes each.
# Writes benchmarks/results/frontier_<network>.{json,png}.  Usage:
#   bash benchmarks/frontier_cpu.sh [NETWORK ...]      (default: all five)
# REPEATS=N sets the interleaved rounds (default 5); COMPILE=1 adds remat over compiled
# stages (remat-compiled points, beside torch.compile's memory budget).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results}
REPEATS=${REPEATS:-5}
EXTRA=()
[ "${COMPILE:-0}" = 1 ] && EXTRA+=(--compile-stages)
declare -A BATCH=([gpt2]=4,8 [bert]=4,8 [vit]=4,8 [hf-resnet]=8,16 [mlp]=256,512)
declare -A SIZE=([gpt2]=64,128 [bert]=64,128 [vit]=32,64 [hf-resnet]=32,64 [mlp]=128,256)
nets=("$@")
[ ${#nets[@]} -gt 0 ] || nets=(gpt2 bert vit hf-resnet mlp)
for n in "${nets[@]}"; do
  echo "== $n: remat frontier --network $n --batch ${BATCH[$n]} --size ${SIZE[$n]} --solvers dp --memory-budgets 0.5 --repeats $REPEATS --threads 1 ${EXTRA[*]} --out $OUT"
  remat frontier --network "$n" --batch "${BATCH[$n]}" --size "${SIZE[$n]}" --solvers dp \
    --memory-budgets 0.5 --repeats "$REPEATS" --threads 1 "${EXTRA[@]}" --out "$OUT"
done
