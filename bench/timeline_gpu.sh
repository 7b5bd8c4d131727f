#!/usr/bin/env bash
# Issue 16, point 1's first step: where the two-process ipc refit's time goes. Llama-3.1-8B
# from one trainer process to one rollout process on the one GPU over ipc (HF order, pull),
# with REFIT_TIMELINE=1 (every rank prints each stage's steps: sync, first notes, copy
# launches, copy waits, the copies' GPU time by CUDA events, second notes; engine_mapped.c),
# beside the same mapped code in one process (-np 1 --placement colocated --transport ipc),
# the one-process colocated nccl refit, and the device copy of the same bytes (--calibrate,
# once). Every job under --copy kernel, auto and engine, --warmup 0 (bench/cold.py prints the
# cold first iteration and the setup beside the steady state). Then bench/ipcpieces.cu: the
# same 291 tensor copies through a cudaIpc mapping and in one process's memory, apart from
# refit. Jobs go in order of importance; none starts after BUDGET seconds (default 480).
#
#   bench/timeline_gpu.sh OUTDIR     (builds build-gpu's refit when it is missing)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bench/timeline_gpu.sh OUTDIR}
. bench/gpu_env.sh
BUDGET=${BUDGET:-480}
build_refit_and_probes || exit 1
R=build-gpu/refit
export REFIT_TIMELINE=1
MPI+=(-x REFIT_TIMELINE)
ONE=(--model "${MODEL:-llama-3.1-8b}" --trainer fsdp=1 --rollout tp=1 --warmup 0 --iters 10
  --timeout 120 --output "$OUT/timeline.h5")
JOB_TAIL=6 JOB_TIMEOUT=150
# run NAME ARGS...: a job unless the budget is spent
run() {
  if [ "$SECONDS" -ge "$BUDGET" ]; then
    log "$1: skipped, $SECONDS s into the call"
    return 0
  fi
  job "$@"
  log "($SECONDS s into the call)"
}
probe() {
  if [ -x build-gpu/ipcpieces ] && [ "$SECONDS" -lt "$BUDGET" ]; then
    log "ipcpieces"
    timeout 120 build-gpu/ipcpieces >"$OUT/ipcpieces.txt" 2>&1
    echo "exit $?" >>"$OUT/ipcpieces.txt"
    tee -a "$OUT/summary.txt" <"$OUT/ipcpieces.txt"
  fi
}
run limits "${MPI[@]}" -np 2 $R run "${ONE[@]}" --transport ipc --mode fused --copy kernel \
  --calibrate
run ipc-hf-kernel "${MPI[@]}" -np 2 $R run "${ONE[@]}" --transport ipc --mode grouped,fused \
  --copy kernel
run ipc1-kernel "${MPI[@]}" -np 1 $R run "${ONE[@]}" --placement colocated --transport ipc \
  --mode grouped,fused --copy kernel
probe
run colocated-auto "${MPI[@]}" -np 1 $R run "${ONE[@]}" --placement colocated --transport nccl \
  --mode grouped,fused --copy auto
run ipc-hf-engine "${MPI[@]}" -np 2 $R run "${ONE[@]}" --transport ipc --mode grouped,fused \
  --copy engine
run ipc-hf-auto "${MPI[@]}" -np 2 $R run "${ONE[@]}" --transport ipc --mode grouped,fused \
  --copy auto
run ipc1-engine "${MPI[@]}" -np 1 $R run "${ONE[@]}" --placement colocated --transport ipc \
  --mode grouped,fused --copy engine
run colocated-kernel "${MPI[@]}" -np 1 $R run "${ONE[@]}" --placement colocated \
  --transport nccl --mode grouped,fused --copy kernel
run colocated-engine "${MPI[@]}" -np 1 $R run "${ONE[@]}" --placement colocated \
  --transport nccl --mode grouped,fused --copy engine
run ipc-jax-auto "${MPI[@]}" -np 2 $R run "${ONE[@]}" --transport ipc --mode fused \
  --trainer-order jax --copy auto
run ipc-jax-engine "${MPI[@]}" -np 2 $R run "${ONE[@]}" --transport ipc --mode fused \
  --trainer-order jax --copy engine
python3 bench/cold.py "$OUT/timeline.h5" >"$OUT/cold.txt" 2>&1 && tee -a "$OUT/summary.txt" <"$OUT/cold.txt"
log "done, $SECONDS s into the call"
