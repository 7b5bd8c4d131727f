# Weight versions (--update): each iteration moves a new version, the rollout is checked against
# the last one moved, the changed fraction is printed and recorded, versions go on from mode to
# mode, a corrupted byte still fails; bad values and what the engine cannot run yet are refused
# in one line. Tiny jobs of 4 ranks over mpi in host memory, a few seconds in all.
. "$(dirname "$0")/lib.sh"

JOB=(--model tiny --trainer fsdp=2 --rollout tp=2)

# sparse:0.01, one warmup and three timed iterations: versions 0 to 3, the last one checked
# element by element; 1363 of tiny's 139584 elements differ between versions 2 and 3.
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run "${JOB[@]}" --update sparse:0.01 --iters 3 \
  --verify full --output "$TMP/v.h5"
expect_rows 1
expect_grep "# update sparse:0.01: version 3, 0.9765 % of elements changed (1363 of 139584); the trainer made each version in " "$TMP/out"
expect_grep "; update sparse:0.01; " "$TMP/out"
expect_same "update" "$(attr "$TMP/v.h5" 0000 update)" "sparse:0.01"
expect_same "update_version" "$(attr "$TMP/v.h5" 0000 update_version)" 3
expect_same "update_changed_elements" "$(attr "$TMP/v.h5" 0000 update_changed_elements)" 1363
expect_same "update_elements" "$(attr "$TMP/v.h5" 0000 update_elements)" 139584

# The same job with a flipped byte fails; the expected value is version 3's.
expect_exit 1 "${MPIRUN[@]}" -np 4 "$REFIT" run "${JOB[@]}" --update sparse:0.01 --iters 3 \
  --verify full --inject corrupt
expect_grep "# FAIL: verification failed in mode grouped" "$TMP/out"
expect_grep "error: verify: model.embed_tokens.weight on rollout rank 1: element 16384 (row 256, col 0) is 0xbcb1, expected 0xbceb" "$TMP/err"

# Versions go on from mode to mode in one job: adam:1e-6 moves versions 0..3, then 4..7.
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run "${JOB[@]}" --update adam:1e-6 --iters 3 \
  --mode fused,grouped
expect_rows 2
expect_grep "# update adam:1e-6: version 3, 15.86 % of elements changed (22136 of 139584)" "$TMP/out"
expect_grep "# update adam:1e-6: version 7, 12.46 % of elements changed (17399 of 139584)" "$TMP/out"

# --update none is today's job: no update line, version 0 recorded as moved last.
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run "${JOB[@]}" --iters 1 --output "$TMP/n.h5"
expect_rows 1
grep -q "update" "$TMP/out" && fail "--update none printed an update: $(grep update "$TMP/out")"
expect_same "update" "$(attr "$TMP/n.h5" 0000 update)" "none"
expect_same "update_version" "$(attr "$TMP/n.h5" 0000 update_version)" 1

# Refusals, each one line.
expect_error 2 "refit: error: option --update: 'sparse:1.5' is not none, full, sparse:F with 0 <= F <= 1, or adam:LR with 0 < LR <= 1" \
  "$REFIT" run --update sparse:1.5
expect_error 2 "refit: error: option --delta: 'dense' is not one of off|auto|sparse|bitmask, or a comma-separated list of them" \
  "$REFIT" run --delta dense
# --delta runs are tests/cli/delta_cli.sh.
"$REFIT" checkpoint --model tiny --checkpoint "$TMP/tiny.safetensors" >/dev/null ||
  fail "refit checkpoint for the --checkpoint refusal"
expect_error 2 "refit: error: --update full: the trainer's weights come from --checkpoint, whose files are its versions; leave --update at none or leave --checkpoint out" \
  "$REFIT" run "${JOB[@]}" --update full --checkpoint "$TMP/tiny.safetensors"

# refit verify compares a versioned run with a run of the same --update, not with a checkpoint.
expect_error 2 "refit: error: run 0000 of '$TMP/v.h5' moved later versions of the weights (--update sparse:0.01) and a checkpoint holds version 0; compare it with a run of the same --update (--reference)" \
  "$REFIT" verify "$TMP/v.h5" --checkpoint "$TMP/tiny.safetensors"
expect_error 2 "refit: error: run 0000 of '$TMP/v.h5' moved versions of --update sparse:0.01 but the reference run 0000 of '$TMP/n.h5' those of --update none; compare runs of one --update" \
  "$REFIT" verify "$TMP/v.h5" --reference "$TMP/n.h5"
expect_exit 0 "$REFIT" verify "$TMP/v.h5" --reference "$TMP/v.h5"

finish
