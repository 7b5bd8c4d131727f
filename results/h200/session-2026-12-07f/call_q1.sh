#!/usr/bin/env bash
# Call Q1 (issue 32): the 4-bit quantizers by thresholds. GPU tests, the kernel bench, ncu on
# five quantize launches, the other GPU and transport tests, then the kernel bench of HEAD's
# fp8_cuda.cu (before) on the same card.
set -uo pipefail
. bench/gpu_env.sh
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv >"$OUT/machine.txt" 2>&1
build_gpu || exit 1
log "built"
(cd build-gpu && timeout 60 ctest -R "test_fp8_gpu|test_gpu$" --output-on-failure) >"$OUT/ctest_gpu.txt" 2>&1
log "test_fp8_gpu: exit $?"
grep -E "Test +#|tests passed|Failed|assert|want" "$OUT/ctest_gpu.txt" | head -20 | tee -a "$OUT/summary.txt"
timeout 120 build-gpu/refit-gpu-bench >"$OUT/kernels.txt" 2>&1
log "bench: exit $?"
grep -E "^d2d|quantize" "$OUT/kernels.txt" | tee -a "$OUT/summary.txt"
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats"
for k in "mxfp8jax 62" "mxfp4row 98" "mxfp4jax 110" "nvfp4row 146" "nvfp4jax 158"; do
  set -- $k
  echo "===== $1 (launch $2)" >>"$OUT/ncu.txt"
  timeout 60 ncu $S -k regex:quantize_batch --launch-skip $2 --launch-count 1 build-gpu/refit-gpu-bench 4 >>"$OUT/ncu.txt" 2>&1
  log "ncu $1: exit $?"
done
(cd build-gpu && timeout 150 ctest -L gpu -E "test_fp8_gpu|test_gpu$" --output-on-failure) >>"$OUT/ctest_gpu.txt" 2>&1
log "ctest -L gpu (rest): exit $?"
(cd build-gpu && timeout 90 ctest -R "rma_cli|api_c" --output-on-failure) >"$OUT/ctest_cpu.txt" 2>&1
log "rma_cli, api_c: exit $?"
grep -E "Test +#|tests passed|Failed|FAIL" "$OUT/ctest_gpu.txt" "$OUT/ctest_cpu.txt" | tail -20 | tee -a "$OUT/summary.txt"
cp carry/fp8_cuda_before.cu src/verify/fp8_cuda.cu
cmake --build build-gpu -j16 --target refit-gpu-bench >>"$OUT/build.txt" 2>&1
timeout 120 build-gpu/refit-gpu-bench >"$OUT/kernels_before.txt" 2>&1
log "bench before: exit $?"
grep -E "^d2d|quantize" "$OUT/kernels_before.txt" | tee -a "$OUT/summary.txt"
rm -f "$OUT/build.txt"
log done
