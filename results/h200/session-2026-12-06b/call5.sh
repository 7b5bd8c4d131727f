#!/usr/bin/env bash
set -uo pipefail
. bench/gpu_env.sh
BUILT=1 build_gpu || exit 1
R=build-gpu/refit
JOB_TAIL=10 JOB_TIMEOUT=160 job moe-nvfp4 "${MPI[@]}" -np 3 $R run --model bench/models/deepseek-v3-16b.json \
  --trainer ep=2 --rollout tp=1 --transport ipc --rollout-dtype nvfp4 --mode grouped --iters 3
log done
