#!/usr/bin/env bash
# Session 2026-12-07 (c), call C (issue 34 on the GPU): the library over ipc with the caller's
# CUDA tensors registered (api tests), the FSDP2 example (tiny, cpu and cuda), then
# bench/library_gpu.sh: the example against refit run on Llama-3.1-8B and the PyTorch peer.
set -uo pipefail
. bench/gpu_env.sh
PY=/opt/torch/.venv/bin/python3
{ nvidia-smi --query-gpu=name,memory.total --format=csv; nproc; $PY -c "import torch; print(torch.__version__)"; } >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt" >>"$OUT/summary.txt"
build_gpu || exit 1
log "built"
# The example on tiny over ipc first: the 8B bench runs only if it verifies.
JOB_TAIL=8 job example_tiny "${MPI[@]}" -np 2 -x PYTHONPATH="$PWD/python" \
  -x REFIT_LIB="$PWD/build-gpu/librefit.so" $PY examples/torch_fsdp2_refit.py --model tiny \
  --trainer fsdp=1 --rollout tp=1 --transport ipc --warmup 1 --iters 2
ok=$(grep -c "equal" "$OUT/example_tiny.txt")
if [ "$ok" -ge 2 ]; then
  PY=$PY PEER=carry/peer/torch_colocated_refit.py BUILD=build-gpu JOBS=2 timeout 330 bench/library_gpu.sh
  log "library_gpu: exit $?"
fi
(cd build-gpu && REFIT_PYTHON=$PY timeout 200 ctest -V -R "api_|test_engine_caller") >"$OUT/ctest.txt" 2>&1
log "ctest api, engine_caller: exit $?"
grep -E "Test +#|tests passed|FAIL|SKIP|Error|error|ok \(|equal|iterations" "$OUT/ctest.txt" | head -60 | tee -a "$OUT/summary.txt"
log done
