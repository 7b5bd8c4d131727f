# Faults: a corrupted byte fails verification (exit 1) naming tensor and rank; a silent peer
# ends every rank with a timeout (exit 3) instead of a hang; bad options are usage errors. The
# jobs name --transport mpi: the lines checked are mpi's (over shm, the default's choice on one
# node, a stalled job's ranks wait for ready and done notes instead, shm_cli.sh).
. "$(dirname "$0")/lib.sh"

# The issue's acceptance job passes, and fails with --inject corrupt.
expect_exit 0 "${MPIRUN[@]}" -np 6 "$REFIT" run --transport mpi --model tiny --trainer fsdp=2,tp=2 --rollout tp=2 \
  --mode fused --plan star
expect_rows 1
expect_exit 1 "${MPIRUN[@]}" -np 6 "$REFIT" run --transport mpi --model tiny --trainer fsdp=2,tp=2 --rollout tp=2 \
  --mode fused --plan star --inject corrupt
expect_grep "# FAIL: verification failed in mode fused" "$TMP/out"
# Rollout rank 1 holds embedding rows 256..511: the flipped element is row 256, column 0.
expect_grep "error: verify: model.embed_tokens.weight on rollout rank 1: element 16384 (row 256, col 0) is 0x" "$TMP/err"
expect_grep "error: verify: checksum of model.embed_tokens.weight differs" "$TMP/err"
grep -v '^#' "$TMP/out" | awk '$14 != "1" || $15 != "1bad" { exit 1 }' ||
  fail "the corrupt run's row should show #wrong 1 and 1bad: $(grep -v '^#' "$TMP/out")"

# Checksum-only verification catches it too, and --verify none reports nothing checked.
expect_exit 1 "${MPIRUN[@]}" -np 4 "$REFIT" run --transport mpi --model tiny --trainer fsdp=2 --rollout tp=2 \
  --verify checksum --inject corrupt --iters 1
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --transport mpi --model tiny --trainer fsdp=2 --rollout tp=2 \
  --verify none --iters 1
expect_rows 1

# seen_at FILE TEXT: waits (60 s at most) until FILE has a line holding TEXT; prints the time.
seen_at() {
  local deadline=$(($(date +%s) + 60))
  until grep -qF -- "$2" "$1" 2>/dev/null; do
    [ "$(date +%s)" -lt "$deadline" ] || break
    sleep 0.05
  done
  date +%s.%N
}

# within START END LIMIT WHAT: END - START (seconds, from date +%s.%N) is at most LIMIT, plus
# REFIT_TEST_SLACK seconds: `make sanitize` sets it, since LeakSanitizer's exit-time scan with
# full unwinding adds seconds to every rank's exit. The bound stays a guard against hangs.
within() {
  awk -v a="$1" -v b="$2" -v l="$3" -v s="${REFIT_TEST_SLACK:-0}" 'BEGIN { exit !(b - a <= l + s) }' ||
    fail "$4 took $(awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }') s, more than $3 s"
}

# The refit lines of the last run's stderr without their rank prefixes, each once.
refit_lines() { grep '^refit' "$TMP/err" | sed 's/^refit\[[^]]*\]/refit/' | sort -u; }

# A trainer rank that never sends: the ranks waiting for it time out, every rank is out
# within timeout + 5 s of the stall, exit 3, and the one error line says what was missing.
"${MPIRUN[@]}" -np 4 "$REFIT" run --transport mpi --model tiny --trainer fsdp=2 --rollout tp=2 \
  --inject stall --timeout 10 --iters 1 >"$TMP/out" 2>"$TMP/err" &
job=$!
stalled=$(seen_at "$TMP/err" "inject stall: trainer rank 0 will not post its messages")
wait "$job"
rc=$?
ended=$(date +%s.%N)
[ "$rc" -eq 3 ] || fail "the stalled run exited $rc, expected 3: $(head -c 600 "$TMP/err")"
within "$stalled" "$ended" 15 "the stalled run (--timeout 10)"
expected="refit: error: timed out after 10.0 s waiting for a bucket's group of messages; a peer rank is dead or stalled (raise --timeout if the job is just slow)"
refit_lines | grep -v '^refit: warning: inject stall' >"$TMP/lines"
[ "$(cat "$TMP/lines")" = "$expected" ] ||
  fail "the stalled run printed:
