# Sweeps (`refit run --config` whose values are lists) and --calibrate: the product runs in one
# mpirun, every run and every skipped combination lands in one results file with its place in
# the sweep, --dry-run lists exactly what would run, and the limits are stored beside the runs.
. "$(dirname "$0")/lib.sh"

command -v h5dump >/dev/null || { echo "skipped: h5dump is not installed"; exit 77; }
SWEEPS="$REFIT_SOURCE_DIR/configs/sweeps"

# run_count FILE: the groups under /runs.
run_count() { h5ls "$1/runs" | grep -c .; }

# ---- 3 modes x 3 bucket sizes x 2 plans = 18 runs in one job, one file ---------------------
OUT="$TMP/mb.h5"
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --config "$SWEEPS/modes-buckets.json" \
  --output "$OUT"
expect_same "run lines" "$(grep -c '^run [0-9]*/18: ' "$TMP/out")" 18
expect_same "footers" "$(grep -c '^# PASS$' "$TMP/out")" 6
expect_same "runs in the file" "$(run_count "$OUT")" 18
combos=""
for i in $(seq 0 17); do
  run=$(printf '%04d' "$i")
  expect_same "run $run sweep_index" "$(attr "$OUT" "$run" sweep_index)" $((i + 1))
  expect_same "run $run sweep_size" "$(attr "$OUT" "$run" sweep_size)" 18
  combos+="$(attr "$OUT" "$run" mode) $(attr "$OUT" "$run" bucket_size) $(attr "$OUT" "$run" plan)"$'\n'
done
expect_same "distinct (mode, bucket_size, plan)" "$(printf '%s' "$combos" | sort -u | grep -c .)" 18
expect_same "run 0004" "$(printf '%s' "$combos" | sed -n 5p)" "grouped 4096 star"
expect_same "run 0017" "$(printf '%s' "$combos" | sed -n 18p)" "fused 0 star"

# ---- skipped combinations are announced, recorded with their reason, and the sweep goes on --
SKIP5="skip 5/8: trainer=fsdp=3 plan=p2p: layout: model.layers.0.self_attn.q_proj.weight dim 0 \
has 4 heads, which do not divide over trainer fsdp=3; choose a trainer fsdp that divides 4"
SKIP6="skip 6/8: trainer=fsdp=3 plan=star: layout: model.layers.0.self_attn.q_proj.weight dim 0 \
has 4 heads, which do not divide over trainer fsdp=3; choose a trainer fsdp that divides 4"
REASON7="world size is 4 but trainer fsdp=2,tp=2 and rollout tp=2 (disaggregated) need 6 ranks; run mpirun -np 6"
OUT="$TMP/tl.h5"
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --config "$SWEEPS/trainer-layouts.json" \
  --output "$OUT"
grep '^skip ' "$TMP/out" >"$TMP/skips"
expect_same "skip lines" "$(cat "$TMP/skips")" "$SKIP5
$SKIP6
skip 7/8: trainer=fsdp=2,tp=2 plan=p2p: $REASON7
skip 8/8: trainer=fsdp=2,tp=2 plan=star: $REASON7"
expect_same "footers" "$(grep -c '^# PASS$' "$TMP/out")" 4
expect_same "runs in the file" "$(run_count "$OUT")" 8
expect_same "0006 status" "$(attr "$OUT" 0006 status)" skipped
expect_same "0006 exit_code" "$(attr "$OUT" 0006 exit_code)" 0
expect_same "0006 skip_reason" "$(attr "$OUT" 0006 skip_reason)" "$REASON7"
expect_same "0006 sweep_index" "$(attr "$OUT" 0006 sweep_index)" 7
expect_same "0006 trainer" "$(attr "$OUT" 0006 trainer)" "fsdp=2,tp=2"
h5ls "$OUT/runs/0006" | grep -q . && fail "skipped run 0006 holds datasets: $(h5ls "$OUT/runs/0006")"
# verify takes the latest run that ran, and refuses a skipped one.
expect_exit 0 "$REFIT" verify "$OUT" --reference "$OUT"
expect_grep "# $OUT run 0003 against $OUT: 0 of 21 tensors differ" "$TMP/out"
expect_error 2 "refit: error: results file '$OUT': run 0005 is a skipped sweep combination and \
holds no results; give another --run" "$REFIT" verify "$OUT" --reference "$OUT" --run 5

