#!/usr/bin/env bash
# Call C: gather reads only captured entries; bench with the plain scatter column; probe;
# compute-sanitizer; ncu of the encode's kernels.
set -uo pipefail
export SANITIZE=1 HOST_MIB=0 SANITIZE_TIMEOUT=150
bash bench/delta_gpu.sh "$OUT"
. bench/gpu_env.sh
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
timeout 200 ncu --metrics $M --csv --page raw -c 330 build-gpu/refit-delta-bench device 1024 >"$OUT/bench_ncu.csv" 2>"$OUT/bench_ncu.err"
log "ncu: exit $?"
cd "$OUT" && cat sanitizer_*.txt probe_build.txt gpu.txt > other.txt && rm -f sanitizer_*.txt probe_build.txt gpu.txt bench_ncu.err build.txt
