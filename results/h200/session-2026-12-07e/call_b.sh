#!/usr/bin/env bash
# Call B: the mark without mask traffic for captured units; delta tests, bench, probe,
# compute-sanitizer; then the 8B delta refit over ipc.
set -uo pipefail
export SANITIZE=1 HOST_MIB=0 SANITIZE_TIMEOUT=150
bash bench/delta_gpu.sh "$OUT"
. bench/gpu_env.sh
cmake --build build-gpu -j16 --target refit >>"$OUT/build.txt" 2>&1 || { tail -20 "$OUT/build.txt"; exit 1; }
log "refit built"
export REFIT_MODEL_DIR=$PWD/configs/models
job 8b-delta-ipc "${MPI[@]}" -np 2 build-gpu/refit run --model llama-3.1-8b --trainer fsdp=1 --rollout tp=1 --transport ipc --update sparse:0.01 --delta off,auto --iters 3 --output "$OUT/8b-delta-ipc.h5"
rm -f "$OUT"/*.h5
log "all done"