# ---- --dry-run lists exactly the runs and skips, moves nothing, writes nothing -------------
DRY_RUNS="run 1/8: trainer=fsdp=2 plan=p2p
run 2/8: trainer=fsdp=2 plan=star
run 3/8: trainer=fsdp=1,tp=2 plan=p2p
run 4/8: trainer=fsdp=1,tp=2 plan=star
$SKIP5
$SKIP6"
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --config "$SWEEPS/trainer-layouts.json" \
  --dry-run --output "$TMP/dry.h5"
expect_same "dry run under mpirun" "$(cat "$TMP/out")" "$DRY_RUNS
skip 7/8: trainer=fsdp=2,tp=2 plan=p2p: $REASON7
skip 8/8: trainer=fsdp=2,tp=2 plan=star: $REASON7"
[ -e "$TMP/dry.h5" ] && fail "--dry-run wrote $TMP/dry.h5"
# Without mpirun every combination gets the ranks it needs.
expect_exit 0 "$REFIT" run --config "$SWEEPS/trainer-layouts.json" --dry-run
expect_same "dry run without mpirun" "$(cat "$TMP/out")" "$DRY_RUNS
run 7/8: trainer=fsdp=2,tp=2 plan=p2p
run 8/8: trainer=fsdp=2,tp=2 plan=star"
# A value on the command line replaces its list; a list of modes stays one job of three runs.
expect_exit 0 "$REFIT" run --config "$SWEEPS/modes-buckets.json" --dry-run --plan star \
  --bucket-size 4KiB
expect_same "command line over lists" "$(cat "$TMP/out")" "run 1/3: mode=unfused
run 2/3: mode=grouped
run 3/3: mode=fused"
# A bucket size below the minimum is a skipped combination like any other that cannot run.
printf '{"model": "tiny", "trainer": "fsdp=2", "rollout": "tp=2", "bucket_size": ["1KiB", "64KiB"],
  "warmup": 0, "iters": 1}' >"$TMP/small.json"
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --config "$TMP/small.json" --output "$TMP/small.h5"
expect_grep "skip 1/2: bucket_size=1KiB: option --bucket-size: 1024 bytes is below the minimum \
of 4096 (or 0 for the whole model in one bucket)" "$TMP/out"
expect_grep "run 2/2: bucket_size=64KiB" "$TMP/out"
expect_grep "# PASS" "$TMP/out"

# ---- a combination that --checkpoint does not fit is skipped, and the sweep goes on ---------
# Each combination is checked (its plan built and --checkpoint opened for its model) just
# before it runs or is listed, so lines come out as the sweep goes.
expect_exit 0 "$REFIT" checkpoint --model tiny --checkpoint "$TMP/tiny.safetensors"
sed 's/"hidden_size": 64/"hidden_size": 128/' "$REFIT_SOURCE_DIR/configs/models/tiny.json" \
  >"$TMP/wide.json"
printf '{"model": ["tiny", "%s", "tiny"], "trainer": "fsdp=2", "rollout": "tp=2", "warmup": 0,
  "iters": 1}' "$TMP/wide.json" >"$TMP/models.json"
CKREASON="checkpoint '$TMP/tiny.safetensors': tensor model.embed_tokens.weight has shape \
[512, 64], the model needs [512, 128]"
# Without mpirun, with the model loads logged in the same stream: the first combination's line
# is out before the last combination's model is loaded.
expect_exit 0 sh -c 'REFIT_LOG=debug "$0" run --config "$1" --checkpoint "$2" --dry-run 2>&1' \
  "$REFIT" "$TMP/models.json" "$TMP/tiny.safetensors"
expect_same "dry run with --checkpoint, in order" "$(sed -n \
  's/^refit: debug: \(model [a-z]*\):.*/\1/p; s/^refit: debug: \(checkpoint\) .*/\1/p; /^run \|^skip /p' \
  "$TMP/out")" "model tiny
checkpoint
run 1/3: model=tiny
model wide
skip 2/3: model=$TMP/wide.json: $CKREASON
model tiny
checkpoint
run 3/3: model=tiny"
OUT="$TMP/ck.h5"
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --config "$TMP/models.json" \
  --checkpoint "$TMP/tiny.safetensors" --output "$OUT"
