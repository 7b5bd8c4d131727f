#!/usr/bin/env bash
# Call G: where the delta and quantize kernels spend their time (ncu durations and DRAM bytes).
set -uo pipefail
. bench/gpu_env.sh
nvidia-smi --query-gpu=name,memory.total --format=csv >"$OUT/machine.txt" 2>&1
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >"$OUT/cfg.txt" 2>&1
cmake --build build-gpu -j16 --target refit-delta-bench refit-gpu-bench >"$OUT/build.txt" 2>&1 || { tail -20 "$OUT/build.txt"; exit 1; }
log "built"
timeout 120 build-gpu/refit-delta-bench device 1024 >"$OUT/delta_device.txt" 2>&1
log "delta bench: exit $?"; cat "$OUT/delta_device.txt"
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size
timeout 200 ncu --metrics $M --csv --page raw -c 700 build-gpu/refit-delta-bench device 256 >"$OUT/ncu_delta.csv" 2>"$OUT/ncu_delta.err"
log "ncu delta: exit $?"
timeout 150 ncu --metrics $M --csv --page raw -k regex:'quantize|amax' -c 120 build-gpu/refit-gpu-bench 2 >"$OUT/ncu_quant.csv" 2>"$OUT/ncu_quant.err"
log "ncu quant: exit $?"
timeout 100 build-gpu/refit-gpu-bench 15 >"$OUT/kernels.txt" 2>&1
log "gpu bench: exit $?"; grep -iE "limit|d2d|fp4|mx|fp8" "$OUT/kernels.txt" | head -40
log done