$(cat "$TMP/lines")
expected only:
$expected"
expect_grep "# FAIL: timed out waiting for a peer in mode grouped" "$TMP/out"

# A rollout rank stopped with SIGSTOP in the middle of the iterations never answers at all:
# every other rank still leaves within timeout + 5 s, with exit 3 and at most one timeout line
# each, naming what that rank waited for (a barrier, a bucket, the agreement).
timeout 120 "${MPIRUN[@]}" -np 4 "$REFIT" run --transport mpi --model tiny --trainer fsdp=2 --rollout tp=2 \
  --mode fused --timeout 5 --warmup 0 --iters 20000 >"$TMP/out" 2>"$TMP/err" &
job=$!
seen_at "$TMP/out" "rank   3 host" >/dev/null
pid=$(sed -n 's/^#  rank   3 host .* pid \([0-9]*\) .*/\1/p' "$TMP/out")
if [ -n "$pid" ]; then
  sleep 0.5 # into the iterations
  kill -STOP "$pid"
  stopped=$(date +%s.%N)
  wait "$job"
  rc=$?
  ended=$(date +%s.%N)
  kill -CONT "$pid" 2>/dev/null
  kill -KILL "$pid" 2>/dev/null
  [ "$rc" -eq 3 ] || fail "the run with a stopped rank exited $rc, expected 3: $(head -c 600 "$TMP/err")"
  within "$stopped" "$ended" 10 "the run with a stopped rank (--timeout 5)"
  refit_lines >"$TMP/lines"
  grep -qvE '^refit: error: timed out after (5\.0|7\.0) s waiting for [^;]*; a peer rank is dead or stalled \(raise --timeout if the job is just slow\)$' "$TMP/lines" &&
    fail "the run with a stopped rank printed other lines: $(cat "$TMP/lines")"
  [ -s "$TMP/lines" ] || fail "the run with a stopped rank printed no error line"
  [ -z "$(grep '^refit\[' "$TMP/err" | cut -d@ -f1 | sort | uniq -d)" ] ||
    fail "a rank printed more than one line: $(grep '^refit' "$TMP/err")"
else
  wait "$job"
  fail "no pid for rank 3 in the header: $(head -c 800 "$TMP/out")"
fi

# A NaN in a bf16 checkpoint, met by trainer rank 0 as it quantizes for an fp8 rollout while
# the others wait for its messages: its notice ends their waits at once, so the run is out
# in seconds, not after --timeout, with the cause's line alone and the cause's exit code.
"$REFIT" checkpoint --model "$REFIT_SOURCE_DIR/tests/data/fp8-small.json" \
  --checkpoint "$TMP/nan.safetensors" >/dev/null || fail "refit checkpoint for the NaN run"
