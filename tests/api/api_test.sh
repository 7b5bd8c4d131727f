# The library against `refit run`: a client of include/refit.h (c: tests/api/test_api.c through
# librefit.so; python and torch: tests/api/test_binding.py through the ctypes binding, with numpy
# arrays or torch tensors; skipped, 77, without them) moves the tiny model
# from trainer fsdp=2 to rollout tp=2 (colocated, mpi, fused) and records its runs; each of them
# must hold the rollout and trainer checksums `refit run` records for the same job.
. "$REFIT_SOURCE_DIR/tests/cli/lib.sh"
client=${1:?usage: api_test.sh c|python|torch|example}
# The first python3 that imports what the client needs: REFIT_PYTHON, the system's (Debian's
# python3-numpy), then the one on PATH (the lent GPU machines keep torch in a virtual
# environment's; a pyenv shim may have neither).
needs=numpy
[ "$client" = torch ] || [ "$client" = example ] && needs="numpy, torch"
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

if [ "$client" = example ]; then
  # examples/torch_fsdp2_refit.py: FSDP2 shards of the tiny model registered in place, refit
  # into vLLM-shaped tensors, each checked bit for bit against torch's own load of the last
  # version (3: one warm-up and two timed iterations). On the CPU, two trainer ranks (a gloo
  # group) colocated with rollout tp=2 over mpi; on a GPU also two processes sharing it, the
  # trainer's shards and the rollout's tensors mapped across over ipc.
  ex=(env PYTHONPATH="$REFIT_SOURCE_DIR/python" MASTER_PORT=$((29600 + RANDOM % 1000)) "$PY"
    "$REFIT_SOURCE_DIR/examples/torch_fsdp2_refit.py" --model tiny --warmup 1 --iters 2)
  expect_exit 0 "${MPIRUN[@]}" -np 2 "${ex[@]}" --device cpu --trainer fsdp=2 --rollout tp=2 \
    --placement colocated --output "$TMP/ex.h5"
  cat "$TMP/out"
  # Counted by hand: 21 tensors; a tp=2 rank holds half of the embedding and head (2 x 32768
  # bytes), of qkv, o, gate_up and down (36864 a layer), and all 3 norms of 128 bytes a layer
  # and the final one (640): 139904 bytes.
  for r in 0 1; do
    expect_grep "trainer rank $r: 21 FSDP2 parameters' full_tensor() equal version 3" "$TMP/out"
    expect_grep "rollout rank $r: 15 tensors equal vLLM's load of version 3 bit for bit (139904 bytes)" "$TMP/out"
  done
  grep -qE "tiny over mpi, 2 iterations: .* checksums: 0 tensors differ" "$TMP/out" ||
    fail "no line of the timed iterations over mpi with equal checksums"
  [ -e "$TMP/ex.h5.warmup.h5" ] && fail "the warm-up's scratch results file was left behind"
  expect_exit 0 "$REFIT" verify "$TMP/ex.h5" --run 0 --reference "$TMP/ex.h5"
  expect_exit 2 "$REFIT" verify "$TMP/ex.h5" --run 1 --reference "$TMP/ex.h5"
  if "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    expect_exit 0 "${MPIRUN[@]}" -np 2 "${ex[@]}" --device cuda --trainer fsdp=1 --rollout tp=1 \
      --transport ipc
    cat "$TMP/out"
    expect_grep "trainer rank 0: 21 FSDP2 parameters' full_tensor() equal version 3" "$TMP/out"
    expect_grep "rollout rank 0: 15 tensors equal vLLM's load of version 3 bit for bit (279168 bytes)" "$TMP/out"
    grep -qE "tiny over ipc, 2 iterations: .* checksums: 0 tensors differ" "$TMP/out" ||
      fail "no line of the timed iterations over ipc with equal checksums"
  fi
  finish
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
