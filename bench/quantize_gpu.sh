#!/usr/bin/env bash
# The quantizers on the lent GPU against their limits, each measured in the same call or job:
#   tests    the GPU tests (test_fp8_gpu: every kernel against the CPU reference, batched and
#            transposed; gpu_run: the engine's GPU paths, fp8 and mxfp8 among them, verified);
#   kernels  refit-gpu-bench: each quantizer alone, row-major and transposed (JAX order),
#            against its own memory limit (the bytes it reads and writes at the rate of a
#            device-to-device copy in the same process);
#   jax      Llama-3.1-8B fsdp=1 -> tp=1 into fp8 over ipc, JAX and HF order, fused and
#            grouped, against the device copy of its bf16 bytes (--calibrate, same job);
#   moe      a 16B DeepSeek-V3-architecture MoE (bench/models/deepseek-v3-16b.json: MLA, 64
#            routed and 2 shared experts a layer, at Moonlight-16B-A3B's sizes) from trainer
#            ep=2 to tp=1 over ipc in each of MOE_FORMATS (default fp8 mxfp8), against the
#            device copy of its bf16 bytes.
#
#   bench/quantize_gpu.sh OUTDIR      (PARTS="tests kernels jax moe" by default)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bench/quantize_gpu.sh OUTDIR}
. bench/gpu_env.sh
PARTS=" ${PARTS:-tests kernels jax moe} "
part() { [[ $PARTS == *" $1 "* ]]; }
build_gpu || exit 1
log "built"
R=build-gpu/refit
if part tests; then
  export REFIT_MODEL_DIR=$PWD/configs/models
  (cd build-gpu && timeout 240 ctest -L gpu --output-on-failure) >"$OUT/ctest_gpu.txt" 2>&1
  log "ctest -L gpu: exit $?"
  grep -E "Test +#|tests passed|Failed|test_fp8_gpu:" "$OUT/ctest_gpu.txt" | tee -a "$OUT/summary.txt"
fi
if part kernels; then
  log "kernels"
  build-gpu/refit-gpu-bench >"$OUT/kernels.txt" 2>&1
  grep -E "^#|^op|^d2d|quantize" "$OUT/kernels.txt" | tee -a "$OUT/summary.txt"
fi
JOB_TAIL=7
if part jax; then
  for order in jax hf; do
    job "8b-fp8-$order" "${MPI[@]}" -np 2 $R run --model llama-3.1-8b --trainer fsdp=1 \
      --rollout tp=1 --trainer-order $order --transport ipc --rollout-dtype fp8 \
      --mode fused,grouped --iters 5 --calibrate
  done
fi
if part moe; then
  for f in ${MOE_FORMATS:-fp8 mxfp8}; do
    job "moe-$f" "${MPI[@]}" -np 3 $R run --model bench/models/deepseek-v3-16b.json --trainer ep=2 --rollout tp=1 \
      --transport ipc --rollout-dtype "$f" --mode fused,grouped --iters 3 --calibrate
  done
fi
log "done"