python3 - "$TMP/nan.safetensors" <<'PYEOF' || fail "patching a NaN into the checkpoint"
import json, struct, sys
with open(sys.argv[1], "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    at = json.loads(f.read(n))["model.layers.0.self_attn.q_proj.weight"]["data_offsets"][0]
    f.seek(8 + n + at + 10)  # element 5, in the block of rows 0..127, columns 0..127
    f.write(struct.pack("<H", 0x7FC0))  # a bf16 NaN
PYEOF
began=$(date +%s.%N)
expect_error_mpi 2 "refit: error: fp8: tensor model.layers.0.self_attn.q_proj.weight holds NaN in the block of rows 0..127, columns 0..127; block-FP8 weights need finite values, check where the weights came from" \
  timeout 15 "${MPIRUN[@]}" -np 4 "$REFIT" run --transport mpi --model "$REFIT_SOURCE_DIR/tests/data/fp8-small.json" \
  --trainer fsdp=2 --rollout tp=2 --checkpoint "$TMP/nan.safetensors" --rollout-dtype fp8 --timeout 30
within "$began" "$(date +%s.%N)" 10 "the NaN run (--timeout 30)"

# Memory that no rank can allocate (a limit of 3 GB against 7.48 GiB of weights per rank):
# every rank fails alike and the lowest one says so, once. ASan reserves terabytes of address
# space for its shadow as a process starts, which no such limit allows: an ASan build (make
# sanitize) leaves this check to the plain build's run of this script.
if grep -qa __asan_init "$REFIT"; then
  echo "note: $REFIT is built with ASan; the out-of-memory check runs in the plain build"
else
  (
    ulimit -v 3000000
    expect_error_mpi 3 "refit: error: out of memory allocating 7.48 GiB of host memory for the trainer shards" \
      timeout 60 "${MPIRUN[@]}" -np 4 "$REFIT" run --transport mpi --model llama-3.1-8b --trainer fsdp=2 \
      --rollout tp=2 --memory host
    exit "$failures"
  ) || failures=$((failures + 1))
fi

# A bad config file under mpirun -np 4: the other ranks must not exit (and get mpirun to kill
# rank 0) before rank 0 has printed its line; 50 times, the one line every time
# (REFIT_TEST_REPEATS times: `make sanitize` makes it 5, each run being slow there).
printf '{"model": "tiny", "trainer": "fsdp=2", "rollout": "tp=2", "bucket_sise": "1MiB"}\n' >"$TMP/bad.json"
for i in $(seq "${REFIT_TEST_REPEATS:-50}"); do
  expect_error_mpi 2 "refit: error: $TMP/bad.json:1:59: unknown key 'bucket_sise'; see refit run --help" \
    "${MPIRUN[@]}" -np 4 "$REFIT" run --config "$TMP/bad.json"
done

# Usage errors: one line, exit 2, on rank 0 only.
expect_error_mpi 2 "refit: error: option --bucket-size: 100 bytes is below the minimum of 4096 (or 0 for the whole model in one bucket)" \
  "${MPIRUN[@]}" -np 4 "$REFIT" run --transport mpi --model tiny --trainer fsdp=2 --rollout tp=2 --bucket-size 100
expect_exit 2 "${MPIRUN[@]}" -np 4 "$REFIT" run --transport mpi --model tiny --trainer fsdp=2 --rollout tp=2 --bucket-size -1
# The transports of this build, as `refit run --help` lists them (nccl only with CUDA and NCCL).
available=$("$REFIT" run --help | sed -n 's/^transports in this build (--transport): //p')
expect_error_mpi 2 "refit: error: option --transport: 'ucx' is not in this build; available: $available" \
  "${MPIRUN[@]}" -np 4 "$REFIT" run --model tiny --trainer fsdp=2 --rollout tp=2 --transport ucx
expect_error_mpi 2 "refit: error: world size is 3 but trainer fsdp=2,tp=1 and rollout tp=2 (disaggregated) need 4 ranks; run mpirun -np 4" \
  "${MPIRUN[@]}" -np 3 "$REFIT" run --transport mpi --model tiny --trainer fsdp=2 --rollout tp=2
# A typo in a layout is caught before anything is planned (the plan of 131074 ranks would take
# a while); the bound guards against the check moving behind the planner again.
expect_error_mpi 2 "refit: error: world size is 4 but trainer fsdp=2,tp=1,dp=65536 and rollout tp=2 (disaggregated) need 131074 ranks; run mpirun -np 131074" \
  timeout 60 "${MPIRUN[@]}" -np 4 "$REFIT" run --transport mpi --model tiny --trainer fsdp=2,dp=65536 --rollout tp=2
expect_error 2 "refit: error: trainer layout 'fsdp=65536,tp=65536': 4294967296 ranks is more than the 1048576 refit plans for one side; choose smaller axes" \
  "$REFIT" plan --model tiny --trainer fsdp=65536,tp=65536 --rollout tp=2
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
