#!/usr/bin/env bash
# Issue 31 on the GPU: the GPU tests with the merged tree (joined copies, --plan auto default,
# the pair-by-pair schedule, hierarchical), DeepSeek-V2-Lite over ipc fused/grouped against the
# device copy in the same job, and the default plan (auto) over ipc with replicas.
cd "$(dirname "$0")/.."  # run as bench/merged31_gpu.sh with OUT set
OUT=${OUT:?}
. bench/gpu_env.sh
gpu_tests || exit 1
R=build-gpu/refit
JOB_TAIL=10 JOB_TIMEOUT=150 job auto-ipc-dp2 "${MPI[@]}" -np 3 $R run --model llama-3.2-1b --trainer fsdp=1 \
  --rollout tp=1,dp=2 --transport ipc --verify full --mode grouped,fused --iters 3 --timeout 60
JOB_TAIL=10 JOB_TIMEOUT=150 job auto-nccl-colo "${MPI[@]}" -np 2 $R run --model llama-3.2-1b --trainer fsdp=2 \
  --rollout tp=1,dp=2 --placement colocated --transport nccl --verify full --mode grouped,fused --iters 3 --timeout 60
JOB_TAIL=12 JOB_TIMEOUT=240 job moe-fsdp1 "${MPI[@]}" -np 2 $R run --model deepseek-v2-lite --trainer fsdp=1 \
  --rollout tp=1 --transport ipc --verify full --mode fused,grouped --warmup 1 --iters 5 --calibrate \
  --timeout 200 --output "$OUT/moe.h5"
log done
