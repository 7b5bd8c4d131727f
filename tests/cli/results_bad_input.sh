# Results files that refit did not write as they are: objects of the wrong kind or type, and
# datasets whose extent lies (declared and never written, or of another shape than their run).
# Each is bad input: exit 2 and one line naming the file and the object, for refit report,
# refit verify and appending, in bounded memory. Then what refit's writers leave beside the file:
# the copies of killed writers go, and a full disk is said in numbers. Files made with h5py.
. "$(dirname "$0")/lib.sh"

need_h5py
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
RUN1=("$REFIT" run --model tiny --trainer fsdp=1 --rollout tp=1 --placement colocated --warmup 0
  --iters 1)
T=(timeout 10)
TRUN=(timeout 60)
TODO="give a results file written by 'refit run --output'"

# peak CMD...: runs CMD, leaving its peak resident memory in KB (its descendants' included)
# in $TMP/rss, and exits with its exit code. Python's getrusage, since /usr/bin/time is not
# installed everywhere. Under ASan the quarantine keeps up to 256 MiB of freed memory resident,
# which is the sanitizer's and not refit's: it is held to 16 MiB here.
peak() {
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=16" "$PY" -c 'import resource, subprocess, sys
rc = subprocess.call(sys.argv[2:])
open(sys.argv[1], "w").write("%d\n" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(rc if rc >= 0 else 128 - rc)' "$TMP/rss" "$@"
}

# expect_error_under KB CODE "exact line" CMD...: expect_error, and CMD peaked under KB.
expect_error_under() {
  local limit=$1
  shift
  expect_error "$1" "$2" peak "${@:3}"
  [ "$(cat "$TMP/rss")" -lt "$limit" ] || fail "'${*:3}' peaked at $(cat "$TMP/rss") KB, more than $limit KB"
}

expect_exit 0 "${TRUN[@]}" "${RUN1[@]}" --output "$TMP/r.h5"
"$PY" - "$TMP" <<'EOF2' || fail "could not craft the results files"
import shutil, sys, zlib
import h5py, numpy as np
tmp = sys.argv[1]

def craft(name, change):
    shutil.copy(tmp + "/r.h5", tmp + "/" + name)
    with h5py.File(tmp + "/" + name, "a") as f:
        change(f["runs/0000"], f)

def timings_strings(g, f):
    del g["timings"]
    g["timings"] = np.array([[["0.1"] * 7]], dtype="S8")

def tensors_floats(g, f):
    del g["tensors"]
    g["tensors"] = np.zeros(21)

def tensors_group(g, f):
    del g["tensors"]
    g.create_group("tensors")

def runs_dataset(g, f):
    del f["runs"]
    f["runs"] = np.zeros(3)

def timings_unwritten(g, f):  # 40 KB of file for 16 Mi cells of one phase
    del g["timings"]
    t = g.create_dataset("timings", shape=(4096, 4096, 1), dtype="f8")
    t.attrs["phases"] = np.array(["total"], dtype=h5py.string_dtype())

def tensors_type(replicas):
    d = h5py.File(tmp + "/r.h5", "r")["runs/0000/tensors"].dtype
    return np.dtype([(n, ("<u8", (replicas,)) if n == "rollout_checksum" else d.fields[n][0])
                     for n in d.names])

def tensors_unwritten(g, f):  # 2^18 rows of 1024 replicas, 2 GiB declared
    del g["tensors"]
    t = g.create_dataset("tensors", shape=(1 << 18,), dtype=tensors_type(1024))
    t.attrs["replicas"] = g.attrs["replicas"] = 1024

def tensors_columns(g, f):  # 3 rollout checksums a row where the run had 1 replica
    rows = g["tensors"][()]
    wide = np.zeros(rows.shape, dtype=tensors_type(3))
    for n in rows.dtype.names:
        if n != "rollout_checksum":
            wide[n] = rows[n]
    del g["tensors"]
    g["tensors"] = wide

# Timings of 512 iterations of 1024 ranks, stored compressed (100 KB of file for 28 MiB of
# values): iteration i's total is (i + 1) ms on every rank.
def timings_large(g, f):
    phases = g["timings"].attrs["phases"]
    total = list(phases).index(b"total" if isinstance(phases[0], bytes) else "total")
    del g["timings"]
    n = len(phases)
    t = g.create_dataset("timings", shape=(512, 1024, n), chunks=(1, 1024, n), dtype="<f8",
                         compression="gzip")
    t.attrs["phases"] = phases
    t.attrs["order"] = "iteration, rank, phase"
    g.attrs["iterations"], g.attrs["ranks"] = 512, 1024
    row = np.zeros((1, 1024, n), dtype="<f8")
    for i in range(512):
        row[..., total] = (i + 1) * 1e-3
        t.id.write_direct_chunk((i, 0, 0), zlib.compress(row.tobytes(), 1))

# 4096 tensors, more than one slice of the reader; the copy "b" differs in row 3000.
def tensors_many(g, f):
    rows = np.zeros((4096,), dtype=tensors_type(1))
    rows["name"] = [b"t%04d" % i for i in range(4096)]
    rows["trainer_checksum"] = np.arange(4096, dtype="<u8") * 7919
    rows["rollout_checksum"][:, 0] = rows["trainer_checksum"]
    del g["tensors"]
    g["tensors"] = rows
    g["tensors"].attrs["replicas"] = g.attrs["replicas"] = 1

def model_path(g, f):  # a model attribute that names a file for refit to open
    g.attrs["model"] = "/etc/passwd"

craft("mp.h5", model_path)
craft("ts.h5", timings_strings)
craft("tf.h5", tensors_floats)
craft("tg.h5", tensors_group)
craft("rd.h5", runs_dataset)
craft("big.h5", timings_unwritten)
craft("wide.h5", tensors_unwritten)
craft("cols.h5", tensors_columns)
craft("large.h5", timings_large)
craft("many.h5", tensors_many)
shutil.copy(tmp + "/many.h5", tmp + "/manyb.h5")
with h5py.File(tmp + "/manyb.h5", "a") as f:
    t = f["runs/0000/tensors"]
    row = t[3000]
    row["rollout_checksum"][0] += 1
    t[3000] = row
EOF2

# ---- objects of the wrong kind or type: report, verify and appending --------------------------

TS="dataset /runs/0000/timings holds fixed-length strings, expected 8-byte floats"
expect_error 2 "refit: error: results file '$TMP/ts.h5': $TS; $TODO" \
  "${T[@]}" "$REFIT" report "$TMP/ts.h5" -o "$TMP/rep"
TF="dataset /runs/0000/tensors holds 8-byte floats, expected a table (an HDF5 compound)"
expect_error 2 "refit: error: results file '$TMP/tf.h5': $TF; $TODO" \
  "${T[@]}" "$REFIT" verify "$TMP/tf.h5" --reference "$TMP/r.h5"
expect_error 2 "refit: error: results file '$TMP/tg.h5': /runs/0000/tensors is a group, expected a dataset; $TODO" \
  "${T[@]}" "$REFIT" verify "$TMP/tg.h5" --reference "$TMP/r.h5"
expect_error 2 "refit: error: results file '$TMP/tg.h5': /runs/0000/tensors is a group, expected a dataset; $TODO" \
  "${T[@]}" "$REFIT" verify "$TMP/r.h5" --reference "$TMP/tg.h5"
for cmd in "report $TMP/rd.h5 -o $TMP/rep" "verify $TMP/rd.h5 --reference $TMP/r.h5"; do
  # shellcheck disable=SC2086
  expect_error 2 "refit: error: results file '$TMP/rd.h5': /runs is a dataset, expected a group; $TODO" \
    "${T[@]}" "$REFIT" $cmd
done
expect_error_mpi 2 "refit: error: results file '$TMP/rd.h5': /runs is a dataset, expected a group; choose another --output or move it away" \
  "${TRUN[@]}" "${RUN1[@]}" --output "$TMP/rd.h5"
expect_error 2 "refit: error: results file '$TMP/cols.h5': dataset /runs/0000/tensors holds 3 rollout checksums a row but its run records 1 replicas; $TODO" \
  "${T[@]}" "$REFIT" verify "$TMP/cols.h5" --reference "$TMP/r.h5"
# A run's model attribute is a model's name; verify opens no path a results file names.
expect_exit 0 "${T[@]}" "$REFIT" checkpoint --model tiny --checkpoint "$TMP/tiny.safetensors"
expect_error 2 "refit: error: results file '$TMP/mp.h5' run 0000: attribute 'model' is '/etc/passwd', not a model's name; $TODO" \
  "${T[@]}" "$REFIT" verify "$TMP/mp.h5" --checkpoint "$TMP/tiny.safetensors"
# The report and an append do not read tensors: they take such a file as it is.
expect_exit 0 "${T[@]}" "$REFIT" report "$TMP/cols.h5" -o "$TMP/rep"

# ---- extents that lie, in bounded memory ----------------------------------------------------

expect_error_under 200000 2 "refit: error: results file '$TMP/big.h5': dataset /runs/0000/timings has shape [4096, 4096, 1] but its run records iterations 1 and ranks 1; $TODO" \
  "${T[@]}" "$REFIT" report "$TMP/big.h5" -o "$TMP/rep"
expect_error_under 200000 2 "refit: error: results file '$TMP/wide.h5': dataset /runs/0000/tensors declares 2.04 GiB of data but the file holds 0 B of it (never written); $TODO" \
  "${T[@]}" "$REFIT" verify "$TMP/wide.h5" --reference "$TMP/r.h5"
# 28 MiB of timings are read a slice at a time, keeping total alone: the report's spread is over
# 2^19 values, 1 to 512 ms, and every rank's median is 256.5 ms.
expect_exit 0 peak "${T[@]}" "$REFIT" report "$TMP/large.h5" -o "$TMP/rep"
[ "$(cat "$TMP/rss")" -lt 200000 ] || fail "refit report large.h5 peaked at $(cat "$TMP/rss") KB"
expect_grep "1,0,grouped,268435456,524288,1,256.5,507,512,256.5,256.5" "$TMP/rep/spread.csv"

# ---- a table of more rows than one slice ------------------------------------------------------

expect_exit 1 "${T[@]}" "$REFIT" verify "$TMP/manyb.h5" --reference "$TMP/many.h5"
[ "$(grep -c '^differs: ' "$TMP/out")" = 1 ] || fail "verify found other than one differing tensor: $(head -c 600 "$TMP/out")"
expect_grep "differs: t3000  trainer 00000000016a80c8  rollout 00000000016a80c9  reference trainer 00000000016a80c8  rollout 00000000016a80c8" "$TMP/out"
expect_grep "# $TMP/manyb.h5 run 0000 against $TMP/many.h5: 1 of 4096 tensors differ" "$TMP/out"

# ---- the copies of killed writers --------------------------------------------------------------

# A writer killed during an append (kill -9) leaves its copy PATH.<pid>@<host>.tmp; the next
# writer removes those of this host whose pid is gone, and an older refit's PATH.<pid>.tmp under
# the lock. A live writer's copy and another host's stay.
true &
dead=$!
wait "$dead"
sleep 60 &
live=$!
host=$(hostname | tr -c 'A-Za-z0-9._\n-' '_')
for name in "$dead" "$dead.2" "$dead@$host" "$dead@elsewhere" "$live@$host"; do
  head -c 1000 /dev/zero >"$TMP/r.h5.$name.tmp"
done
expect_exit 0 "${TRUN[@]}" "${RUN1[@]}" --output "$TMP/r.h5"
left=$(cd "$TMP" && ls r.h5.*.tmp | tr '\n' ' ')
[ "$left" = "r.h5.$dead@elsewhere.tmp r.h5.$live@$host.tmp " ] || fail "temporary copies left: $left"
kill "$live"

# ---- a full disk ------------------------------------------------------------------------------

# Where this root may mount a tmpfs of 1 MiB, an append to a file there needs more than the file
# system has, and says how much (test_results checks the line's numbers everywhere).
mkdir "$TMP/mnt"
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=1m tmpfs "$TMP/mnt" 2>/dev/null; then
  trap 'umount "$TMP/mnt" 2>/dev/null; rm -rf "$TMP"' EXIT
  expect_exit 3 "${TRUN[@]}" "${RUN1[@]}" --output "$TMP/mnt/x.h5"
  grep '^refit' "$TMP/err" | sed 's/^refit\[[^]]*\]/refit/' >"$TMP/refit_err"
  M="$TMP/mnt"
  [ "$(wc -l <"$TMP/refit_err")" = 1 ] && grep -qEx "refit: error: results file '$M/x.h5': appending needs [0-9]+ bytes \(1\.[0-9]{2} MiB: a copy of the file, twice this run and 1 MiB\) and the file system of '$M' has [0-9]+ \([0-9.]+ KiB\) free; free space there or choose another --output; the run was written to '$M/x.h5.run-[0-9T]+Z-[0-9]+.h5' instead \(refit report and refit verify read it like any results file\)" "$TMP/refit_err" ||
    fail "a full disk was said as: $(cat "$TMP/err")"
  umount "$TMP/mnt"
else
  echo "note: no tmpfs can be mounted here; the full-disk line is checked by test_results alone"
fi

finish
