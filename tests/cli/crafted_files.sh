# Crafted inputs: files whose attributes or extents lie, symlinks planted where refit writes,
# existing files, FIFOs and devices given as inputs, and shard indexes that point outside the
# checkpoint. Each must give exactly one line and its exit code, never a crash or a hang. The
# files are made here, with h5py (Debian's python3-h5py) where HDF5 internals are needed.
. "$(dirname "$0")/lib.sh"

need_h5py
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One process holding both roles: no mpirun is needed to open a checkpoint.
RUN1=("$REFIT" run --model tiny --trainer fsdp=1 --rollout tp=1 --placement colocated)
# A command that hangs is killed by timeout (exit 124), which no expectation below accepts.
# Commands without MPI get 5 s; `refit run` starts MPI first, which takes seconds on a busy
# machine.
T=(timeout 5)
TRUN=(timeout 60)
TODO="give a results file written by 'refit run --output'"

# ---- HDF5 checkpoints whose dtype attribute lies ----------------------------------------------

expect_exit 0 "$REFIT" checkpoint --model tiny --checkpoint "$TMP/many.h5"
expect_grep "wrote $TMP/many.h5: tiny, 21 tensors, 279168 bytes, hdf5" "$TMP/out"
cp "$TMP/many.h5" "$TMP/int.h5"
"$PY" - "$TMP" <<'EOF' || fail "could not craft the checkpoints"
import sys, h5py, numpy as np
tmp = sys.argv[1]
with h5py.File(tmp + "/many.h5", "a") as f:  # 1000 strings where one is read
    d = f["model.norm.weight"]
    del d.attrs["dtype"]
    d.attrs["dtype"] = np.array(["bfloat16"] * 1000, dtype=h5py.string_dtype())
with h5py.File(tmp + "/int.h5", "a") as f:  # 1000 integers where a string is read
    d = f["model.norm.weight"]
    del d.attrs["dtype"]
    d.attrs["dtype"] = np.arange(1000, dtype="i4")
EOF
expect_error_mpi 2 "refit: error: checkpoint '$TMP/many.h5': attribute 'dtype' of /model.norm.weight holds 1000 elements, expected 1" \
  "${TRUN[@]}" "${RUN1[@]}" --checkpoint "$TMP/many.h5"
expect_error_mpi 2 "refit: error: checkpoint '$TMP/int.h5': attribute 'dtype' of /model.norm.weight is an HDF5 integer, expected a string" \
  "${TRUN[@]}" "${RUN1[@]}" --checkpoint "$TMP/int.h5"

# ---- results files whose phases attribute or timings extent lies ------------------------------

expect_exit 0 "${TRUN[@]}" "${RUN1[@]}" --warmup 0 --iters 1 --output "$TMP/r.h5"
cp "$TMP/r.h5" "$TMP/phases.h5"
cp "$TMP/r.h5" "$TMP/extent.h5"
"$PY" - "$TMP" <<'EOF' || fail "could not craft the results files"
import sys, h5py, numpy as np
tmp = sys.argv[1]
# 10^5 phase names for 7 columns. So many need dense attribute storage, which only a dataset
# made with the newest file format has: the timings are made again that way.
with h5py.File(tmp + "/phases.h5", "a", libver="latest") as f:
    g = f["runs/0000"]
    data, attrs = g["timings"][()], dict(g["timings"].attrs)
    del g["timings"]
    t = g.create_dataset("timings", data=data)
    for k, v in attrs.items():
        if k != "phases":
            t.attrs[k] = v
    t.attrs["phases"] = np.array(["total"] * 100000, dtype=h5py.string_dtype())
with h5py.File(tmp + "/extent.h5", "a") as f:  # an extent no run has, with no data behind it
    g = f["runs/0000"]
    del g["timings"]
    g.create_dataset("timings", shape=(1000000, 1000000, 7), chunks=(1, 1, 7), dtype="f8")
EOF
nphases=$("$PY" -c 'import sys, h5py; print(h5py.File(sys.argv[1])["runs/0000/timings"].shape[2])' "$TMP/r.h5")
expect_error 2 "refit: error: results file '$TMP/phases.h5': attribute 'phases' of /runs/0000/timings holds 100000 elements, expected $nphases; $TODO" \
  "${T[@]}" "$REFIT" report "$TMP/phases.h5" -o "$TMP/rep1"
expect_error 2 "refit: error: results file '$TMP/extent.h5': dataset /runs/0000/timings has shape [1000000, 1000000, 7], more than the 268435456 elements refit reads there; $TODO" \
  "${T[@]}" "$REFIT" report "$TMP/extent.h5" -o "$TMP/rep2"
expect_exit 0 "${T[@]}" "$REFIT" report "$TMP/r.h5" -o "$TMP/rep3"

# ---- symlinks planted where refit writes ------------------------------------------------------

echo "precious" >"$TMP/victim"
for name in planted.safetensors planted.h5; do
  ln -s "$TMP/victim" "$TMP/$name.partial"
  expect_exit 0 "$REFIT" checkpoint --model tiny --checkpoint "$TMP/$name"
  [ "$(cat "$TMP/victim")" = "precious" ] || fail "writing $name changed the symlink's target"
  [ -f "$TMP/$name" ] && [ ! -L "$TMP/$name" ] || fail "$name was not written as a file"
  [ -L "$TMP/$name.partial" ] || fail "the symlink beside $name was removed"
