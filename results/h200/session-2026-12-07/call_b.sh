#!/usr/bin/env bash
# Session 2026-12-07, call B: rma_cli with the osc probe (components that make no windows here
# refused in one line), the library's C and Python clients (torch's CUDA tensors included) on a
# GPU machine, and bench/host.sh once more on this machine.
set -uo pipefail
. bench/gpu_env.sh
{ nvidia-smi --query-gpu=name,memory.total --format=csv; nproc; } >"$OUT/machine.txt" 2>&1
build_gpu || exit 1
log "built"
for c in "" rdma ucx pt2pt sm; do
  echo "osc ${c:-default}: $(timeout 60 "${MPI[@]}" ${c:+--mca osc $c} -np 2 build-gpu/tests/osc_probe 2>&1 | tail -1)"
done | tee -a "$OUT/summary.txt"
(cd build-gpu && timeout 200 ctest -V -R "rma_cli|api_|test_plan$") >"$OUT/ctest.txt" 2>&1
log "ctest rma_cli, api, test_plan: exit $?"
grep -E "Test +#|tests passed|FAIL|osc|CUDA tensors" "$OUT/ctest.txt" | head -40 | tee -a "$OUT/summary.txt"
log "host.sh"
BUILD=build-gpu REPS=1 BUCKETS="64MiB 256MiB" TRANSPORTS="mpi shm rma rma:get" timeout 230 \
  bench/host.sh >"$OUT/host.txt" 2>&1
log "host.sh: exit $?"
tee -a "$OUT/summary.txt" <"$OUT/host.txt"
log done
