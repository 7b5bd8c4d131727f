#!/usr/bin/env bash
# Session 2026-12-06: verify main's GPU code (ctest -L gpu), kernels vs limits, delta over ipc
# on Llama-3.1-8B, nvfp4 MoE, delta kernels bench.
set -uo pipefail
. bench/gpu_env.sh
nvidia-smi --query-gpu=name,memory.total --format=csv >"$OUT/gpu.txt" 2>&1
build_gpu || exit 1
log "built"
R=build-gpu/refit
export REFIT_MODEL_DIR=$PWD/configs/models
(cd build-gpu && timeout 170 ctest -L gpu --output-on-failure) >"$OUT/ctest_gpu.txt" 2>&1
log "ctest -L gpu: exit $?"
grep -E "Test +#|tests passed|Failed|FAIL|test_fp8_gpu:" "$OUT/ctest_gpu.txt" | head -30 | tee -a "$OUT/summary.txt"
JOB_TAIL=10 JOB_TIMEOUT=90 job 8b-delta-ipc "${MPI[@]}" -np 2 $R run --model llama-3.1-8b --trainer fsdp=1 \
  --rollout tp=1 --transport ipc --update sparse:0.01 --delta off,auto --iters 3 --calibrate --output "$OUT/8b-delta-ipc.h5"
log "kernels"
timeout 40 build-gpu/refit-gpu-bench >"$OUT/kernels.txt" 2>&1
grep -E "quantize" "$OUT/kernels.txt" | tee -a "$OUT/summary.txt"
log "delta bench"
timeout 40 build-gpu/refit-delta-bench device 1024 >"$OUT/delta_device.txt" 2>&1
tail -7 "$OUT/delta_device.txt" | tee -a "$OUT/summary.txt"
JOB_TAIL=8 JOB_TIMEOUT=90 job moe-nvfp4 "${MPI[@]}" -np 3 $R run --model bench/models/deepseek-v3-16b.json \
  --trainer ep=2 --rollout tp=1 --transport ipc --rollout-dtype nvfp4 --mode fused --iters 3 --calibrate
log done
