# HDF5 results (--output): runs append as /runs/NNNN, the file holds everything the schema of
# results/README.md promises (checked with h5dump and h5py), a job killed with SIGKILL midway
# leaves the earlier runs intact and the file appendable, and a file that is not refit's is
# refused (exit 2) and left as it was.
. "$(dirname "$0")/lib.sh"

command -v h5dump >/dev/null || { echo "skipped: h5dump is not installed"; exit 77; }
"$REFIT" run --help 2>&1 | grep -q -- '--output' ||
  { echo "skipped: this refit has no run --output"; exit 77; }
CHECKER=("/usr/bin/python3" "$REFIT_SOURCE_DIR/tests/cli/results_h5py.py")
JOB=(run --model tiny --trainer fsdp=2 --rollout tp=2)
OUT="$TMP/r.h5"

# check_with_h5py ARGS...: the h5py checker passes; without h5py it is skipped, not failed.
check_with_h5py() {
  "${CHECKER[@]}" "$@" >"$TMP/py" 2>&1
  case $? in
  0) ;;
  77) echo "note: $(cat "$TMP/py")" ;;
  *) fail "h5py checker: $(cat "$TMP/py")" ;;
  esac
}

# Two invocations of two modes each: four runs, numbered on from the file's last.
for round in 1 2; do
  expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" "${JOB[@]}" --mode grouped,fused --iters 2 \
    --output "$OUT"
  expect_rows 2
  # The job's own setup, once, under the header: every step named, in order.
  grep -Eq '^# setup \(slowest rank, once per job\): plan [0-9]+\.[0-9] ms, control [0-9]+\.[0-9] ms, gpu 0\.0 ms, transport [0-9]+\.[0-9] ms, arenas [0-9]+\.[0-9] ms, register [0-9]+\.[0-9] ms$' "$TMP/out" ||
    fail "no setup line: $(grep '^# setup' "$TMP/out")"
  [ "$(grep -c '^# setup' "$TMP/out")" = 1 ] || fail "the setup line is not printed once"
done
h5dump -H "$OUT" >"$TMP/dump" 2>&1 || fail "h5dump -H failed: $(head -c 600 "$TMP/dump")"
for run in 0000 0001 0002 0003; do
  expect_grep "GROUP \"$run\"" "$TMP/dump"
done
grep -q 'GROUP "0004"' "$TMP/dump" && fail "two invocations of two modes wrote a fifth run"
for name in timings summary tensors shards placement env send_bytes recv_bytes; do
  expect_grep "DATASET \"$name\"" "$TMP/dump"
done
for name in refit_format refit_version git_commit created command_line hosts mpi_version \
  hdf5_version hwloc_version config_json algbw_GBps aggbw_GBps formula_algbw phases units; do
  expect_grep "ATTRIBUTE \"$name\"" "$TMP/dump"
done
check_with_h5py "$OUT" --runs 4 --ok

# A bigger job killed with SIGKILL a few seconds in, in the middle of its work: the file was
# closed since the last run was appended, so h5dump still reads it, runs 0000..0003 are byte
# for byte what they were, and the next job appends after them.
h5dump -g /runs/0000 -g /runs/0001 -g /runs/0002 -g /runs/0003 "$OUT" >"$TMP/before" 2>&1
"${MPIRUN[@]}" -np 4 "$REFIT" run --model llama-3.2-1b --trainer fsdp=2 --rollout tp=2 \
  --output "$OUT" >"$TMP/killed.out" 2>&1 &
launcher=$!
sleep 3
# The ranks are mpirun's children; they are killed by id together with it.
ranks=$(pgrep -P "$launcher" | tr '\n' ' ')
kill -9 "$launcher" $ranks 2>/dev/null
wait "$launcher" 2>/dev/null
for pid in $ranks; do
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
done
[ -n "$ranks" ] || fail "the job to kill had no ranks yet: $(head -c 600 "$TMP/killed.out")"
grep -q '^# PASS' "$TMP/killed.out" && fail "the job finished before it was killed; kill sooner"
h5dump -H "$OUT" >"$TMP/dump" 2>&1 || fail "h5dump fails after the kill: $(head -c 600 "$TMP/dump")"
h5dump -g /runs/0000 -g /runs/0001 -g /runs/0002 -g /runs/0003 "$OUT" >"$TMP/after" 2>&1
cmp -s "$TMP/before" "$TMP/after" || fail "runs 0000..0003 changed after the kill"
check_with_h5py "$OUT" --ok
runs=$(grep -c 'GROUP "[0-9]\{4,\}"' "$TMP/dump")
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" "${JOB[@]}" --mode fused --iters 1 --output "$OUT"
h5dump -H "$OUT" >"$TMP/dump" 2>&1
expect_grep "GROUP \"$(printf %04d "$runs")\"" "$TMP/dump"
check_with_h5py "$OUT" --runs $((runs + 1)) --ok

# Files that are not refit's results: refused with one line and exit 2, and not touched.
head -c 4096 /dev/urandom >"$TMP/garbage.h5"
h5copy -i "$OUT" -o "$TMP/foreign.h5" -s /runs/0000/timings -d /timings ||
  fail "h5copy could not make a foreign HDF5 file"
for file in garbage foreign; do
  cp "$TMP/$file.h5" "$TMP/$file.orig"
done
expect_error_mpi 2 "refit: error: results file '$TMP/garbage.h5' is not an HDF5 file or is damaged; choose another --output or move it away" \
  "${MPIRUN[@]}" -np 4 "$REFIT" "${JOB[@]}" --iters 1 --output "$TMP/garbage.h5"
expect_error_mpi 2 "refit: error: results file '$TMP/foreign.h5' is an HDF5 file but not refit's results; choose another --output" \
  "${MPIRUN[@]}" -np 4 "$REFIT" "${JOB[@]}" --iters 1 --output "$TMP/foreign.h5"
for file in garbage foreign; do
  cmp -s "$TMP/$file.h5" "$TMP/$file.orig" || fail "the refused $file.h5 was modified"
done
finish
