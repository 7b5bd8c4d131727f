#!/usr/bin/env bash
# Mixture-of-experts refits on the lent H200, as recorded in results/h200/README.md ("MoE"):
# the GPU tests, then DeepSeek-V2-Lite (15.7 B parameters, 64 routed experts in 26 MoE layers,
# MLA; 31.4 GB in bf16, so trainer and rollout copies fit twice over on one GPU) over ipc,
# each job with --calibrate: a device-to-device copy of the same bytes in the same run (through
# 2 GiB buffers: two more whole copies of the model do not fit beside trainer and rollout). The
# calibration also times the host exchange and memcpy of 31 GB, a few seconds a round: hence
# --timeout 900 and 5 iterations.
#
#   bench/moe_gpu.sh OUTDIR
# Builds into build-gpu like bench/gpu.sh (same needs; jansson and xxhash headers may come
# from carry/deps).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bench/moe_gpu.sh OUTDIR}
. bench/gpu_env.sh
build_gpu || exit 1
if [ "${TESTS:-1}" = 1 ]; then # TESTS=0 when the same call runs them elsewhere
  log "tests (gpu)"
  ctest --test-dir build-gpu -L gpu --output-on-failure >"$OUT/ctest.txt" 2>&1
  grep -E "Test +#|tests passed" "$OUT/ctest.txt" | tee -a "$OUT/summary.txt"
fi

R=build-gpu/refit
H5="$OUT/moe.h5"
MODEL=${MODEL:-deepseek-v2-lite}
JOB_TAIL=8 JOB_TIMEOUT=400
# 1:1 (two processes), then ep=2 -> tp=2,ep (four processes: whole experts, the same ones on
# both ends, move as blocks), each verified element by element.
job moe-1to1 "${MPI[@]}" -np 2 $R run --model "$MODEL" --trainer fsdp=1 --rollout tp=1 \
  --transport ipc --mode grouped,fused --warmup 1 --iters 5 --calibrate --verify full --timeout 900 --output "$H5"
job moe-ep2 "${MPI[@]}" -np 4 $R run --model "$MODEL" --trainer ep=2 --rollout tp=2,ep \
  --transport ipc --mode unfused,grouped,fused --warmup 1 --iters 5 --calibrate --verify full --timeout 900 --output "$H5"
job moe-ep2-plan $R plan --model "$MODEL" --trainer ep=2 --rollout tp=2,ep
