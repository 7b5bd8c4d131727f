#!/usr/bin/env bash
# The delta encodings on the lent GPU (issue 33, acceptance 3), in one call:
#   tests   test_delta_gpu: the kernels' encoded bytes, counts, hashes, applied destinations and
#           refusals against the host's (and test_delta, the host's own);
#   bench   refit-delta-bench: encode and apply of 1 GiB of bf16 (MIB, default 1024) at changed
#           fractions 1e-6, 1e-3, 0.01, 0.5 and 1, each against its own memory limit from a
#           device-to-device copy in the same process; then the same on the host (HOST_MIB,
#           default 256; 0 leaves it out).
# Builds only what it runs (Release, build-gpu).
#
#   bench/delta_gpu.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bench/delta_gpu.sh OUTDIR}
. bench/gpu_env.sh
log "build"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >"$OUT/build.txt" 2>&1 &&
  cmake --build build-gpu -j"$(nproc)" --target test_delta test_delta_gpu refit-delta-bench \
    >>"$OUT/build.txt" 2>&1 || {
  tail -40 "$OUT/build.txt"
  exit 1
}
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
log "done"
