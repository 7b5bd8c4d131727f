# A results file that someone else has open never loses a run: an h5py reader holding it open
# and another job appending to it at the same time (with and without HDF5's file locking) leave
# every run recorded; a writer that cannot get the file within --output-wait writes the run to
# a side file that `refit report` reads; a full disk says "No space left on device" with exit 3
# and no crash; a symbolic link planted at the temporary name of a new file is left alone.
. "$(dirname "$0")/lib.sh"

PY=/usr/bin/python3
"$PY" -c 'import h5py' 2>/dev/null || { echo "skipped: python3-h5py is not installed"; exit 77; }
JOB=(run --model tiny --trainer fsdp=2 --rollout tp=2 --iters 1 --warmup 0)
OUT="$TMP/r.h5"

# count_runs FILE: the number of /runs/NNNN groups, read with h5py.
count_runs() {
  "$PY" -c 'import h5py, sys; print(len(h5py.File(sys.argv[1], "r")["runs"]))' "$1" 2>&1
}

# A reader holds the file open (h5py takes HDF5's shared lock) while four 4-rank jobs append
# three runs each, and a second reader polls it as fast as it can, opening it afresh each time:
# it never finds a half-written file (in-place appends showed it "truncated file" about once in
# six appends; appends now go to a copy renamed into place).
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" "${JOB[@]}" --mode fused --output "$OUT"
"$PY" -c 'import h5py, sys, time
f = h5py.File(sys.argv[1], "r"); print(len(f["runs"]), flush=True); time.sleep(60)' "$OUT" \
  >"$TMP/holder" 2>&1 &
holder=$!
"$PY" -c 'import h5py, os, sys
seen = set()
while not os.path.exists(sys.argv[2]):
    try:
        with h5py.File(sys.argv[1], "r") as f:
            seen.add(len(f["runs"]))
    except Exception as e:
        print("error", e, flush=True)
print(min(seen), max(seen), len(seen) > 2, flush=True)' "$OUT" "$TMP/stop" >"$TMP/poller" 2>&1 &
poller=$!
while [ ! -s "$TMP/holder" ]; do sleep 0.1; done
for job in 1 2 3 4; do
  expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" "${JOB[@]}" --mode unfused,grouped,fused --output "$OUT"
done
expect_rows 3
sleep 0.3
touch "$TMP/stop"
wait "$poller"
kill "$holder"
wait "$holder" 2>/dev/null
[ "$(cat "$TMP/holder")" = 1 ] || fail "the holding reader saw: $(cat "$TMP/holder")"
[ "$(count_runs "$OUT")" = 13 ] || fail "runs after appending beside a reader: $(count_runs "$OUT")"
grep -q '^error' "$TMP/poller" && fail "the polling reader failed: $(grep -m1 '^error' "$TMP/poller")"
# It saw the file before the jobs, after them and some runs in between.
[ "$(tail -n 1 "$TMP/poller")" = "1 13 True" ] ||
  fail "the polling reader did not see the runs arrive: $(tail -n 1 "$TMP/poller")"

# An append replaces the file by a copy: a results file reached through a symbolic link stays
# behind the link, and it keeps its mode.
mkdir -p "$TMP/store"
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" "${JOB[@]}" --mode fused --output "$TMP/store/l.h5"
chmod 640 "$TMP/store/l.h5"
ln -s store/l.h5 "$TMP/link.h5"
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" "${JOB[@]}" --mode grouped --output "$TMP/link.h5"
[ -L "$TMP/link.h5" ] || fail "the symbolic link was replaced by a file"
[ "$(count_runs "$TMP/store/l.h5")" = 2 ] || fail "the linked file holds $(count_runs "$TMP/store/l.h5") runs"
[ "$(stat -c %a "$TMP/store/l.h5")" = 640 ] || fail "the mode became $(stat -c %a "$TMP/store/l.h5")"
[ -z "$(ls "$TMP/store" | grep -v '^l\.h5\(\.lock\)\?$')" ] || fail "the append left: $(ls "$TMP/store" | tr '\n' ' ')"

