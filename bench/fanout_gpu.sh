#!/usr/bin/env bash
# Rollout replicas on the lent H200 (issue 15), as recorded in results/h200/README.md
# ("Rollout replicas"): Llama-3.1-8B from one trainer process to dp=2 and dp=4 replicas of
# tp=1, every process on the one GPU, over ipc, with the p2p, star and fanout plans in one job
# each (--plan sweeps), then a 1:1 job with --calibrate for the device copy of the same bytes.
# The dp jobs are not calibrated: the calibration's host buffers for 4 replicas' bytes do not
# fit in the machine's memory.
#
#   bench/fanout_gpu.sh OUTDIR     (after bench/gpu.sh or bench/moe_gpu.sh built build-gpu)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bench/fanout_gpu.sh OUTDIR}
. bench/gpu_env.sh
BUILT=${BUILT:-1} build_gpu || exit 1
R=build-gpu/refit
H5="$OUT/fanout.h5"
MODEL=${MODEL:-llama-3.1-8b}
JOB_TAIL=14 JOB_TIMEOUT=300
for dp in 2 4; do
  job "plans-dp$dp" "${MPI[@]}" -np $((dp + 1)) $R run --model "$MODEL" --trainer fsdp=1 \
    --rollout "tp=1,dp=$dp" --transport ipc --plan p2p,star,fanout --mode grouped,fused \
    --warmup 2 --iters 10 --timeout 300 --output "$H5"
  job "plan-dp$dp" $R plan --model "$MODEL" --trainer fsdp=1 --rollout "tp=1,dp=$dp" --plan fanout
done
job limits-1to1 "${MPI[@]}" -np 2 $R run --model "$MODEL" --trainer fsdp=1 --rollout tp=1 \
  --transport ipc --mode grouped,fused --warmup 2 --iters 10 --calibrate --timeout 300 --output "$H5"
