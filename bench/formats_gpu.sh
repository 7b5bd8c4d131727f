#!/usr/bin/env bash
# The quantized formats on the GPU (results/h200/README.md, "Formats against PyTorch"): the GPU
# tests (both 128x128 rules through the kernels), then for Llama-3.1-8B's linear weights (two of
# its layers, bench/models/llama-3.1-8b-2layers.json) and a MoE's experts (Qwen3-30B-A3B, two
# layers): refit checkpoint writes the bf16 weights and every format (the CPU reference), and
# bench/formats_torch.py quantizes the bf16 file again in PyTorch on the GPU by each rule and
# counts the bytes that differ. fp8-ue8m0 then runs over ipc and colocated nccl and refit verify
# compares each run with its checkpoint; --calibrate prints the device copy of the same bytes
# beside each run's time.
#
#   OUT=DIR bench/formats_gpu.sh
cd "$(dirname "$0")/.."
OUT=${OUT:?}
mkdir -p "$OUT"
. bench/gpu_env.sh
gpu_tests || exit 1
R=build-gpu/refit
T=$(mktemp -d /tmp/formats.XXXXXX)
FORMATS="fp8 fp8-ue8m0 mxfp8 mxfp8-floor mxfp4 mxfp4-floor nvfp4"
for m in llama-3.1-8b-2layers qwen3-30b-a3b-2layers; do
  model=bench/models/$m.json
  log "$m: checkpoints"
  $R checkpoint --model $model --checkpoint "$T/$m.safetensors" >"$OUT/$m-ckpt.txt" 2>&1
  for f in $FORMATS; do
    $R checkpoint --model $model --dtype $f --checkpoint "$T/$m-$f.safetensors" >>"$OUT/$m-ckpt.txt" 2>&1 &
  done
  wait
  JOB_TAIL=10 job "$m-torch" python3 bench/formats_torch.py "$T/$m.safetensors" "$T/$m" $FORMATS
  JOB_TAIL=6 job "$m-ue8m0-ipc" "${MPI[@]}" -np 2 $R run --model $model --trainer fsdp=1 \
    --rollout tp=1 --transport ipc --rollout-dtype fp8-ue8m0 --mode grouped,fused \
    --calibrate --output "$T/$m-ipc.h5"
  JOB_TAIL=6 job "$m-ue8m0-nccl" "${MPI[@]}" -np 1 $R run --model $model --trainer fsdp=1 \
    --rollout tp=1 --placement colocated --transport nccl --rollout-dtype fp8-ue8m0 \
    --mode grouped,fused --calibrate --output "$T/$m-nccl.h5"
  for run in ipc nccl; do
    JOB_TAIL=3 job "$m-verify-$run" $R verify "$T/$m-$run.h5" --checkpoint "$T/$m-fp8-ue8m0.safetensors"
  done
  rm -f "$T"/$m*
done
rm -rf "$T"
log done
