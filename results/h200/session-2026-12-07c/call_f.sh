#!/usr/bin/env bash
# Call F: with joined runs off for the caller's allocations, the 8B example against refit run
# and the PyTorch peer (bench/library_gpu.sh), then the library's tests.
set -uo pipefail
. bench/gpu_env.sh
PY=/opt/torch/.venv/bin/python3
nvidia-smi --query-gpu=name,memory.total --format=csv >"$OUT/machine.txt" 2>&1
[ -f build-gpu/CMakeCache.txt ] || cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >"$OUT/cfg.txt" 2>&1
cmake --build build-gpu -j16 >"$OUT/build.txt" 2>&1 || { tail -20 "$OUT/build.txt"; exit 1; }
log "built"
PY=$PY PEER=carry/peer/torch_colocated_refit.py BUILD=build-gpu JOBS=2 timeout 200 bench/library_gpu.sh
log "library_gpu: exit $?"
(cd build-gpu && REFIT_PYTHON=$PY timeout 100 ctest -R "api_|test_engine_caller") >"$OUT/ctest.txt" 2>&1
log "ctest api, engine_caller: exit $?"
grep -E "Test +#|tests passed" "$OUT/ctest.txt" | tee -a "$OUT/summary.txt"
log done
