#!/usr/bin/env bash
# Call H: the faster delta kernels: their GPU tests and refit-delta-bench against the device copy.
set -uo pipefail
. bench/gpu_env.sh
nvidia-smi --query-gpu=name,memory.total --format=csv >"$OUT/machine.txt" 2>&1
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >"$OUT/cfg.txt" 2>&1
cmake --build build-gpu -j16 --target test_delta_gpu refit-delta-bench >"$OUT/build.txt" 2>&1 || { tail -30 "$OUT/build.txt"; exit 1; }
log "built"
(cd build-gpu && timeout 100 ctest -R '^test_delta_gpu' --output-on-failure) >"$OUT/ctest_delta.txt" 2>&1
log "ctest delta gpu: exit $?"; grep -E "Test +#|tests passed|assert|FAIL|ok" "$OUT/ctest_delta.txt" | head -20
timeout 90 build-gpu/refit-delta-bench device 1024 >"$OUT/delta_device.txt" 2>&1
log "delta bench: exit $?"; cat "$OUT/delta_device.txt"
log done
