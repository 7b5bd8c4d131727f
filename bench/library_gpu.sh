#!/usr/bin/env bash
# Issue 34, point 3, in one call on one GPU: the PyTorch FSDP2 example refitting through the
# library (examples/torch_fsdp2_refit.py, its trainer shards and rollout tensors registered in
# place and mapped across over ipc) against `refit run` of the same model, layout, transport and
# mode, and against the PyTorch peer's packed and per-tensor refits when PEER names its script
# (two processes on the GPU each time). Both refit runs go to one results file in the order run,
# each JOBS times alternately, so `refit report` puts their medians side by side.
#
#   OUT=/tmp/lib PEER=carry/peer/torch_colocated_refit.py bench/library_gpu.sh
#
# MODEL (default llama-3.1-8b), ITERS (10), WARMUP (2), MODE (fused), JOBS (2), PY (the first
# python3 that imports torch: /opt/torch/.venv's, then PATH's), BUILD (build-gpu, built here
# unless it holds refit and librefit.so).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to a directory for the results}
. bench/gpu_env.sh
MODEL=${MODEL:-llama-3.1-8b}
ITERS=${ITERS:-10}
WARMUP=${WARMUP:-2}
MODE=${MODE:-fused}
JOBS=${JOBS:-2}
BUILD=${BUILD:-build-gpu}
if [ -z "${PY:-}" ]; then
  for cand in /opt/torch/.venv/bin/python3 "$(command -v python3)"; do
    "$cand" -c "import torch" 2>/dev/null && PY=$cand && break
  done
fi
: "${PY:?no python3 here imports torch; set PY}"
if [ ! -x "$BUILD/refit" ] || [ ! -e "$BUILD/librefit.so" ]; then
  log "build"
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >"$OUT/build.txt" 2>&1 &&
    cmake --build "$BUILD" -j"$(nproc)" --target refit refit_shared >>"$OUT/build.txt" 2>&1 ||
    { tail -30 "$OUT/build.txt"; exit 1; }
fi
results=$OUT/library.h5
rm -f "$results"
layout=(--model "$MODEL" --trainer fsdp=1 --rollout tp=1 --transport ipc --mode "$MODE")
for j in $(seq "$JOBS"); do
  JOB_TAIL=4 job "refit_run_$j" "${MPI[@]}" -np 2 "$BUILD/refit" run "${layout[@]}" \
    --trainer-style fsdp2 --warmup "$WARMUP" --iters "$ITERS" --output "$results"
  JOB_TAIL=6 job "example_$j" "${MPI[@]}" -np 2 -x PYTHONPATH="$PWD/python" \
    -x REFIT_LIB="$PWD/$BUILD/librefit.so" "$PY" examples/torch_fsdp2_refit.py "${layout[@]}" \
    --warmup "$WARMUP" --iters "$ITERS" --output "$results"
done
if [ -n "${PEER:-}" ]; then
  JOB_TAIL=5 job peer "$PY" "$PEER" "$ITERS"
fi
"$BUILD/refit" report "$results" -o "$OUT/report" >"$OUT/report.txt" 2>&1
log "report: exit $?"
grep -E "^\|" "$OUT/report/report.md" | head -20 | tee -a "$OUT/summary.txt"
