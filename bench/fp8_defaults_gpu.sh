#!/usr/bin/env bash
# The fp8 defaults on the GPU (results/h200/README.md, "fp8 checks on the GPU"): the GPU tests,
# then the job that used to fail, Llama-3.1-8B into an fp8 rollout over ipc with the default
# --verify full and --timeout (its CPU check took about 120 s and the peer gave up after 62 s),
# and the same with --verify checksum, whose time is the transfer's without the full check;
# the device copy of the bf16 bytes is the limit line of --calibrate.
#
#   OUT=DIR bench/fp8_defaults_gpu.sh
cd "$(dirname "$0")/.."
OUT=${OUT:?}
mkdir -p "$OUT"
. bench/gpu_env.sh
gpu_tests || exit 1
R=build-gpu/refit
JOB_TAIL=14 JOB_TIMEOUT=300 job fp8-8b-default "${MPI[@]}" -np 2 $R run \
  --model llama-3.1-8b --trainer fsdp=1 --rollout tp=1 --transport ipc --rollout-dtype fp8 \
  --calibrate
JOB_TAIL=14 JOB_TIMEOUT=300 job fp8-8b-checksum "${MPI[@]}" -np 2 $R run \
  --model llama-3.1-8b --trainer fsdp=1 --rollout tp=1 --transport ipc --rollout-dtype fp8 \
  --verify checksum
log done
