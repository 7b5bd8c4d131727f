# `refit run --transport shm`: shared host memory between the processes of one node. Every
# mode and plan on the layouts users meet, pulled (HF order) and pushed (JAX order), dense and
# MoE, each verified element by element; the same checksums as the mpi transport's run of the
# same job; a silent peer and a flipped byte (also on a forwarding rank) end the job as over
# mpi; --memory device is refused in one line.
. "$(dirname "$0")/lib.sh"
DATA="$REFIT_SOURCE_DIR/tests/data"
MODELS="$REFIT_SOURCE_DIR/configs/models"

# run NP PLAN ARGS...: all three modes in one job.
run() {
  local np=$1 plan=$2
  shift 2
  expect_exit 0 "${MPIRUN[@]}" -np "$np" "$REFIT" run --transport shm --mode unfused,grouped,fused \
    --plan "$plan" --warmup 1 --iters 2 --bucket-size 16KiB "$@"
  expect_rows 3
  grep -v '^#' "$TMP/out" | awk '$3 != "shm" || $6 != "0" { exit 1 }' ||
    fail "shm rows should name the transport and send no messages: $(grep -v '^#' "$TMP/out")"
}

for plan in p2p star; do
  run 4 $plan --model tiny --trainer fsdp=2 --rollout tp=2
  run 6 $plan --model tiny --trainer fsdp=2,tp=2 --rollout tp=2 --trainer-style fsdp2
  run 4 $plan --model tiny --trainer fsdp=2 --rollout tp=2 --trainer-order jax # push
  run 6 $plan --model "$DATA/tiny-qwen3.json" --trainer fsdp=2,tp=2 --rollout tp=2
  run 2 $plan --model tiny --trainer fsdp=2 --rollout tp=2 --placement colocated
done
# Fanout: the forward steps after the transfer (auto, in host memory) and in rounds.
for rounds in auto on; do
  run 10 fanout --model tiny --trainer fsdp=2 --rollout tp=2,dp=4 --mapped-rounds $rounds
  run 10 fanout --model tiny --trainer fsdp=2 --rollout tp=2,dp=4 --trainer-order jax \
    --mapped-rounds $rounds # push
  run 4 fanout --model tiny --trainer fsdp=2 --rollout tp=2,dp=2 --placement colocated \
    --mapped-rounds $rounds
done
run 8 p2p --model "$MODELS/tiny-mixtral.json" --trainer ep=2,fsdp=2 --rollout tp=2,dp=2,ep
run 6 p2p --model "$MODELS/tiny-deepseek.json" --trainer ep=2,pp=2 --rollout tp=2,ep --trainer-order jax

# A fused mapped stage launches its first bytes early, then four times more each launch
# (engine_mapped.c): with the first launch at 1 byte, tiny's 279,168 bytes take 10 launches
# on the copying rank, every element verified; REFIT_MAPPED_EARLY=0 lists them all first.
for early in 1:10 0:1; do
  expect_exit 0 env REFIT_TIMELINE=1 REFIT_MAPPED_EARLY=${early%:*} "${MPIRUN[@]}" -np 2 "$REFIT" \
    run --transport shm --model tiny --trainer fsdp=1 --rollout tp=1 --mode fused --warmup 0 \
    --iters 1
  expect_rows 1
  expect_grep "timeline rank 1 fused stage 1 call 0:" "$TMP/err"
  grep "timeline rank 1 fused stage 1 call 0:" "$TMP/err" | grep -qF " ${early#*:} launches)" ||
    fail "REFIT_MAPPED_EARLY=${early%:*}: $(grep 'timeline rank 1' "$TMP/err")"
done

# The same job over mpi and over shm records the same per-tensor checksums.
for t in mpi shm; do
  expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --transport $t --model "$MODELS/tiny-mixtral.json" \
    --trainer fsdp=2 --rollout tp=2 --mode grouped --iters 1 --output "$TMP/$t.h5"
  expect_rows 1
done
expect_exit 0 "$REFIT" verify "$TMP/shm.h5" --reference "$TMP/mpi.h5"

# A flipped byte is found by both checks, as over mpi.
expect_exit 1 "${MPIRUN[@]}" -np 4 "$REFIT" run --transport shm --model tiny --trainer fsdp=2 \
  --rollout tp=2 --mode fused --iters 1 --inject corrupt
expect_grep "# FAIL: verification failed in mode fused" "$TMP/out"
grep -v '^#' "$TMP/out" | awk '$14 != "1" || $15 != "1bad" { exit 1 }' ||
  fail "the corrupt row should show #wrong 1 and 1bad: $(grep -v '^#' "$TMP/out")"

# A byte flipped on a forwarding rank reaches every replica downstream of it, as over mpi
# (fanout_cli.sh), with the forward steps in rounds (unfused) or after the transfer (fused).
cp "$REFIT_SOURCE_DIR/tests/data/fanout-corrupt-forward.txt" "$TMP/want"
for mode in unfused fused; do
  rounds=on
  [ $mode = fused ] && rounds=off
  expect_exit 1 "${MPIRUN[@]}" -np 10 "$REFIT" run --transport shm --model tiny --trainer fsdp=2 \
    --rollout tp=2,dp=4 --plan fanout --mode $mode --iters 1 --bucket-size 16KiB --inject corrupt \
    --mapped-rounds $rounds
  grep '^refit' "$TMP/err" | sed 's/^refit\[[^]]*\]/refit/' | sort -u >"$TMP/lines"
  diff "$TMP/want" "$TMP/lines" >"$TMP/diff" || fail "corrupt forward over shm, $mode: $(cat "$TMP/diff")"
done

# A rank that never offers its weights: the others give up after --timeout (exit 3), no hang.
expect_exit 3 timeout 60 "${MPIRUN[@]}" -np 2 "$REFIT" run --transport shm --model tiny \
  --trainer fsdp=1 --rollout tp=1 --iters 1 --inject stall --timeout 3
grep '^refit' "$TMP/err" | sed 's/^refit\[[^]]*\]/refit/' | grep -v '^refit: warning: inject stall' >"$TMP/lines"
[ "$(cat "$TMP/lines")" = "refit: error: timed out after 3.0 s waiting for the sources' ready notes; a peer rank is dead or stalled (raise --timeout if the job is just slow)" ] ||
  fail "the stalled job printed: $(cat "$TMP/lines")"

expect_error_mpi 2 "refit: error: option --memory device: the shm transport moves host memory; use --memory host or --transport ipc" \
  "${MPIRUN[@]}" -np 2 "$REFIT" run --transport shm --memory device --model tiny --trainer fsdp=1 \
  --rollout tp=1
finish