done
mkdir -p "$TMP/rep4"
ln -s "$TMP/victim" "$TMP/rep4/report.html"
ln -s "$TMP/victim" "$TMP/rep4/runs.csv.partial"
expect_exit 0 "${T[@]}" "$REFIT" report "$TMP/r.h5" -o "$TMP/rep4"
[ "$(cat "$TMP/victim")" = "precious" ] || fail "refit report wrote through a symlink"
[ -f "$TMP/rep4/report.html" ] && [ ! -L "$TMP/rep4/report.html" ] ||
  fail "report.html was not replaced by a file"

# ---- existing checkpoints, --force and the format from the extension -------------------------

cp "$TMP/r.h5" "$TMP/keep.h5"
expect_error 2 "refit: error: checkpoint '$TMP/keep.h5' already exists; give --force to overwrite it, or another --checkpoint" \
  "$REFIT" checkpoint --model tiny --checkpoint "$TMP/keep.h5"
cmp -s "$TMP/r.h5" "$TMP/keep.h5" || fail "refit checkpoint changed an existing file without --force"
expect_exit 0 "$REFIT" checkpoint --model tiny --checkpoint "$TMP/keep.h5" --force
expect_grep "wrote $TMP/keep.h5: tiny, 21 tensors, 279168 bytes, hdf5" "$TMP/out"
expect_exit 0 "$REFIT" checkpoint --model tiny --checkpoint "$TMP/sh" --shard-size 40000
expect_error 2 "refit: error: checkpoint '$TMP/sh/model.safetensors.index.json' already exists; give --force to overwrite it, or another --checkpoint" \
  "$REFIT" checkpoint --model tiny --checkpoint "$TMP/sh" --shard-size 40000
expect_exit 0 "$REFIT" checkpoint --model tiny --checkpoint "$TMP/x.hdf5"
expect_grep "wrote $TMP/x.hdf5: tiny, 21 tensors, 279168 bytes, hdf5" "$TMP/out"
"$PY" -c 'import sys, h5py; h5py.File(sys.argv[1], "r")["model.norm.weight"]' "$TMP/x.hdf5" ||
  fail "x.hdf5 is not an HDF5 checkpoint"
expect_exit 0 "$REFIT" checkpoint --model tiny --checkpoint "$TMP/st.h5" --format safetensors
expect_grep "wrote $TMP/st.h5: tiny, 21 tensors, 279168 bytes, safetensors" "$TMP/out"

# ---- FIFOs and devices as inputs --------------------------------------------------------------

mkfifo "$TMP/fifo"
expect_error 2 "refit: error: $TMP/fifo: cannot read the config file: is a FIFO, not a regular file; give a JSON file of options" \
  "${T[@]}" "$REFIT" plan --config "$TMP/fifo"
expect_error 2 "refit: error: /dev/urandom: cannot read the config file: is a character device, not a regular file; give a JSON file of options" \
  "${T[@]}" "$REFIT" plan --config /dev/urandom
truncate -s 17M "$TMP/big.json"
expect_error 2 "refit: error: $TMP/big.json: cannot read the config file: is larger than the 16.00 MiB refit reads; give a JSON file of options" \
  "${T[@]}" "$REFIT" plan --config "$TMP/big.json"
expect_error 2 "refit: error: model '$TMP/fifo': cannot read: is a FIFO, not a regular file; pass a config.json file" \
  "${T[@]}" "$REFIT" plan --model "$TMP/fifo" --trainer fsdp=2 --rollout tp=2
expect_error 2 "refit: error: model $TMP/big.json: cannot read: is larger than the 16.00 MiB refit reads; pass a config.json file" \
  "${T[@]}" "$REFIT" plan --model "$TMP/big.json" --trainer fsdp=2 --rollout tp=2
expect_error_mpi 2 "refit: error: checkpoint '$TMP/fifo' is a FIFO, not a regular file; give a checkpoint file or a directory of shards" \
  "${TRUN[@]}" "${RUN1[@]}" --checkpoint "$TMP/fifo"

# ---- shard indexes that name files outside the checkpoint's directory ------------------------

for bad in ../x /etc/passwd; do
  rm -rf "$TMP/esc"
  cp -r "$TMP/sh" "$TMP/esc"
  "$PY" - "$TMP/esc/model.safetensors.index.json" "$bad" <<'EOF' || fail "could not craft the index"
import json, sys
index = json.load(open(sys.argv[1]))
index["weight_map"]["model.embed_tokens.weight"] = sys.argv[2]
json.dump(index, open(sys.argv[1], "w"))
EOF
  expect_error_mpi 2 "refit: error: checkpoint '$TMP/esc/model.safetensors.index.json': the weight_map entry of tensor model.embed_tokens.weight is '$bad', which is not a file beside the index; shards must sit in the checkpoint's directory" \
    "${TRUN[@]}" "${RUN1[@]}" --checkpoint "$TMP/esc"
done

finish
