#!/usr/bin/env bash
# Issue 16 point 2: JAX-order (transposed) trainer shards over ipc, two processes on one GPU,
# Llama-3.1-8B: the trainer pushing into the rollout's mapped tensors (the default for JAX
# order) and the rollout pulling from the trainer's mapped shards (REFIT_MAPPED_PUSH=0), next
# to the same transposed copies in one process and the device copy of the same bytes
# (--calibrate) measured in the same call. REFIT_TIMELINE=1 gives each stage's GPU time
# (bench/timeline.py). results/h200/README.md has what it found.
#
#   bench/jax_gpu.sh OUTDIR     (builds build-gpu's refit when it is missing)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bench/jax_gpu.sh OUTDIR}
. bench/gpu_env.sh
build_refit_and_probes || exit 1
R=build-gpu/refit
export REFIT_TIMELINE=1 REFIT_MAPPED_PUSH=
MPI+=(-x REFIT_TIMELINE -x REFIT_MAPPED_PUSH)
ONE=(--model "${MODEL:-llama-3.1-8b}" --trainer fsdp=1 --rollout tp=1 --warmup 2
  --iters "${ITERS:-10}" --timeout 120 --output "$OUT/jax.h5")
JAX=(--transport ipc --mode fused,grouped --trainer-order jax)
JOB_TAIL=6 JOB_TIMEOUT=150
job hf-calibrated "${MPI[@]}" -np 2 $R run "${ONE[@]}" --transport ipc --mode fused --calibrate \
  --iters 5
job jax-push "${MPI[@]}" -np 2 $R run "${ONE[@]}" "${JAX[@]}"
REFIT_MAPPED_PUSH=0 job jax-pull "${MPI[@]}" -np 2 $R run "${ONE[@]}" "${JAX[@]}"
job jax-one-process "${MPI[@]}" -np 1 $R run "${ONE[@]}" --placement colocated --transport ipc \
  --mode fused --trainer-order jax
for f in "$OUT"/hf-*.txt "$OUT"/jax-*.txt; do
  python3 bench/timeline.py "$f" >>"$OUT/timelines.txt" 2>&1
done
cat "$OUT/timelines.txt"
(cd "$OUT" && tar czf jobs.tgz --exclude summary.txt --exclude timelines.txt ./*.txt &&
  find . -name '*.txt' ! -name summary.txt ! -name timelines.txt -delete)