# Two jobs append to one file at once, with HDF5's locking and without it: every run is there.
for locking in TRUE FALSE; do
  rm -f "$TMP/two.h5"
  HDF5_USE_FILE_LOCKING=$locking "${MPIRUN[@]}" -np 4 "$REFIT" "${JOB[@]}" \
    --mode unfused,grouped,fused --output "$TMP/two.h5" >"$TMP/a.out" 2>&1 &
  first=$!
  HDF5_USE_FILE_LOCKING=$locking "${MPIRUN[@]}" -np 4 "$REFIT" "${JOB[@]}" \
    --mode unfused,grouped,fused --output "$TMP/two.h5" >"$TMP/b.out" 2>&1
  second=$?
  wait "$first"
  [ "$?" -eq 0 ] && [ "$second" -eq 0 ] ||
    fail "two writers (HDF5_USE_FILE_LOCKING=$locking) exited $? and $second: $(grep -h '^refit' "$TMP/a.out" "$TMP/b.out")"
  [ "$(count_runs "$TMP/two.h5")" = 6 ] ||
    fail "two writers (HDF5_USE_FILE_LOCKING=$locking) recorded $(count_runs "$TMP/two.h5") runs, not 6"
done

# Another process takes the writers' lock as soon as the job has checked the file, and holds it
# past --output-wait: the run goes to a side file, named in the one error line. The job's check
# holds the lock for a moment only and empties the lock file again, so the locker does not look
# for the holder's line (it missed it under load) but for the lock file's modification time
# moving on from what it was before the job started; its lockf then waits for the check to end.
"$PY" -c 'import fcntl, os, sys, time
name = sys.argv[1] + ".lock"
before = os.stat(name).st_mtime_ns
print("ready", flush=True)
while os.stat(name).st_mtime_ns == before:
    time.sleep(0.002)
f = open(name, "r+"); fcntl.lockf(f, fcntl.LOCK_EX)
f.truncate(0); f.write("pid 4242 on host elsewhere\n"); f.flush(); print("locked", flush=True)
time.sleep(60)' "$OUT" >"$TMP/locker" 2>&1 &
locker=$!
while [ ! -s "$TMP/locker" ]; do sleep 0.05; done
expect_exit 3 "${MPIRUN[@]}" -np 4 "$REFIT" "${JOB[@]}" --iters 30 --mode fused --output "$OUT" \
  --output-wait 1
