#!/usr/bin/env bash
# Session 2026-12-07, call B: rma_cli with the osc probe (components that make no windows here
# refused in one line) and the library's C and Python clients (torch's CUDA tensors included)
# on a GPU machine. Only the targets these tests run are built.
set -uo pipefail
. bench/gpu_env.sh
{ nvidia-smi --query-gpu=name,memory.total --format=csv; nproc; } >"$OUT/machine.txt" 2>&1
log "build"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >"$OUT/build.txt" 2>&1 &&
  cmake --build build-gpu -j"$(nproc)" --target refit refit_shared test_api osc_probe test_plan \
    >>"$OUT/build.txt" 2>&1 || { tail -30 "$OUT/build.txt"; exit 1; }
log "built"
for c in "" rdma ucx pt2pt sm; do
  echo "osc ${c:-default}: $(timeout 60 "${MPI[@]}" ${c:+--mca osc $c} -np 2 build-gpu/tests/osc_probe 2>&1 | tail -1)"
done | tee -a "$OUT/summary.txt"
(cd build-gpu && timeout 200 ctest -V -R "rma_cli|api_|test_plan$") >"$OUT/ctest.txt" 2>&1
log "ctest rma_cli, api, test_plan: exit $?"
grep -E "Test +#|tests passed|FAIL|osc|makes no|CUDA tensors|SKIP" "$OUT/ctest.txt" | head -40 | tee -a "$OUT/summary.txt"
log done
