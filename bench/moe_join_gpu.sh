#!/usr/bin/env bash
# MoE refits over ipc against a device copy measured in the same job (issue 31, acceptance 3),
# with the mapped copies joined (region_join.c) and, in the same call and build, without
# (REFIT_COPY_JOIN=0: the code as before). DeepSeek-V2-Lite (31.41 GB in 5,291 tensors) from
# trainer fsdp=1 (two processes on the one GPU) and from ep=2 (three) into rollout tp=1, each
# job verified element by element; REFIT_TIMELINE=1 prints each rank's stages (engine_mapped.c).
#
#   bench/moe_join_gpu.sh OUTDIR
# PARTS picks the steps (default "join nojoin ep2 tests"); builds into build-gpu like
# bench/moe_gpu.sh (jansson and xxhash headers may come from carry/deps).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bench/moe_join_gpu.sh OUTDIR}
. bench/gpu_env.sh
PARTS=${PARTS:-join nojoin ep2 tests}
has() { [[ " $PARTS " == *" $1 "* ]]; }
build_gpu || exit 1
log "built"
nvidia-smi --query-gpu=name,memory.total,clocks.max.memory --format=csv >"$OUT/gpu.txt" 2>&1

R=build-gpu/refit
H5="$OUT/moe-join.h5"
MODEL=${MODEL:-deepseek-v2-lite}
ITERS=(--warmup 1 --iters 5)
RUN=(run --model "$MODEL" --rollout tp=1 --transport ipc --verify full --timeout 300 --output "$H5")
JOB_TAIL=8 JOB_TIMEOUT=200
export REFIT_TIMELINE=1
has join && job moe-fsdp1-join "${MPI[@]}" -np 2 -x REFIT_TIMELINE -x REFIT_COPY_JOIN=1 \
  $R "${RUN[@]}" --trainer fsdp=1 --mode fused,grouped "${ITERS[@]}" --calibrate
has nojoin && job moe-fsdp1-nojoin "${MPI[@]}" -np 2 -x REFIT_TIMELINE -x REFIT_COPY_JOIN=0 \
  $R "${RUN[@]}" --trainer fsdp=1 --mode fused,grouped "${ITERS[@]}" --calibrate
if has ep2; then
  job moe-ep2-join "${MPI[@]}" -np 3 -x REFIT_TIMELINE -x REFIT_COPY_JOIN=1 \
    $R "${RUN[@]}" --trainer ep=2 --mode fused "${ITERS[@]}" --calibrate
  job moe-ep2-nojoin "${MPI[@]}" -np 3 -x REFIT_TIMELINE -x REFIT_COPY_JOIN=0 \
    $R "${RUN[@]}" --trainer ep=2 --mode fused "${ITERS[@]}"
fi
unset REFIT_TIMELINE
if has tests; then
  log "tests (gpu)"
  timeout 150 ctest --test-dir build-gpu -L gpu --output-on-failure >"$OUT/ctest.txt" 2>&1
  grep -E "Test +#|tests passed" "$OUT/ctest.txt" | tee -a "$OUT/summary.txt"
fi
log "done"
