#!/usr/bin/env bash
# Call E: the 8B example's refused copy, on a two-layer model of 8B's widths: which copy.
set -uo pipefail
. bench/gpu_env.sh
PY=/opt/torch/.venv/bin/python3
[ -f build-gpu/CMakeCache.txt ] || { cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >"$OUT/cfg.txt" 2>&1; }
cmake --build build-gpu -j16 --target refit refit_shared >"$OUT/build.txt" 2>&1 || tail -20 "$OUT/build.txt"
log "built"
sed 's/"num_hidden_layers": *32/"num_hidden_layers": 2/' configs/models/llama-3.1-8b.json >/tmp/l8b2.json
grep num_hidden /tmp/l8b2.json
n=0
for extra in "" "--option copy=kernel"; do
  n=$((n + 1))
  JOB_TAIL=6 job "ex$n" "${MPI[@]}" -np 2 -x REFIT_LOG=debug -x PYTHONPATH="$PWD/python" \
    -x REFIT_LIB="$PWD/build-gpu/librefit.so" $PY examples/torch_fsdp2_refit.py --model /tmp/l8b2.json \
    --trainer fsdp=1 --rollout tp=1 --transport ipc --warmup 1 --iters 2 $extra
  f="$OUT/ex$n.txt"
  grep -E "copy engine refused|error" "$f" | head -5 | tee -a "$OUT/summary.txt"
  grep -E "ipc: offer|opened" "$f" > "$OUT/offers$n.txt"
done
log done
