#!/usr/bin/env bash
# Call A: apply's limit. refit-delta-bench, the scatter probe, and both under ncu (DRAM bytes).
set -uo pipefail
. bench/gpu_env.sh
nvidia-smi --query-gpu=name,memory.total,ecc.mode.current --format=csv >"$OUT/machine.txt" 2>&1
(nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/scatterprobe bench/scatterprobe.cu >"$OUT/probe_build.txt" 2>&1) &
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >"$OUT/cfg.txt" 2>&1
cmake --build build-gpu -j16 --target test_delta_gpu refit-delta-bench >"$OUT/build.txt" 2>&1 || { tail -30 "$OUT/build.txt"; exit 1; }
wait
log "built"; cat "$OUT/probe_build.txt"
timeout 90 build-gpu/refit-delta-bench device 1024 >"$OUT/delta_device.txt" 2>&1
log "delta bench: exit $?"; cat "$OUT/delta_device.txt"
timeout 120 /tmp/scatterprobe >"$OUT/probe.txt" 2>&1
log "probe: exit $?"; cat "$OUT/probe.txt"
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_op_write.sum,lts__t_sectors_op_read.sum
timeout 200 ncu --metrics $M --csv --page raw -c 144 /tmp/scatterprobe >"$OUT/probe_ncu.csv" 2>"$OUT/probe_ncu.err"
log "probe ncu: exit $?"
timeout 150 ncu --metrics $M --csv --page raw -k regex:'scatter|hash_kernel|count_kernel' -c 40 build-gpu/refit-delta-bench device 1024 >"$OUT/bench_ncu.csv" 2>"$OUT/bench_ncu.err"
log "bench ncu: exit $?"
log done