expect_same "sweep with --checkpoint" "$(grep '^run \|^skip \|^# PASS\|^# FAIL' "$TMP/out" |
  sed 's/ (elapsed .*//')" "run 1/3: model=tiny
# PASS
skip 2/3: model=$TMP/wide.json: $CKREASON
run 3/3: model=tiny
# PASS"
expect_same "runs in the file" "$(run_count "$OUT")" 3
expect_same "0001 status" "$(attr "$OUT" 0001 status)" skipped
expect_same "0001 skip_reason" "$(attr "$OUT" 0001 skip_reason)" "$CKREASON"
expect_same "0001 sweep_index" "$(attr "$OUT" 0001 sweep_index)" 2
expect_same "0002 status" "$(attr "$OUT" 0002 status)" RF_OK
expect_same "0002 sweep_index" "$(attr "$OUT" 0002 sweep_index)" 3
# A checkpoint that is not there is wrong for every combination: one line, exit 2, no file.
NOPE="refit: error: checkpoint '$TMP/nope.safetensors': no such file or directory"
expect_error 2 "$NOPE" "$REFIT" run --config "$TMP/models.json" --checkpoint "$TMP/nope.safetensors" \
  --dry-run
expect_error_mpi 2 "$NOPE" "${MPIRUN[@]}" -np 4 "$REFIT" run --config "$TMP/models.json" \
  --checkpoint "$TMP/nope.safetensors" --output "$TMP/nope.h5"
[ -e "$TMP/nope.h5" ] && fail "a sweep without its checkpoint created $TMP/nope.h5"
# A skipped combination of two modes holds both their numbers.
expect_exit 0 "$REFIT" run --config "$TMP/models.json" --checkpoint "$TMP/tiny.safetensors" \
  --mode grouped,fused --dry-run
expect_same "dry run of two modes" "$(cat "$TMP/out")" "run 1/6: model=tiny mode=grouped
run 2/6: model=tiny mode=fused
skip 3-4/6: model=$TMP/wide.json: $CKREASON
run 5/6: model=tiny mode=grouped
run 6/6: model=tiny mode=fused"
# A sweep none of whose combinations can run measured nothing: exit 2 after the skips.
printf '{"model": ["%s", "%s"], "trainer": "fsdp=2", "rollout": "tp=2", "warmup": 0, "iters": 1}' \
  "$TMP/wide.json" "$TMP/wide.json" >"$TMP/wides.json"
expect_error_mpi 2 "refit: error: $TMP/wides.json: every combination of the sweep was skipped \
(reasons above); fix the lists or the checkpoint" "${MPIRUN[@]}" -np 4 "$REFIT" run \
  --config "$TMP/wides.json" --checkpoint "$TMP/tiny.safetensors"
expect_same "a sweep of skips only" "$(grep -c '^skip ' "$TMP/out")" 2

# ---- lists on the command line: ',' between values, ';' between layouts ---------------------
expect_exit 0 "$REFIT" run --model tiny --plan star,p2p --dry-run
expect_same "--plan star,p2p" "$(cat "$TMP/out")" "run 1/2: plan=star
run 2/2: plan=p2p"
expect_exit 0 "$REFIT" run --model tiny --trainer 'fsdp=2;fsdp=1,tp=2' --rollout tp=2 \
  --mode unfused,fused --bucket-size 64KiB,0 --dry-run
expect_same "layouts and sizes" "$(cat "$TMP/out")" "run 1/8: trainer=fsdp=2 bucket_size=64KiB mode=unfused
run 2/8: trainer=fsdp=2 bucket_size=64KiB mode=fused
run 3/8: trainer=fsdp=2 bucket_size=0 mode=unfused
run 4/8: trainer=fsdp=2 bucket_size=0 mode=fused
run 5/8: trainer=fsdp=1,tp=2 bucket_size=64KiB mode=unfused
run 6/8: trainer=fsdp=1,tp=2 bucket_size=64KiB mode=fused
run 7/8: trainer=fsdp=1,tp=2 bucket_size=0 mode=unfused
run 8/8: trainer=fsdp=1,tp=2 bucket_size=0 mode=fused"
# The command line's list replaces the file's.
expect_exit 0 "$REFIT" run --config "$SWEEPS/trainer-layouts.json" --plan star --trainer \
  'fsdp=1,tp=2;fsdp=2' --dry-run
