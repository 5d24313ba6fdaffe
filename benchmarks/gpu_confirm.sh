#!/usr/bin/env bash
# One-command confirmation of the model on a GPU: profile the built-in networks, solve them at
# 30/50/80% of their store-all peak with every registered solver, run the schedules with
# autograd, and compare the allocator-measured peak memory (torch.cuda.memory_allocated /
# max_memory_allocated around each operation; on the CPU torch.profiler's memory events, see
# docs/torch_measurement.md) and the time with the simulator's predictions.
# Deterministic kernels are on (--deterministic), so gradients can be compared with plain
# backpropagation bit for bit on the GPU as well.
#
#   bash benchmarks/gpu_confirm.sh                 # CUDA when available, otherwise the CPU path
#   DEVICE=cpu bash benchmarks/gpu_confirm.sh --models rnn --budgets 0.5   # extra args go to remat confirm
#   TESTS=1 bash benchmarks/gpu_confirm.sh         # first the profiler's tests on that device
#   FRONTIER=1 bash benchmarks/gpu_confirm.sh      # then remat frontier on the same device
#   FRONTIER=1 FRONTIER_ONLY=1 NETWORKS=llama bash benchmarks/gpu_confirm.sh   # the frontier only
#   OFFLOAD=1 bash benchmarks/gpu_confirm.sh       # then the offload executor (see the end)
#
# Writes benchmarks/results/confirm_<device>.json and .png, and the table to
# benchmarks/results/confirm_<device>.txt.  On one GPU ("large" networks) it took about 5 minutes
# (H200: 42+40+80+142 s for mlp, resnet, transformer, rnn, before the allocator accounting); on
# a CPU it uses the "small" networks (about 10 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
DEVICE="${DEVICE:-auto}"
if [ "$DEVICE" = auto ]; then
  DEVICE=$("$PY" -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')")
fi
if [ "$DEVICE" = cuda ]; then
  SCALE="${SCALE:-large}"
  "$PY" -c "import torch; print('GPU:', torch.cuda.get_device_name(0), '| torch', torch.__version__)"
else
  SCALE="${SCALE:-small}"
  echo "no CUDA device: running the CPU path (scale $SCALE)" >&2
fi
if [ "${TESTS:-0}" = 1 ]; then
  REMAT_TEST_DEVICE="$DEVICE" "$PY" -m pytest -q -m torch tests/test_torch_profile.py tests/test_torch_cli.py
fi
mkdir -p benchmarks/results
start=$(date +%s)
[ "${FRONTIER_ONLY:-0}" = 1 ] || {
  echo "# remat confirm --device $DEVICE --scale $SCALE --repeats 2 --deterministic --profile-repeats 3 --ilp-time-limit 5 --threads ${THREADS:-1} $*"
  "$PY" -m remat_theory.cli confirm --device "$DEVICE" --scale "$SCALE" --repeats 2 --deterministic \
    --profile-repeats 3 --ilp-time-limit 5 --threads "${THREADS:-1}" \
    --out-dir benchmarks/results "$@"
} | tee "benchmarks/results/confirm_${DEVICE}.txt"
[ "${FRONTIER_ONLY:-0}" = 1 ] || \
  echo "done in $(( $(date +%s) - start )) s: benchmarks/results/confirm_${DEVICE}.{json,png,txt}"
# FRONTIER=1: then the frontier the user sees on the same device (the original model: plain,
# Hugging Face's checkpointing every K layers, checkpoint_sequential, torch.compile with
# activation_memory_budget under inductor, remat eager at the DP's breakpoints and compiled as
# one graph), one network at a time, into benchmarks/results/frontier_<device>/ (NETWORKS to
# choose them, FSCALE for their size: large on a GPU, small on the CPU; FRONTIER_ONLY=1 skips
# remat confirm).  Not yet run on a GPU: no GPU was lent when it was written.
if [ "${FRONTIER:-0}" = 1 ]; then
  if [ "$DEVICE" = cuda ]; then FSCALE="${FSCALE:-large}"; else FSCALE="${FSCALE:-small}"; fi
  for n in ${NETWORKS:-llama qwen2 opt gpt-neo gpt2 distilbert vit convnext swin resnet}; do
    echo "== remat frontier --network $n --device $DEVICE --scale $FSCALE"
    "$PY" -m remat_theory.cli frontier --network "$n" --device "$DEVICE" --scale "$FSCALE" \
      --threads "${THREADS:-1}" --repeats "${REPEATS:-9}" --backend "${BACKEND:-inductor}" \
      --compile-budgets 0,0.3,0.6,1 --compiled-points 4 --max-points "${MAX_POINTS:-16}" \
      --out "benchmarks/results/frontier_${DEVICE}"
  done
fi
# OFFLOAD=1: then the offload executor on the same device: its tests (tests/test_torch_offload*.py,
# on REMAT_TEST_DEVICE=$DEVICE), and remat confirm --offload (the copy bandwidth measured with
# CUDA events, device <-> pinned host; save-on-cpu, offload-all and dp-offload against dp alone)
# into benchmarks/results/offload_confirm_<device>/.  On a GPU this is the CUDA path (side
# stream, pinned host buffers, events), which has not run on a GPU yet: no GPU was lent when it
# was written; on the CPU it is the correctness mode (device peaks compared, times not
# meaningful).
if [ "${OFFLOAD:-0}" = 1 ]; then
  REMAT_TEST_DEVICE="$DEVICE" "$PY" -m pytest -q -m torch tests/test_torch_offload.py \
    tests/test_torch_offload_module.py tests/test_torch_offload_cli.py
  mkdir -p "benchmarks/results/offload_confirm_${DEVICE}"
  echo "# remat confirm --offload --device $DEVICE --scale $SCALE --solvers save-on-cpu,offload-all,dp-offload,dp --budgets 0.3,0.5,0.8 --repeats 2 --deterministic --threads ${THREADS:-1}"
  "$PY" -m remat_theory.cli confirm --offload --device "$DEVICE" --scale "$SCALE" \
    --solvers save-on-cpu,offload-all,dp-offload,dp --budgets 0.3,0.5,0.8 --repeats 2 \
    --deterministic --profile-repeats 3 --threads "${THREADS:-1}" \
    --out-dir "benchmarks/results/offload_confirm_${DEVICE}" \
    | tee "benchmarks/results/offload_confirm_${DEVICE}/table.txt"
fi
