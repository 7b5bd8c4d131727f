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

# A results file of format 1 (tests/data/format1, written by refit 0b5287a with format 1's
# generator and checksum terms): it is read, its checksums agree with the checkpoint its runs
# moved under format 1's terms and differ from other weights', it is not compared with a format
# 2 file, and no run is appended to it.
F1="$REFIT_SOURCE_DIR/tests/data/format1"
Q2="$REFIT_SOURCE_DIR/tests/data/tiny-qwen2.json"
expect_exit 0 "$REFIT" verify "$F1/run.h5" --run 0 --checkpoint "$F1/ck.safetensors"
expect_grep "# $F1/run.h5 run 0000 against $F1/ck.safetensors: 0 of 27 tensors differ" "$TMP/out"
expect_exit 0 "$REFIT" verify "$F1/run.h5" --run 1 --checkpoint "$F1/ck.safetensors"
expect_grep "run 0001 against $F1/ck.safetensors: 0 of 27 tensors differ" "$TMP/out"
expect_exit 0 "$REFIT" checkpoint --model "$Q2" --seed 5 --checkpoint "$TMP/q5.safetensors"
expect_exit 1 "$REFIT" verify "$F1/run.h5" --run 0 --checkpoint "$TMP/q5.safetensors"
expect_grep "# FAIL: 27 tensors differ" "$TMP/out"
expect_exit 0 "${MPIRUN[@]}" -np 3 "$REFIT" run --model "$Q2" --trainer fsdp=2 --rollout tp=1 \
  --transport mpi --mode fused --iters 1 --checkpoint "$F1/ck.safetensors" --output "$TMP/q.h5"
expect_exit 0 "$REFIT" verify "$TMP/q.h5" --checkpoint "$F1/ck.safetensors"
expect_grep "# PASS" "$TMP/out"
expect_error 2 "refit: error: '$TMP/q.h5' is a refit-results/2 file but the reference '$F1/run.h5' is refit-results/1, whose checksums use other terms; compare each with the checkpoint (--checkpoint) instead" \
  "$REFIT" verify "$TMP/q.h5" --reference "$F1/run.h5"
expect_exit 0 "$REFIT" report "$F1/run.h5" -o "$TMP/f1-report"
expect_grep "report: $TMP/f1-report/report.html, report.md and CSV tables from 2 run(s) in 1 file(s)" "$TMP/out"
expect_grep "tiny-qwen2" "$TMP/f1-report/report.md"
cp "$F1/run.h5" "$TMP/f1.h5"
expect_exit 2 "${MPIRUN[@]}" -np 3 "$REFIT" run --model "$Q2" --trainer fsdp=2 --rollout tp=1 \
  --iters 1 --output "$TMP/f1.h5"
expect_grep "error: results file '$TMP/f1.h5' has format 'refit-results/1', whose checksums use other terms, and refit " "$TMP/err"
expect_grep " appends only to 'refit-results/2' files; choose another --output" "$TMP/err"
cmp "$F1/run.h5" "$TMP/f1.h5" || fail "a refused run changed the format 1 file"

# Files that cannot be compared: exit 2 with one line.
expect_error 2 "refit: error: results file '$TMP/a.h5' has no run 0005; its latest is 0000" \
  "$REFIT" verify "$TMP/a.h5" --reference "$TMP/b.h5" --run 5
expect_error 2 "refit: error: refit verify needs exactly one of --reference RESULTS.h5 or --checkpoint PATH" \
  "$REFIT" verify "$TMP/a.h5"
expect_error 2 "refit: error: refit verify needs RESULTS.h5; see refit verify --help" "$REFIT" verify
finish