expect_same "command-line list over a file's" "$(cat "$TMP/out")" "run 1/2: trainer=fsdp=1,tp=2
run 2/2: trainer=fsdp=2"
expect_error 2 "refit: error: option --plan: 'ring' is not one of p2p|star|fanout|hierarchical|auto" \
  "$REFIT" run --model tiny --plan star,ring --dry-run
# Each run of a command-line sweep is recorded like a config file's.
OUT="$TMP/cl.h5"
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --model tiny --trainer fsdp=2 --rollout tp=2 \
  --plan star,p2p --warmup 0 --iters 1 --output "$OUT"
expect_same "runs in the file" "$(run_count "$OUT")" 2
expect_same "0000 plan" "$(attr "$OUT" 0000 plan)" star
expect_same "0001 plan" "$(attr "$OUT" 0001 plan)" p2p
expect_same "0001 sweep_index" "$(attr "$OUT" 0001 sweep_index)" 2
expect_same "0001 sweep_size" "$(attr "$OUT" 0001 sweep_size)" 2

# ---- lists where they are not allowed ------------------------------------------------------
printf '{\n  "model": "tiny",\n  "seed": [1, 2]\n}\n' >"$TMP/seed.json"
expect_error 2 "refit: error: $TMP/seed.json:3:3: key 'seed' holds a list; only mode, plan, \
transport, trainer, rollout, rollout_dtype, placement, bucket_size and model can be swept, by refit run" \
  "$REFIT" run --config "$TMP/seed.json" --dry-run
printf '{"plan": ["p2p", "ring"]}' >"$TMP/ring.json"
expect_error 2 "refit: error: $TMP/ring.json:1:2: key 'plan', value 2: 'ring' is not one of \
p2p|star|fanout|hierarchical|auto" "$REFIT" run --config "$TMP/ring.json" --dry-run
printf '{"plan": ["p2p", "star"]}' >"$TMP/plan.json"
expect_error 2 "refit: error: $TMP/plan.json:1:2: key 'plan' holds a list; only mode, plan, \
transport, trainer, rollout, rollout_dtype, placement, bucket_size and model can be swept, by refit run" \
  "$REFIT" plan --config "$TMP/plan.json"

# ---- a verification failure is recorded and the sweep goes on, exiting 1 at the end --------
printf '{"model": "tiny", "trainer": "fsdp=2", "rollout": "tp=2", "plan": ["p2p", "star"],
  "warmup": 0, "iters": 2, "inject": "corrupt"}' >"$TMP/corrupt.json"
expect_exit 1 "${MPIRUN[@]}" -np 4 "$REFIT" run --config "$TMP/corrupt.json" --output "$TMP/c.h5"
expect_same "failed footers" "$(grep -c '^# FAIL' "$TMP/out")" 2
expect_same "runs in the file" "$(run_count "$TMP/c.h5")" 2
expect_same "0001 status" "$(attr "$TMP/c.h5" 0001 status)" RF_ERR_VERIFY

# ---- --calibrate: the limits beside every run ----------------------------------------------
# Over mpi, whose runs are compared with the plain MPI exchange (shm's with memcpy).
OUT="$TMP/cal.h5"
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --config "$SWEEPS/modes-buckets.json" \
  --mode grouped --bucket-size 16KiB --calibrate --transport mpi --output "$OUT"
expect_same "limits lines" "$(grep -c '^limits: memcpy .* s, mpi .* s; grouped at .* of mpi$' \
  "$TMP/out")" 2
for run in 0000 0001; do
  for name in limit_memcpy_s limit_mpi_s limit_memcpy_ratio limit_mpi_ratio; do
    v=$(attr "$OUT" $run $name)
    awk -v v="$v" 'BEGIN { exit !(v + 0 > 0) }' || fail "run $run $name is '$v', expected > 0"
  done
  expect_same "run $run limit_nccl_s" "$(attr "$OUT" $run limit_nccl_s)" ""
done
finish
