#!/usr/bin/env bash
# MoE refits over ipc against a device copy measured in the same job (issue 31, acceptance 3),
# with the mapped copies joined (region_join.c) and fused stages launched early
# (engine_mapped.c) and, in the same call and build, without either (the code as before).
# DeepSeek-V2-Lite (31.41 GB in 5,291 tensors) from trainer fsdp=1 (two processes on the one
# GPU) and from ep=2 (three) into rollout tp=1, then Llama-3.1-8B both ways; every job verified
# element by element; REFIT_TIMELINE=1 prints each rank's stages (engine_mapped.c).
#
#   bench/moe_join_gpu.sh OUTDIR
# PARTS picks the steps (default "fsdp1 ep2 llama tests"); builds into build-gpu like
# bench/moe_gpu.sh (jansson and xxhash headers may come from carry/deps).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bench/moe_join_gpu.sh OUTDIR}
. bench/gpu_env.sh
PARTS=${PARTS:-fsdp1 ep2 llama tests}
has() { [[ " $PARTS " == *" $1 "* ]]; }
build_gpu || exit 1
log "built"
nvidia-smi --query-gpu=name,memory.total,clocks.max.memory --format=csv >"$OUT/gpu.txt" 2>&1

R=build-gpu/refit
H5="$OUT/moe-join.h5"
MODEL=${MODEL:-deepseek-v2-lite}
ITERS=(--warmup 1 --iters 5)
RUN=(run --rollout tp=1 --transport ipc --verify full --timeout 300 --output "$H5")
JOB_TAIL=8 JOB_TIMEOUT=200
# The code as before: REFIT_COPY_JOIN=0 (no joined runs) and REFIT_MAPPED_EARLY=0 (fused
# lists the whole stage before its one launch).
BEFORE=(-x REFIT_COPY_JOIN=0 -x REFIT_MAPPED_EARLY=0)
export REFIT_TIMELINE=1
M=("${MPI[@]}" -x REFIT_TIMELINE)
if has fsdp1; then
  job moe-fsdp1 "${M[@]}" -np 2 $R "${RUN[@]}" --model "$MODEL" --trainer fsdp=1 \
    --mode fused,grouped "${ITERS[@]}" --calibrate
  job moe-fsdp1-before "${M[@]}" "${BEFORE[@]}" -np 2 $R "${RUN[@]}" --model "$MODEL" \
    --trainer fsdp=1 --mode fused,grouped "${ITERS[@]}" --calibrate
  job moe-fsdp1-joinonly "${M[@]}" -x REFIT_MAPPED_EARLY=0 -np 2 $R "${RUN[@]}" --model "$MODEL" \
    --trainer fsdp=1 --mode fused "${ITERS[@]}"
fi
if has ep2; then
  job moe-ep2 "${M[@]}" -np 3 $R "${RUN[@]}" --model "$MODEL" --trainer ep=2 --mode fused \
    "${ITERS[@]}" --calibrate
  job moe-ep2-before "${M[@]}" "${BEFORE[@]}" -np 3 $R "${RUN[@]}" --model "$MODEL" --trainer ep=2 \
    --mode fused "${ITERS[@]}"
fi
if has llama; then # the dense refit must not lose what it had (issue 31, acceptance 2)
  for v in "" -before; do
    extra=()
    [ -n "$v" ] && extra=("${BEFORE[@]}")
    job "llama$v" "${M[@]}" "${extra[@]}" -np 2 $R "${RUN[@]}" --model llama-3.1-8b \
      --trainer fsdp=1 --mode fused,grouped --warmup 2 --iters 10
  done
fi
unset REFIT_TIMELINE
if has tests; then
  log "tests (gpu)"
  timeout 150 ctest --test-dir build-gpu -L gpu --output-on-failure >"$OUT/ctest.txt" 2>&1
  grep -E "Test +#|tests passed" "$OUT/ctest.txt" | tee -a "$OUT/summary.txt"
fi
log "done"
