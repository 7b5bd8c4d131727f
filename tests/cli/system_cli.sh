# NCCL M2N interop and the megatron trainer style: a test-sized system file of configs/m2n run
# end to end with every element
# verified (tp=2,ep=2 folded onto 2 ranks -> tp=2; and cp=2 replicas as sources), the same
# layout given as --trainer with --trainer-style megatron and as a config-file key, and the
# one-line errors of files and layouts that cannot be expressed.
. "$(dirname "$0")/lib.sh"
M2N="$REFIT_SOURCE_DIR/configs/m2n"
MIX="$REFIT_SOURCE_DIR/tests/data/tiny-mixtral.json"

# The shipped files of the published layouts are read by test_layout_megatron; planning them
# here would take seconds.
# End to end on the CPU path, every element verified.
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --model "$MIX" \
  --system "$M2N/tiny-megatron-tp2ep2-to-tp2.system.json" --iters 1 --warmup 0 --verify full
expect_rows 1
expect_grep "trainer tp=2,cp=1,ep=2,pp=1,dp=1 (megatron, hf order); rollout tp=2,dp=1" "$TMP/out"
echo "{\"system\": \"$M2N/tiny-megatron-tp2cp2ep4-to-tp2.system.json\"}" >"$TMP/config.json"
expect_exit 0 "${MPIRUN[@]}" -np 6 "$REFIT" run --model "$MIX" --config "$TMP/config.json" \
  --plan fanout --iters 1 --warmup 0 --verify full
expect_rows 1
# The same layout without the file; its plan is the file's.
expect_exit 0 "$REFIT" plan --model "$MIX" --trainer tp=2,cp=2,ep=4 --trainer-style megatron \
  --rollout tp=2 --json
grep -o '"digest": "[0-9a-f]*"' "$TMP/out" >"$TMP/by_flags"
expect_exit 0 "$REFIT" plan --model "$MIX" --system "$M2N/tiny-megatron-tp2cp2ep4-to-tp2.system.json" --json
expect_grep '"trainer": "tp=2,cp=2,ep=4"' "$TMP/out"
grep -o '"digest": "[0-9a-f]*"' "$TMP/out" >"$TMP/by_file"
[ -s "$TMP/by_file" ] && cmp -s "$TMP/by_flags" "$TMP/by_file" || fail "plans differ: $(cat "$TMP/by_flags" "$TMP/by_file")"

# One line each, exit 2.
expect_error 2 "refit: error: --system $M2N/tiny-megatron-tp2ep2-to-tp2.system.json sets --trainer, --trainer-style and --rollout; leave --rollout out or leave --system out" \
  "$REFIT" plan --model "$MIX" --system "$M2N/tiny-megatron-tp2ep2-to-tp2.system.json" --rollout tp=1
echo '{"train": {"num_gpus": 6, "tp_size": 2, "ep_size": 4}, "generation": {"num_gpus": 2, "tp_size": 2}}' >"$TMP/bad.json"
expect_error 2 "refit: error: system $TMP/bad.json: train ep_size=4 does not divide the 6 ranks of a pipeline stage (num_gpus 6 / pp_size 1) that its experts fold onto" \
  "$REFIT" plan --model "$MIX" --system "$TMP/bad.json"
echo '{"train": {"num_gpus": 8, "tp_size": 1, "ep_size": 8, "dp_size": 1}, "generation": {"num_gpus": 2, "tp_size": 2}}' >"$TMP/bad.json"
expect_error 2 "refit: error: trainer ep=8 does not divide the 4 experts of model tiny-mixtral; choose an ep that divides 4" \
  "$REFIT" plan --model "$MIX" --system "$TMP/bad.json"
expect_error 2 "refit: error: trainer style megatron folds ep=4 onto the tp*cp*dp = 2*1*1 = 2 ranks of each pipeline stage, and 4 does not divide 2; choose an ep that divides 2" \
  "$REFIT" plan --model "$MIX" --trainer tp=2,ep=4 --trainer-style megatron --rollout tp=2
expect_error 2 "refit: error: system $TMP/missing.json: cannot read: No such file or directory; pass an NCCL M2N system file" \
  "$REFIT" plan --model "$MIX" --system "$TMP/missing.json"
finish
