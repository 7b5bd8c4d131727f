#!/usr/bin/env bash
# Issue 16: what makes a read through another process's mapping slower (results/h200/README.md,
# "Where the two-process ipc time goes"). bench/ipcpieces.cu (Llama-3.1-8B's 291 tensors from a
# parent's cudaMalloc of exactly the bytes, of the bytes rounded up to 2 MiB, and from a CUDA
# VMM allocation), ../shared/probes/ipccopy.cu when carried as carry/probes/ipccopy.cu, then
# the two-process ipc refit of Llama-3.1-8B with its device arenas at their exact sizes
# (REFIT_DEVICE_ALLOC_ROUND=1, as refit allocated them before) and rounded up to 2 MiB (the
# default since), under --copy kernel, auto and engine, with
# REFIT_TIMELINE=1 and the device copy of the same bytes (--calibrate, once).
#
#   bench/mapping_gpu.sh OUTDIR     (builds build-gpu's refit when it is missing)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bench/mapping_gpu.sh OUTDIR}
. bench/gpu_env.sh
build_refit_and_probes || exit 1
for p in ipcpieces ipccopy; do
  if [ -x build-gpu/$p ]; then
    log "$p"
    timeout 150 build-gpu/$p >"$OUT/$p.txt" 2>&1
    echo "exit $?" >>"$OUT/$p.txt"
    tee -a "$OUT/summary.txt" <"$OUT/$p.txt"
  fi
done
R=build-gpu/refit
export REFIT_TIMELINE=1
MPI+=(-x REFIT_TIMELINE -x REFIT_DEVICE_ALLOC_ROUND)
ONE=(--model "${MODEL:-llama-3.1-8b}" --trainer fsdp=1 --rollout tp=1 --warmup 0 --iters 10
  --timeout 120 --output "$OUT/mapping.h5")
JOB_TAIL=6 JOB_TIMEOUT=150
export REFIT_DEVICE_ALLOC_ROUND=1
job exact-kernel "${MPI[@]}" -np 2 $R run "${ONE[@]}" --transport ipc --mode fused --copy kernel \
  --calibrate
export REFIT_DEVICE_ALLOC_ROUND=2097152
for copy in kernel engine auto; do
  job "round-$copy" "${MPI[@]}" -np 2 $R run "${ONE[@]}" --transport ipc --mode grouped,fused \
    --copy "$copy"
done
job round-jax-engine "${MPI[@]}" -np 2 $R run "${ONE[@]}" --transport ipc --mode fused \
  --trainer-order jax --copy engine
python3 bench/cold.py "$OUT/mapping.h5" >"$OUT/cold.txt" 2>&1 && tee -a "$OUT/summary.txt" <"$OUT/cold.txt"
log "done, $SECONDS s into the call"
