#!/usr/bin/env bash
# FP8 rollouts on the lent H200, as recorded in results/h200/README.md ("FP8 rollouts"):
#   1. the GPU tests (test_fp8_gpu: the kernel against the CPU reference; gpu_run: fp8 over
#      ipc, star, fanout, MoE and colocated nccl, every byte and scale checked);
#   2. the quantize kernel alone against a device copy of the same bf16 bytes (refit-gpu-bench);
#   3. PyTorch: two Llama-3.1-8B layers (bench/models/llama-3.1-8b-2layers.json, the 8B's
#      tensors) quantized by DeepGEMM's per_block_cast_to_fp8 on the GPU (bench/fp8_torch.py)
#      against refit's CPU reference byte for byte, then refit's GPU runs of the same weights
#      over ipc and colocated nccl checked against PyTorch's file with refit verify;
#   4. Llama-3.1-8B bf16 trainer -> fp8 rollout over ipc (HF order: quantized at the source's
#      pieces; JAX order: bf16 lands, quantized at the destination) and colocated nccl, each
#      with --calibrate (a device copy of the same bytes in the same job), beside the bf16 refit
#      of the same layout.
#
#   bench/fp8_gpu.sh OUTDIR
# Builds into build-gpu like bench/gpu.sh (same needs). Large files go to a temporary folder,
# not OUTDIR; the jobs' logs end up in OUTDIR/jobs.tgz beside summary.txt and fp8.h5. PARTS
# picks steps (default "tests kernels torch ipc colocated full"; full checks the 8B fp8 rollout
# byte by byte on the host, minutes). --calibrate repeats its limits every iteration, seconds
# each for 16 GB (the host exchange and memcpy), hence ITERS (default 5).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bench/fp8_gpu.sh OUTDIR}
. bench/gpu_env.sh
build_gpu || exit 1
PARTS=" ${PARTS:-tests kernels torch ipc colocated full} "
part() { [[ $PARTS == *" $1 "* ]]; }
trap 'cd "$OUT" && ls ./*.txt >/dev/null 2>&1 && tar -czf jobs.tgz --exclude summary.txt ./*.txt &&
  find . -maxdepth 1 -name "*.txt" ! -name summary.txt -delete; rm -rf "$TMPD"' EXIT
TMPD=$(mktemp -d)
if part tests; then
  log "tests (gpu)"
  ctest --test-dir build-gpu -L gpu --output-on-failure >"$OUT/ctest.txt" 2>&1
  grep -E "Test +#|tests passed" "$OUT/ctest.txt" | tee -a "$OUT/summary.txt"
fi

if part kernels; then
  log "kernels vs device-to-device copy"
  build-gpu/refit-gpu-bench >"$OUT/kernels.txt" 2>&1
  grep -E "^#|^op|^d2d|quantize" "$OUT/kernels.txt" | tee -a "$OUT/summary.txt"
fi

R=build-gpu/refit
JOB_TAIL=8 JOB_TIMEOUT=400
TWO=bench/models/llama-3.1-8b-2layers.json
part torch && {
job ckpt-bf16 $R checkpoint --model $TWO --checkpoint "$TMPD/bf16.safetensors"
job ckpt-fp8 $R checkpoint --model $TWO --dtype fp8 --checkpoint "$TMPD/ref-fp8.safetensors"
job torch python3 bench/fp8_torch.py "$TMPD/bf16.safetensors" "$TMPD/ref-fp8.safetensors" \
  "$TMPD/torch-fp8.safetensors"
job two-ipc "${MPI[@]}" -np 2 $R run --model $TWO --trainer fsdp=1 --rollout tp=1 \
  --transport ipc --rollout-dtype fp8 --mode grouped,fused --iters 3 --verify full \
  --output "$TMPD/two-ipc.h5"
job two-ipc-jax "${MPI[@]}" -np 2 $R run --model $TWO --trainer fsdp=1 --rollout tp=1 \
  --trainer-order jax --transport ipc --rollout-dtype fp8 --mode fused --iters 3 --verify full \
  --output "$TMPD/two-ipc-jax.h5"
job two-nccl "${MPI[@]}" -np 1 $R run --model $TWO --trainer fsdp=1 --rollout tp=1 \
  --placement colocated --transport nccl --rollout-dtype fp8 --mode grouped,fused --iters 3 \
  --verify full --output "$TMPD/two-nccl.h5"
for run in two-ipc two-ipc-jax two-nccl; do
  job verify-torch-$run $R verify "$TMPD/$run.h5" --checkpoint "$TMPD/torch-fp8.safetensors"
done
}

MODEL=${MODEL:-llama-3.1-8b}
H5="$OUT/fp8.h5"
ONE=(--model "$MODEL" --trainer fsdp=1 --rollout tp=1 --warmup 1 --iters "${ITERS:-5}"
  --verify none --calibrate --output "$H5")
part ipc && {
job bf16-ipc "${MPI[@]}" -np 2 $R run "${ONE[@]}" --transport ipc --mode grouped,fused
job fp8-ipc "${MPI[@]}" -np 2 $R run "${ONE[@]}" --transport ipc --mode grouped,fused \
  --rollout-dtype fp8
job fp8-ipc-jax "${MPI[@]}" -np 2 $R run "${ONE[@]}" --transport ipc --mode fused \
  --rollout-dtype fp8 --trainer-order jax
}
part colocated && {
job bf16-colocated "${MPI[@]}" -np 1 $R run "${ONE[@]}" --placement colocated \
  --transport nccl --mode grouped,fused
job fp8-colocated "${MPI[@]}" -np 1 $R run "${ONE[@]}" --placement colocated \
  --transport nccl --mode grouped,fused --rollout-dtype fp8
}
if part full; then # the 8B fp8 rollout checked byte by byte on the host (minutes)
  JOB_TIMEOUT=500 job fp8-ipc-full "${MPI[@]}" -np 2 $R run --model "$MODEL" --trainer fsdp=1 \
    --rollout tp=1 --transport ipc --mode fused --rollout-dtype fp8 --iters 1 --verify full \
    --timeout 480 --output "$H5"
fi
