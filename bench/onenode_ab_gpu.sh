#!/usr/bin/env bash
# The one-node table's jobs (ipc, two processes on one GPU) in an older tree against the
# working tree, alternated, with the device copy of the same bytes (bench/ab_gpu.sh):
# Llama-3.1-8B in every mode, then DeepSeek-V2-Lite in grouped and fused. OLD (default
# carry/old7) is the older tree: `git archive 7c07655 | tar -x -C carry/old7 --exclude='results/*'`.
# Everything but the HDF5 files ends in OUT/onenode.tgz (the device returns few files).
#
#   OUT=DIR bench/onenode_ab_gpu.sh
cd "$(dirname "$0")/.."
OUT=${OUT:?}
W=$OUT/w
mkdir -p "$W/llama" "$W/moe"
. bench/gpu_env.sh
nvidia-smi --query-gpu=name,memory.total --format=csv >"$W/gpu.txt" 2>&1
ROUNDS=2 JOB_TIMEOUT=150 bash bench/ab_gpu.sh "$W/llama" old="${OLD:-carry/old7}" new=. >"$W/llama.txt" 2>&1
echo "llama exit $?" >>"$W/summary.txt"
JOB='--model deepseek-v2-lite --trainer fsdp=1 --rollout tp=1 --transport ipc --mode grouped,fused --verify checksum' \
  ROUNDS=2 JOB_TIMEOUT=200 bash bench/ab_gpu.sh "$W/moe" old="${OLD:-carry/old7}" new=. >"$W/moe.txt" 2>&1
echo "moe exit $?" >>"$W/summary.txt"
for f in "$W"/*.txt "$W"/*/*.txt; do tr -d '\000' <"$f" >"$f.clean" && mv "$f.clean" "$f"; done
tar -czf "$OUT/onenode.tgz" -C "$W" --exclude='*.h5' --exclude='*.lock' . && rm -rf "$W/llama/build-"* 2>/dev/null
grep -h "" "$W/llama/ab.txt" "$W/moe/ab.txt" "$W/summary.txt" 2>/dev/null
rm -rf "$W"
