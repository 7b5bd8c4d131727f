#!/usr/bin/env bash
# What moves the bytes on the GPU (issue 16), as recorded in results/h200/README.md ("Copy
# engines"): Llama-3.1-8B from one trainer process to one rollout process on the one GPU over
# ipc, HF and JAX order, and the one-process colocated nccl refit, each with --copy kernel,
# auto and engine; the first job with --calibrate (a device-to-device copy of the same bytes
# in the same run: once, since its host memcpy and MPI exchange of 16 GB take seconds a
# mode). --warmup 0, so that the results file holds the cold first iteration beside the
# steady state and the setup: bench/cold.py prints the three.
#
#   bench/copy_gpu.sh OUTDIR     (builds build-gpu like bench/gpu.sh when it is missing)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bench/copy_gpu.sh OUTDIR}
. bench/gpu_env.sh
BUILT=${BUILT:-1} build_gpu || exit 1
R=build-gpu/refit
H5="$OUT/copy.h5"
MODEL=${MODEL:-llama-3.1-8b}
COPIES=${COPIES:-kernel auto engine}
ONE=(--model "$MODEL" --trainer fsdp=1 --rollout tp=1 --warmup 0 --iters 10 --timeout 300
  --output "$H5")
JOB_TAIL=4 JOB_TIMEOUT=200
job limits "${MPI[@]}" -np 2 $R run "${ONE[@]}" --transport ipc --mode fused --calibrate
for copy in $COPIES; do
  job "ipc-hf-$copy" "${MPI[@]}" -np 2 $R run "${ONE[@]}" --transport ipc --mode grouped,fused \
    --copy "$copy"
done
for copy in $COPIES; do
  job "ipc-jax-$copy" "${MPI[@]}" -np 2 $R run "${ONE[@]}" --transport ipc --mode fused \
    --trainer-order jax --copy "$copy"
done
for copy in $COPIES; do
  job "colocated-$copy" "${MPI[@]}" -np 1 $R run "${ONE[@]}" --placement colocated \
    --transport nccl --mode fused --copy "$copy"
done
