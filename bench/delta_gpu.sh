#!/usr/bin/env bash
# The delta encodings on the lent GPU (issue 33, acceptance 3), in one call:
#   tests   test_delta_gpu: the kernels' encoded bytes, counts, hashes, applied destinations and
#           refusals against the host's (and test_delta, the host's own);
#   bench   refit-delta-bench: encode and apply of 1 GiB of bf16 (MIB, default 1024) at changed
#           fractions 1e-6, 1e-3, 0.01, 0.5 and 1, each against its own memory limit from a
#           device-to-device copy in the same process; then the same on the host (HOST_MIB,
#           default 256; 0 leaves it out);
#   probe   bench/scatterprobe.cu: the rate memory gives a plain scatter of sparse changes and
#           ways of writing whole sectors, against a device copy, for apply's limit;
#   sanitize  with SANITIZE=1, test_delta_gpu under compute-sanitizer's memcheck and racecheck.
# Builds only what it runs (Release, build-gpu).
#
#   bench/delta_gpu.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bench/delta_gpu.sh OUTDIR}
. bench/gpu_env.sh
log "build"
mkdir -p build-gpu
(nvcc -O3 -arch=sm_90 -std=c++17 -o build-gpu/scatterprobe bench/scatterprobe.cu \
  >"$OUT/probe_build.txt" 2>&1) &
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >"$OUT/build.txt" 2>&1 &&
  cmake --build build-gpu -j"$(nproc)" --target test_delta test_delta_gpu refit-delta-bench \
    >>"$OUT/build.txt" 2>&1 || {
  tail -40 "$OUT/build.txt"
  exit 1
}
wait
nvidia-smi --query-gpu=name,memory.total --format=csv >"$OUT/gpu.txt" 2>&1
(cd build-gpu && timeout 240 ctest -R '^test_delta' --output-on-failure) >"$OUT/ctest_delta.txt" 2>&1
log "ctest test_delta, test_delta_gpu: exit $?"
grep -E "Test +#|tests passed|Failed|test_delta" "$OUT/ctest_delta.txt" | tee -a "$OUT/summary.txt"
log "refit-delta-bench device ${MIB:-1024}"
timeout 240 build-gpu/refit-delta-bench device "${MIB:-1024}" >"$OUT/delta_device.txt" 2>&1
echo "exit $?" >>"$OUT/delta_device.txt"
tee -a "$OUT/summary.txt" <"$OUT/delta_device.txt"
if [ "${HOST_MIB:-256}" != 0 ]; then
  log "refit-delta-bench host ${HOST_MIB:-256}"
  timeout 240 build-gpu/refit-delta-bench host "${HOST_MIB:-256}" >"$OUT/delta_host.txt" 2>&1
  echo "exit $?" >>"$OUT/delta_host.txt"
  tee -a "$OUT/summary.txt" <"$OUT/delta_host.txt"
fi
log "scatterprobe"
timeout 120 build-gpu/scatterprobe >"$OUT/scatterprobe.txt" 2>&1
echo "exit $?" >>"$OUT/scatterprobe.txt"
tee -a "$OUT/summary.txt" <"$OUT/scatterprobe.txt"
if [ "${SANITIZE:-0}" = 1 ]; then
  for tool in memcheck racecheck; do
    log "compute-sanitizer --tool $tool test_delta_gpu"
    (cd build-gpu && timeout "${SANITIZE_TIMEOUT:-240}" compute-sanitizer --tool $tool --error-exitcode 9 \
      tests/test_delta_gpu) >"$OUT/sanitizer_$tool.txt" 2>&1
    echo "exit $?" >>"$OUT/sanitizer_$tool.txt"
    tail -3 "$OUT/sanitizer_$tool.txt" | tee -a "$OUT/summary.txt"
  done
fi
log "done"
