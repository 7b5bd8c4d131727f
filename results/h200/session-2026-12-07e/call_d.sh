#!/usr/bin/env bash
# Call D: gather with 8 units a warp; tests, memcheck, bench at 1 GiB and 256 MiB, probe.
set -uo pipefail
export SANITIZE=1 HOST_MIB=0 SANITIZE_TIMEOUT=120
bash bench/delta_gpu.sh "$OUT"
. bench/gpu_env.sh
timeout 60 build-gpu/refit-delta-bench device 256 >"$OUT/delta_device_256.txt" 2>&1
log "bench 256: exit $?"; cat "$OUT/delta_device_256.txt"
cd "$OUT" && cat sanitizer_*.txt probe_build.txt gpu.txt > other.txt && rm -f sanitizer_*.txt probe_build.txt gpu.txt build.txt
