# A sequence of real checkpoints as weight versions (--checkpoint V0,V1,V2): refit checkpoint
# writes versions of the generated weights, refit run moves them one after another, dense and
# as deltas, and the rollout ends equal, bit for bit, to the last file; the files' changes and
# wire bytes are those of the same versions made by --update; a refused delta leaves the file
# before; what does not fit is refused in one line. Tiny jobs of 4 ranks over mpi, a few
# seconds in all.
. "$(dirname "$0")/lib.sh"

JOB=(--model tiny --trainer fsdp=2 --rollout tp=2 --plan p2p --transport mpi --verify full
  --mode fused)

# Versions 0, 1 and 2 of sparse:0.01, each a file of tiny's 21 tensors.
for k in 0 1 2; do
  "$REFIT" checkpoint --model tiny --update sparse:0.01 --version $k \
    --checkpoint "$TMP/v$k.safetensors" >"$TMP/out" 2>"$TMP/err" || fail "refit checkpoint --version $k"
done
expect_grep "wrote $TMP/v2.safetensors: tiny, 21 tensors, 279168 bytes, safetensors, version 2 of --update sparse:0.01" "$TMP/out"
V="$TMP/v0.safetensors,$TMP/v1.safetensors,$TMP/v2.safetensors"

# off, then auto: each run moves v0 (warmup), v1 and v2; auto's first iteration is dense, the
# off run having kept nothing, its last a delta of what changed between v1 and v2. Every
# element is checked against v2, and so are the checksums.
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run "${JOB[@]}" --checkpoint "$V" --iters 2 \
  --delta off,auto --output "$TMP/c.h5"
expect_rows 2
expect_grep "; warmup 1, iters 2; seed 1; 3 checkpoint versions" "$TMP/out"
expect_grep "# checkpoint versions: version 2 ($TMP/v2.safetensors), 1.025 % of elements changed (1431 of 139584); the trainer read each version in " "$TMP/out"
expect_grep "# delta auto: version 0: dense (the trainer kept no version before it)" "$TMP/out"
expect_grep "# delta auto: version 2: 10582 wire bytes (3.782 % of the dense 279808); pieces: 0 dense, 62 sparse, 0 bitmask" "$TMP/out"
expect_same "update_version" "$(attr "$TMP/c.h5" 0001 update_version)" 2
expect_same "update_changed_elements" "$(attr "$TMP/c.h5" 0001 update_changed_elements)" 1431
expect_same "wire_delta_bytes" "$(attr "$TMP/c.h5" 0001 wire_delta_bytes)" 10582
expect_exit 0 "$REFIT" verify "$TMP/c.h5" --checkpoint "$TMP/v2.safetensors"
expect_grep "against $TMP/v2.safetensors: 0 of 21 tensors differ" "$TMP/out"
expect_exit 1 "$REFIT" verify "$TMP/c.h5" --checkpoint "$TMP/v1.safetensors"
expect_grep "against $TMP/v1.safetensors: 18 of 21 tensors differ" "$TMP/out"

# The same versions made by --update: the same changes and the same wire bytes.
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run "${JOB[@]}" --update sparse:0.01 --iters 2 \
  --delta auto
expect_grep "# update sparse:0.01: version 2, 1.025 % of elements changed (1431 of 139584)" "$TMP/out"
expect_grep "# delta auto: version 2: 10582 wire bytes (3.782 % of the dense 279808)" "$TMP/out"

# A flipped byte of v2's delta: refused, and the rollout still holds v1, element for element.
expect_exit 3 "${MPIRUN[@]}" -np 4 "$REFIT" run "${JOB[@]}" --checkpoint "$V" --iters 2 \
  --delta auto --inject corrupt
expect_grep "# delta auto: the refit of version 2 was refused; the rollout still holds version 1: 0 wrong elements" "$TMP/out"

# Refusals, one line each: a file whose tensor differs, a run longer than the list (a job of
# one colocated rank, without mpirun), a version of no rule.
ONE=(--model tiny --trainer fsdp=1 --rollout tp=1 --placement colocated)
"$REFIT" checkpoint --model tiny --dtype fp32 --checkpoint "$TMP/f32.safetensors" >/dev/null ||
  fail "refit checkpoint --dtype fp32"
expect_error 2 "refit: error: checkpoint '$TMP/f32.safetensors': tensor model.embed_tokens.weight is F32, the model needs BF16 (use --dtype fp32 or another checkpoint)" \
  "$REFIT" run "${ONE[@]}" --iters 1 --checkpoint "$TMP/v0.safetensors,$TMP/f32.safetensors"
expect_error 2 "refit: error: --checkpoint lists 3 versions but each run moves 6 (--warmup 1 + --iters 5); list 6 checkpoints, or lower --warmup and --iters to 3 in all" \
  "$REFIT" run "${ONE[@]}" --checkpoint "$V"
expect_error 2 "refit: error: refit checkpoint --version 2: under --update none every version is version 0; give --update full, sparse:F or adam:LR" \
  "$REFIT" checkpoint --model tiny --version 2 --checkpoint "$TMP/x.safetensors"
finish
