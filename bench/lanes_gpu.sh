#!/usr/bin/env bash
# fused's two lanes on the GPU (results/h200/README.md, "Two fused lanes"): the GPU tests; the
# default plan over ipc with replicas (a path the lanes do not touch); fanout over mpi with the
# weights on the GPU in every mode, --verify full; and fused fanout over mpi against an older
# tree (OLD, default carry/old: `git archive 3a5df15 | tar -x -C carry/old --exclude='results/*'`)
# with bench/ab_gpu.sh, the device copy of the same bytes beside it.
#
#   OUT=DIR bench/lanes_gpu.sh
cd "$(dirname "$0")/.."
OUT=${OUT:?}
mkdir -p "$OUT"
. bench/gpu_env.sh
gpu_tests || exit 1
R=build-gpu/refit
JOB_TAIL=10 JOB_TIMEOUT=150 job auto-ipc-dp2 "${MPI[@]}" -np 3 $R run --model llama-3.2-1b --trainer fsdp=1 \
  --rollout tp=1,dp=2 --transport ipc --verify full --mode grouped,fused --iters 3 --timeout 60
JOB_TAIL=10 JOB_TIMEOUT=200 job fanout-mpi-dev "${MPI[@]}" -np 4 $R run --model llama-3.2-1b --trainer fsdp=1 \
  --rollout tp=1,dp=3 --plan fanout --transport mpi --memory device --verify full --mode unfused,grouped,fused \
  --iters 3 --timeout 100
export JOB='--model llama-3.2-1b --trainer fsdp=1 --rollout tp=1,dp=3 --plan fanout --transport mpi --memory device --mode fused --verify full'
NP=4 ROUNDS=2 JOB_TIMEOUT=200 bash bench/ab_gpu.sh "$OUT" old="${OLD:-carry/old}" new=. >"$OUT/ab.txt" 2>&1
log "ab: exit $?"; tail -30 "$OUT/ab.txt" | tee -a "$OUT/summary.txt"
log done