kill "$locker"
wait "$locker" 2>/dev/null
[ "$(cat "$TMP/locker")" = "ready
locked" ] || fail "the locker did not take the lock: $(cat "$TMP/locker")"
side=$(ls "$OUT".run-*.h5 2>/dev/null)
[ "$(echo "$side" | grep -c .)" = 1 ] || fail "expected one side file, found: $side"
grep '^refit' "$TMP/err" | sed 's/^refit\[[^]]*\]/refit/' >"$TMP/refit_err"
cat >"$TMP/want" <<WANT
refit: warning: results file '$OUT' is busy: waiting up to 1 s (--output-wait) for pid 4242 on host elsewhere, which is writing to it
refit: error: results file '$OUT' is busy: pid 4242 on host elsewhere has been writing to it for more than 1 s (--output-wait); the run was written to '$side' instead (refit report and refit verify read it like any results file)
WANT
grep -v 'stopping: rank 0 failed' "$TMP/refit_err" | diff "$TMP/want" - >"$TMP/diff" ||
  fail "the busy writer printed: $(cat "$TMP/diff")"
[ "$(count_runs "$side")" = 1 ] || fail "the side file holds $(count_runs "$side") runs, not 1"
[ "$(count_runs "$OUT")" = 13 ] || fail "the busy file changed: $(count_runs "$OUT") runs"
expect_exit 0 "$REFIT" report "$side" -o "$TMP/side-report"
expect_exit 0 "$REFIT" verify "$side" --reference "$OUT"

# A full disk: a small tmpfs holding a results file with two runs, then filled up. The next
# append says so in one line and exits 3, four times over (it crashed about half the time in
# HDF5's exit handler), and the two runs stay intact.
DISK="$TMP/disk"
mkdir -p "$DISK"
if mount -t tmpfs -o size=4m tmpfs "$DISK" 2>/dev/null; then
  trap 'umount "$DISK" 2>/dev/null; rm -rf "$TMP"' EXIT
  expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" "${JOB[@]}" --mode grouped,fused --output "$DISK/r.h5"
  h5dump "$DISK/r.h5" >"$TMP/before" 2>&1
  dd if=/dev/zero of="$DISK/fill" bs=4k 2>/dev/null
  for attempt in 1 2 3 4; do
    expect_exit 3 "${MPIRUN[@]}" -np 4 "$REFIT" "${JOB[@]}" --mode fused --output "$DISK/r.h5"
    grep -q 'Process received signal\|Segmentation' "$TMP/err" && fail "attempt $attempt crashed"
    grep '^refit' "$TMP/err" | sed 's/^refit\[[^]]*\]/refit/' | grep -v 'stopping: rank 0 failed' |
      sed 's/\.run-[0-9]\{8\}T[0-9]\{6\}Z-[0-9]*\.h5/.run-TIME-PID.h5/' |
      sed -E 's/needs [0-9]+ bytes \([0-9.]+ MiB:/needs N bytes (S MiB:/; s/has [0-9]+ \([0-9.]+ [KM]?i?B\) free/has M (S) free/' >"$TMP/refit_err"
    echo "refit: error: results file '$DISK/r.h5': appending needs N bytes (S MiB: a copy of the file, twice this run and 1 MiB) and the file system of '$DISK' has M (S) free; free space there or choose another --output; the run is lost: its side file '$DISK/r.h5.run-TIME-PID.h5' cannot be written either: No space left on device" >"$TMP/want"
    diff "$TMP/want" "$TMP/refit_err" >"$TMP/diff" || fail "full disk, attempt $attempt: $(cat "$TMP/diff")"
  done
  ls "$DISK" | grep -q '\.run-\|\.tmp$' && fail "the full disk holds leftovers: $(ls "$DISK")"
  h5dump "$DISK/r.h5" >"$TMP/after" 2>&1
  cmp -s "$TMP/before" "$TMP/after" || fail "the runs on the full disk changed"
  umount "$DISK"
else
  echo "note: mount -t tmpfs is not allowed here; the full-disk case was not run"
  full_disk_skipped=1
fi

# A symbolic link planted at the temporary name of a new results file (PATH.<pid>@<host>.tmp,
# the pid being rank 0's, which exec keeps) is not followed: its target keeps its bytes.
echo "precious" >"$TMP/target"
host=$(hostname | tr -c 'A-Za-z0-9._\n-' '_')
expect_exit 0 "${MPIRUN[@]}" -np 4 bash -c '
  [ "$OMPI_COMM_WORLD_RANK" = 0 ] && ln -s "$1" "$2.$$@'"$host"'.tmp"; shift 2; exec "$@"' plant \
  "$TMP/target" "$TMP/new.h5" "$REFIT" "${JOB[@]}" --mode fused --output "$TMP/new.h5"
[ "$(cat "$TMP/target")" = precious ] || fail "the symlink's target was overwritten"
[ "$(ls "$TMP"/new.h5.*.tmp | wc -l)" = 1 ] || fail "expected only the planted link: $(ls "$TMP"/new.h5.*)"
[ "$(count_runs "$TMP/new.h5")" = 1 ] || fail "the new file holds $(count_runs "$TMP/new.h5") runs"

[ "${full_disk_skipped:-0}" = 1 ] && [ "$failures" -eq 0 ] && { echo "skipped: the full-disk case needs mount -t tmpfs"; exit 77; }
finish
