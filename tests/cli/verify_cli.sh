# `refit verify`: a run's checksums against a reference results file and against a checkpoint;
# exit 0 when all agree, 1 naming the tensors that differ, 2 when the files cannot be used.
. "$(dirname "$0")/lib.sh"
job=(--model tiny --trainer fsdp=2 --rollout tp=2 --iters 1 --mode grouped)

expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run "${job[@]}" --seed 1 --output "$TMP/a.h5"
# The same weights through another layout: checksums are layout-invariant.
expect_exit 0 "${MPIRUN[@]}" -np 5 "$REFIT" run --model tiny --trainer fsdp=2,tp=2 --rollout tp=1 \
  --iters 1 --seed 1 --output "$TMP/b.h5"
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run "${job[@]}" --seed 2 --output "$TMP/c.h5"

expect_exit 0 "$REFIT" verify "$TMP/a.h5" --reference "$TMP/b.h5"
expect_grep "run 0000 against $TMP/b.h5: 0 of 21 tensors differ" "$TMP/out"
expect_grep "# PASS" "$TMP/out"

expect_exit 1 "$REFIT" verify "$TMP/a.h5" --reference "$TMP/c.h5"
expect_grep "differs: model.embed_tokens.weight  trainer " "$TMP/out"
expect_grep "# FAIL: 21 tensors differ" "$TMP/out"

# Against checkpoints: the run's own weights (seed 1) agree, other weights (seed 3) do not.
expect_exit 0 "$REFIT" checkpoint --model tiny --checkpoint "$TMP/s1.safetensors" --seed 1
expect_exit 0 "$REFIT" checkpoint --model tiny --checkpoint "$TMP/s3.h5" --seed 3 --format hdf5
expect_exit 0 "$REFIT" verify "$TMP/a.h5" --checkpoint "$TMP/s1.safetensors"
expect_exit 1 "$REFIT" verify "$TMP/a.h5" --checkpoint "$TMP/s3.h5"
expect_grep "differs: lm_head.weight" "$TMP/out"

# Files that cannot be compared: exit 2 with one line.
expect_error 2 "refit: error: results file '$TMP/a.h5' has no run 0005; its latest is 0000" \
  "$REFIT" verify "$TMP/a.h5" --reference "$TMP/b.h5" --run 5
expect_error 2 "refit: error: refit verify needs exactly one of --reference RESULTS.h5 or --checkpoint PATH" \
  "$REFIT" verify "$TMP/a.h5"
expect_error 2 "refit: error: refit verify needs RESULTS.h5; see refit verify --help" "$REFIT" verify
finish
