#!/usr/bin/env bash
# Session 2026-12-07, call A (issue 35 on the H200): the GPU tests (gpu_run's rma and auto
# checks among them), the transport and library tests on this machine, whether its MPI is
# CUDA-aware, and bench/host.sh with rma beside mpi and shm.
set -uo pipefail
. bench/gpu_env.sh
{ nvidia-smi --query-gpu=name,memory.total --format=csv; nproc; which python3 mpirun; } >"$OUT/machine.txt" 2>&1
ompi_info --parsable --all 2>/dev/null | grep -E "mpi_built_with_cuda_support|^mca:osc:[a-z]+:version:mca" \
  >"$OUT/ompi.txt"; ompi_info | grep -iE "Open MPI:|osc" >>"$OUT/ompi.txt"
build_gpu || exit 1
log "built"
(cd build-gpu && timeout 220 ctest -L gpu --output-on-failure) >"$OUT/ctest_gpu.txt" 2>&1
log "ctest -L gpu: exit $?"
grep -E "Test +#|tests passed|Failed|FAIL" "$OUT/ctest_gpu.txt" | head -30 | tee -a "$OUT/summary.txt"
(cd build-gpu && timeout 150 ctest -R "transport_auto|rma_cli|api_|test_transport_mpi" --output-on-failure) >"$OUT/ctest_cpu.txt" 2>&1
log "ctest transport/api: exit $?"
grep -E "Test +#|tests passed|Failed|FAIL|SKIP" "$OUT/ctest_cpu.txt" | head -30 | tee -a "$OUT/summary.txt"
log "host.sh"
BUILD=build-gpu REPS=1 BUCKETS="64MiB 256MiB" TRANSPORTS="mpi shm rma rma:get" timeout 230 \
  bench/host.sh >"$OUT/host.txt" 2>&1
log "host.sh: exit $?"
cat "$OUT/host.txt" | tee -a "$OUT/summary.txt"
log done
