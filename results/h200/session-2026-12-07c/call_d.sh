#!/usr/bin/env bash
# Call D: why the 8B example's copy failed (invalid argument in cudaMemcpyAsync): torch's
# allocator settings, and refit's ipc offers (REFIT_LOG=debug) on a 1B and the 8B model.
set -uo pipefail
. bench/gpu_env.sh
PY=/opt/torch/.venv/bin/python3
BUILT=1 build_gpu || exit 1
cmake --build build-gpu -j16 --target refit refit_shared >"$OUT/build2.txt" 2>&1 || tail -20 "$OUT/build2.txt"
log "built"
$PY - <<'PYEOF' >"$OUT/alloc.txt" 2>&1
import os, torch
print("PYTORCH_CUDA_ALLOC_CONF", os.environ.get("PYTORCH_CUDA_ALLOC_CONF"))
a = torch.empty(1 << 28, dtype=torch.bfloat16, device="cuda")
b = torch.empty(1 << 20, dtype=torch.bfloat16, device="cuda")
for s in torch.cuda.memory_snapshot():
    print({k: s[k] for k in s if k != "blocks"}, len(s["blocks"]))
try:
    print(torch._C._accelerator_getAllocatorSettings())
except Exception as e:
    print("no settings", e)
PYEOF
cat "$OUT/alloc.txt" | tee -a "$OUT/summary.txt"
for m in llama-3.2-1b llama-3.1-8b; do
  JOB_TAIL=8 job "ex_$m" "${MPI[@]}" -np 2 -x REFIT_LOG=debug -x PYTHONPATH="$PWD/python" \
    -x REFIT_LIB="$PWD/build-gpu/librefit.so" $PY examples/torch_fsdp2_refit.py --model $m \
    --trainer fsdp=1 --rollout tp=1 --transport ipc --warmup 1 --iters 2
  grep -E "ipc: |error" "$OUT/ex_$m.txt" | head -30 >>"$OUT/summary.txt"
done
log done
