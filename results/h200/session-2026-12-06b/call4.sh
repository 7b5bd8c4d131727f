#!/usr/bin/env bash
set -uo pipefail
. bench/gpu_env.sh
BUILT=1 build_gpu || build_gpu || exit 1
R=build-gpu/refit
JOB_TAIL=14 JOB_TIMEOUT=200 job 8b-delta-ipc "${MPI[@]}" -np 2 $R run --model llama-3.1-8b --trainer fsdp=1 \
  --rollout tp=1 --transport ipc --update sparse:0.01 --delta auto --iters 3 --output "$OUT/8b-delta-ipc.h5"
log done
