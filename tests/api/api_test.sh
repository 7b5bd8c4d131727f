# The library against `refit run`: a client of include/refit.h (c: tests/api/test_api.c through
# librefit.so; python and torch: tests/api/test_binding.py through the ctypes binding, with numpy
# arrays or torch tensors; skipped, 77, without them) moves the tiny model
# from trainer fsdp=2 to rollout tp=2 (colocated, mpi, fused) and records its runs; each of them
# must hold the rollout and trainer checksums `refit run` records for the same job.
. "$REFIT_SOURCE_DIR/tests/cli/lib.sh"
client=${1:?usage: api_test.sh c|python|torch}
# The first python3 that imports what the client needs: REFIT_PYTHON, the system's (Debian's
# python3-numpy), then the one on PATH (the lent GPU machines keep torch in a virtual
# environment's; a pyenv shim may have neither).
needs=numpy
[ "$client" = torch ] && needs="numpy, torch"
PY=
if [ "$client" != c ]; then
  for cand in ${REFIT_PYTHON:-} /usr/bin/python3 "$(command -v python3 || true)"; do
    if [ -n "$cand" ] && "$cand" -c "import $needs" 2>/dev/null; then
      PY=$cand
      break
    fi
  done
  if [ -z "$PY" ]; then
    echo "SKIP: no python3 here imports $needs (REFIT_PYTHON names one)"
    exit 77
  fi
fi

job=(--model tiny --trainer fsdp=2 --rollout tp=2 --placement colocated --transport mpi
  --mode fused)
expect_exit 0 "${MPIRUN[@]}" -np 2 "$REFIT" run "${job[@]}" --warmup 0 --iters 1 \
  --output "$TMP/run.h5"

if [ "$client" = c ]; then
  expect_exit 0 "${MPIRUN[@]}" -np 2 "$REFIT_API_TEST" "$TMP/api.h5"
  runs=(0 1) # the caller's memory on both sides, then the library's trainer weights
else
  expect_exit 0 "${MPIRUN[@]}" -np 2 env PYTHONPATH="$REFIT_SOURCE_DIR/python" \
    "$PY" "$REFIT_SOURCE_DIR/tests/api/test_binding.py" "$TMP/api.h5" "--$client"
  runs=(0)
fi
cat "$TMP/out"
for run in "${runs[@]}"; do
  expect_exit 0 "$REFIT" verify "$TMP/api.h5" --run "$run" --reference "$TMP/run.h5"
  expect_grep "run 000$run against $TMP/run.h5: 0 of 21 tensors differ" "$TMP/out"
  expect_grep "# PASS" "$TMP/out"
done
# No more runs than the client recorded.
expect_exit 2 "$REFIT" verify "$TMP/api.h5" --run "${#runs[@]}" --reference "$TMP/run.h5"
finish
