# Faults: a corrupted byte fails verification (exit 1) naming tensor and rank; a silent peer
# ends every rank with a timeout (exit 3) instead of a hang; bad options are usage errors.
. "$(dirname "$0")/lib.sh"

# The issue's acceptance job passes, and fails with --inject corrupt.
expect_exit 0 "${MPIRUN[@]}" -np 6 "$REFIT" run --model tiny --trainer fsdp=2,tp=2 --rollout tp=2 \
  --mode fused --plan star
expect_rows 1
expect_exit 1 "${MPIRUN[@]}" -np 6 "$REFIT" run --model tiny --trainer fsdp=2,tp=2 --rollout tp=2 \
  --mode fused --plan star --inject corrupt
expect_grep "# FAIL: verification failed in mode fused" "$TMP/out"
# Rollout rank 1 holds embedding rows 256..511: the flipped element is row 256, column 0.
expect_grep "error: verify: model.embed_tokens.weight on rollout rank 1: element 16384 (row 256, col 0) is 0x" "$TMP/err"
expect_grep "error: verify: checksum of model.embed_tokens.weight differs" "$TMP/err"
grep -v '^#' "$TMP/out" | awk '$14 != "1" || $15 != "1bad" { exit 1 }' ||
  fail "the corrupt run's row should show #wrong 1 and 1bad: $(grep -v '^#' "$TMP/out")"

# Checksum-only verification catches it too, and --verify none reports nothing checked.
expect_exit 1 "${MPIRUN[@]}" -np 4 "$REFIT" run --model tiny --trainer fsdp=2 --rollout tp=2 \
  --verify checksum --inject corrupt --iters 1
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --model tiny --trainer fsdp=2 --rollout tp=2 \
  --verify none --iters 1
expect_rows 1

# A trainer rank that never sends: every rank stops within the timeout, exit 3.
start=$(date +%s)
expect_exit 3 timeout 60 "${MPIRUN[@]}" -np 4 "$REFIT" run --model tiny --trainer fsdp=2 \
  --rollout tp=2 --inject stall --timeout 2 --iters 1
elapsed=$(($(date +%s) - start))
[ "$elapsed" -lt 30 ] || fail "the stalled run took ${elapsed}s to end"
expect_grep "timed out after 2.0 s waiting for" "$TMP/err"
expect_grep "# FAIL: timed out waiting for a peer" "$TMP/out"

# Usage errors: one line, exit 2, on rank 0 only.
expect_error_mpi 2 "refit: error: option --bucket-size: 100 bytes is below the minimum of 4096 (or 0 for the whole model in one bucket)" \
  "${MPIRUN[@]}" -np 4 "$REFIT" run --model tiny --trainer fsdp=2 --rollout tp=2 --bucket-size 100
expect_exit 2 "${MPIRUN[@]}" -np 4 "$REFIT" run --model tiny --trainer fsdp=2 --rollout tp=2 --bucket-size -1
# The transports of this build, as `refit run --help` lists them (nccl only with CUDA and NCCL).
available=$("$REFIT" run --help | sed -n 's/^transports in this build (--transport): //p')
expect_error_mpi 2 "refit: error: option --transport: 'ucx' is not in this build; available: $available" \
  "${MPIRUN[@]}" -np 4 "$REFIT" run --model tiny --trainer fsdp=2 --rollout tp=2 --transport ucx
expect_error_mpi 2 "refit: error: world size is 3 but trainer fsdp=2,tp=1 and rollout tp=2 (disaggregated) need 4 ranks; run mpirun -np 4" \
  "${MPIRUN[@]}" -np 3 "$REFIT" run --model tiny --trainer fsdp=2 --rollout tp=2
# A GPU transport on a machine without a GPU: one line saying so, exit 2, never a crash.
if [ "$available" != "${available%nccl*}" ] && ! nvidia-smi -L >/dev/null 2>&1; then
  expect_exit 2 "${MPIRUN[@]}" -np 2 "$REFIT" run --model tiny --trainer fsdp=1 --rollout tp=1 \
    --transport nccl
  [ "$(grep -c '^refit' "$TMP/err")" -eq 1 ] || fail "no-GPU run printed: $(grep '^refit' "$TMP/err")"
  expect_grep "no GPU is visible to this process" "$TMP/err"
  expect_exit 2 "${MPIRUN[@]}" -np 2 "$REFIT" run --model tiny --trainer fsdp=1 --rollout tp=1 \
    --transport ipc
  [ "$(grep -c '^refit' "$TMP/err")" -eq 1 ] || fail "no-GPU ipc run printed: $(grep '^refit' "$TMP/err")"
  expect_grep "no GPU is visible to this process" "$TMP/err"
fi
# The GPU transports need the weights on the GPU.
if [ "$available" != "${available%nccl*}" ]; then
  expect_error_mpi 2 "refit: error: option --memory host: the nccl transport moves GPU memory; use --memory device or --transport mpi" \
    "${MPIRUN[@]}" -np 2 "$REFIT" run --model tiny --trainer fsdp=1 --rollout tp=1 \
    --transport nccl --memory host
fi
finish
