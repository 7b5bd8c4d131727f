# `refit checkpoint` writes files that other tools read (the safetensors header checked with
# plain Python json + struct, the HDF5 file with h5py where it is installed), and
# `refit run --checkpoint` refuses each kind of bad checkpoint with one line and exit 2.
. "$(dirname "$0")/lib.sh"

PY=/usr/bin/python3
if [ ! -x "$PY" ]; then
  echo "SKIP: $PY is missing"
  exit 77
fi

# ---- writing --------------------------------------------------------------------------------

expect_exit 0 "$REFIT" checkpoint --model tiny --checkpoint "$TMP/t.safetensors"
[ "$(cat "$TMP/out")" = "wrote $TMP/t.safetensors: tiny, 21 tensors, 279168 bytes, safetensors" ] ||
  fail "unexpected summary: $(cat "$TMP/out")"
expect_exit 0 "$REFIT" checkpoint --model tiny --checkpoint "$TMP/sharded" --shard-size 40000
want="wrote $TMP/sharded: tiny, 21 tensors, 279168 bytes, safetensors, 7 shards"
[ "$(cat "$TMP/out")" = "$want" ] || fail "unexpected summary: $(cat "$TMP/out")"
expect_exit 0 "$REFIT" checkpoint --model tiny --checkpoint "$TMP/t.h5" --format hdf5
expect_exit 0 "$REFIT" checkpoint --model tiny --checkpoint "$TMP/f16.h5" --format hdf5 --dtype fp16
expect_exit 0 "$REFIT" checkpoint --model tiny --checkpoint "$TMP/f16.safetensors" --dtype fp16
expect_exit 0 "$REFIT" checkpoint --model tiny --checkpoint "$TMP/f32.safetensors" --dtype fp32
expect_error 2 "refit: error: refit checkpoint needs --checkpoint PATH (where to write)" \
  "$REFIT" checkpoint --model tiny
# DeepSeek's router bias keeps fp32 in a bf16 model, as in DeepSeek's checkpoints: each tensor
# is written in its own dtype (220344 parameters, the two 4-element biases at 4 bytes each).
# In fp32 every tensor is fp32.
deepseek="$REFIT_SOURCE_DIR/tests/data/tiny-deepseek.json"
expect_exit 0 "$REFIT" checkpoint --model "$deepseek" --checkpoint "$TMP/ds.safetensors"
expect_grep "wrote $TMP/ds.safetensors: tiny-deepseek, 67 tensors, 440704 bytes, safetensors" "$TMP/out"
expect_exit 0 "$REFIT" checkpoint --model "$deepseek" --checkpoint "$TMP/ds.h5"
expect_grep "wrote $TMP/ds.h5: tiny-deepseek, 67 tensors, 440704 bytes, hdf5" "$TMP/out"
if command -v h5dump >/dev/null; then
  # The HDF5 file's types, as h5dump names them: the two biases float32, the 65 others bf16 bits.
  h5dump -H "$TMP/ds.h5" >"$TMP/ds.dump" 2>&1 || fail "h5dump -H failed: $(head -c 600 "$TMP/ds.dump")"
  f32=$(awk '/DATASET/ { name = $2 } /DATATYPE  H5T_IEEE_F32LE/ { print name }' "$TMP/ds.dump" | tr '\n' ' ')
  [ "$f32" = '"model.layers.1.mlp.gate.e_score_correction_bias" "model.layers.2.mlp.gate.e_score_correction_bias" ' ] ||
    fail "unexpected float32 datasets in ds.h5: $f32"
  [ "$(grep -c 'DATATYPE  H5T_STD_U16LE' "$TMP/ds.dump")" = 65 ] || fail "expected 65 uint16 datasets in ds.h5"
fi
expect_exit 0 "$REFIT" checkpoint --model "$deepseek" --checkpoint "$TMP/ds32.safetensors" --dtype fp32
expect_grep "wrote $TMP/ds32.safetensors: tiny-deepseek, 67 tensors, 881376 bytes, safetensors" "$TMP/out"
expect_exit 3 "$REFIT" checkpoint --model tiny --checkpoint "$TMP/no/such/dir.safetensors"
expect_grep "cannot create the file: No such file or directory" "$TMP/err"

# ---- what another tool sees -------------------------------------------------------------------

# The header is standard JSON: every tensor of the model with its dtype, shape and a byte range
# of exactly its size; the ranges tile the data section in order; __metadata__ says who wrote it.
"$PY" - "$TMP" <<'EOF' || fail "the safetensors files do not read as expected (see above)"
import json, struct, sys

tmp = sys.argv[1]
layer = {"self_attn.q_proj.weight": [64, 64], "self_attn.k_proj.weight": [32, 64],
         "self_attn.v_proj.weight": [32, 64], "self_attn.o_proj.weight": [64, 64],
         "mlp.gate_proj.weight": [128, 64], "mlp.up_proj.weight": [128, 64],
         "mlp.down_proj.weight": [64, 128], "input_layernorm.weight": [64],
         "post_attention_layernorm.weight": [64]}
want = {"model.embed_tokens.weight": [512, 64]}
for i in range(2):
    want.update({"model.layers.%d.%s" % (i, k): v for k, v in layer.items()})
want.update({"model.norm.weight": [64], "lm_head.weight": [512, 64]})


def check(path, names, dtype, esize):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    assert n % 8 == 0 and 8 + n <= len(data), (path, n)
    header = json.loads(data[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__")
    assert meta == {"format": "pt", "generator": "refit", "seed": "1", "model": "tiny"}, meta
    assert sorted(header) == sorted(names), (path, sorted(header))
    end = 0
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        assert sorted(e) == ["data_offsets", "dtype", "shape"], e
        assert e["dtype"] == dtype and e["shape"] == want[name], (name, e)
        b, f = e["data_offsets"]
        count = 1
        for d in e["shape"]:
            count *= d
        assert b == end and f - b == count * esize, (name, e)
        end = f
    assert 8 + n + end == len(data), (path, len(data))


check(tmp + "/t.safetensors", want, "BF16", 2)
check(tmp + "/f16.safetensors", want, "F16", 2)
check(tmp + "/f32.safetensors", want, "F32", 4)
index = json.load(open(tmp + "/sharded/model.safetensors.index.json"))
assert index["metadata"] == {"total_size": 279168}, index["metadata"]
assert sorted(index["weight_map"]) == sorted(want)
shards = sorted(set(index["weight_map"].values()))
assert shards == ["model-%05d-of-00007.safetensors" % (i + 1) for i in range(7)], shards
for s in shards:
    check(tmp + "/sharded/" + s, [k for k, v in index["weight_map"].items() if v == s], "BF16", 2)

# The mixed file: the router biases are F32 of 16 bytes, every other tensor BF16, and the byte
# ranges tile the data section with each tensor at its own size. With --dtype fp32, all F32.
for name, big in (("ds.safetensors", False), ("ds32.safetensors", True)):
    data = open(tmp + "/" + name, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    header.pop("__metadata__")
    assert len(header) == 67, len(header)
    end, f32 = 0, []
    for key, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        count = 1
        for d in e["shape"]:
            count *= d
        own = key.endswith("e_score_correction_bias")
        if own:
            f32.append(key)
        want_dtype, esize = ("F32", 4) if own or big else ("BF16", 2)
        b, f = e["data_offsets"]
        assert e["dtype"] == want_dtype and b == end and f - b == count * esize, (name, key, e)
        end = f
    assert f32 == ["model.layers.1.mlp.gate.e_score_correction_bias",
                   "model.layers.2.mlp.gate.e_score_correction_bias"], f32
    assert len(data) == 8 + n + end == 8 + n + (881376 if big else 440704), (name, len(data))
EOF

# h5py sees float16 for fp16 and the raw bf16 bits as uint16 with dtype = "bfloat16"; both hold
# the same bits as the safetensors files.
if "$PY" -c "import h5py, numpy" 2>/dev/null; then
  "$PY" - "$TMP" <<'EOF' || fail "the HDF5 files do not match the safetensors files (see above)"
import json, struct, sys
import h5py, numpy as np

tmp = sys.argv[1]
for st, h5, kind in (("t.safetensors", "t.h5", "uint16"), ("f16.safetensors", "f16.h5", "float16")):
    data = open(tmp + "/" + st, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    with h5py.File(tmp + "/" + h5, "r") as f:
        assert f.attrs["generator"] == "refit" and f.attrs["model"] == "tiny", dict(f.attrs)
        assert int(f.attrs["seed"]) == 1
        for name, e in header.items():
            if name == "__metadata__":
                continue
            d = f[name]
            assert d.dtype == np.dtype(kind) and list(d.shape) == e["shape"], (name, d)
            if kind == "uint16":
                assert d.attrs["dtype"] == "bfloat16", dict(d.attrs)
            b, g = e["data_offsets"]
            raw = np.frombuffer(data[8 + n + b:8 + n + g], dtype="<u2").reshape(e["shape"])
            assert np.array_equal(d[...].view("<u2"), raw), name
# The mixed HDF5 file: the router biases are float32 datasets, the rest bf16 bits, the same bits
# as the safetensors file's.
data = open(tmp + "/ds.safetensors", "rb").read()
(n,) = struct.unpack("<Q", data[:8])
header = json.loads(data[8:8 + n])
with h5py.File(tmp + "/ds.h5", "r") as f:
    for name, e in header.items():
        if name == "__metadata__":
            continue
        d = f[name]
        kind = "<f4" if name.endswith("e_score_correction_bias") else "<u2"
        assert d.dtype == np.dtype(kind) and list(d.shape) == e["shape"], (name, d)
        assert ("dtype" in d.attrs) == (kind == "<u2"), (name, dict(d.attrs))
        b, g = e["data_offsets"]
        raw = np.frombuffer(data[8 + n + b:8 + n + g], dtype=kind).reshape(e["shape"])
        assert np.array_equal(d[...].view(kind), raw), name
EOF
else
  echo "note: h5py is not installed; the HDF5 files were not read back with it"
fi

# ---- bad checkpoints --------------------------------------------------------------------------

# Each bad file is the good one patched; the script prints "file<TAB>message" for each.
"$PY" - "$TMP" >"$TMP/cases" <<'EOF' || fail "could not make the bad checkpoints"
import json, struct, sys

tmp = sys.argv[1]
data = open(tmp + "/t.safetensors", "rb").read()
(n,) = struct.unpack("<Q", data[:8])
header = json.loads(data[8:8 + n])
body = data[8 + n:]


def emit(name, blob, message):
    path = "%s/%s" % (tmp, name)
    open(path, "wb").write(blob)
    print("%s\tcheckpoint '%s': %s" % (path, path, message))


def patched(edit):
    h = json.loads(json.dumps(header))
    edit(h)
    text = json.dumps(h, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + body, 8 + len(text)


lm = header["lm_head.weight"]["data_offsets"]
emit("truncated.safetensors", data[:-100],
     "tensor lm_head.weight data [%d, %d) ends beyond the file's %d bytes (truncated)"
     % (8 + n + lm[0], 8 + n + lm[1], len(data) - 100))
emit("long.safetensors", struct.pack("<Q", 10 ** 6) + data[8:],
     "header length 1000000 is beyond the file's %d bytes (truncated or not safetensors)"
     % len(data))
emit("overlap.safetensors",
     patched(lambda h: h["model.layers.0.self_attn.q_proj.weight"].update(
         data_offsets=[60000, 68192]))[0],
     "tensors model.embed_tokens.weight and model.layers.0.self_attn.q_proj.weight overlap in "
     "the file")
emit("missing.safetensors", patched(lambda h: h.pop("model.layers.0.mlp.up_proj.weight"))[0],
     "tensor model.layers.0.mlp.up_proj.weight is missing; is it a checkpoint of model tiny? "
     "refit checkpoint writes a complete one")
emit("shape.safetensors",
     patched(lambda h: h["model.layers.0.mlp.down_proj.weight"].update(shape=[128, 64]))[0],
     "tensor model.layers.0.mlp.down_proj.weight has shape [128, 64], the model needs [64, 128]")
emit("dtype.safetensors", open(tmp + "/f32.safetensors", "rb").read(),
     "tensor model.embed_tokens.weight is F32, the model needs BF16 (use --dtype fp32 or "
     "another checkpoint)")
print("%s/absent.safetensors\tcheckpoint '%s/absent.safetensors': no such file or directory"
      % (tmp, tmp))
EOF

[ "$(wc -l <"$TMP/cases")" -eq 7 ] || fail "expected 7 bad checkpoints, got: $(cat "$TMP/cases")"
# The cases come on fd 3: mpirun would read its way through stdin.
while IFS=$'\t' read -r -u 3 file message; do
  expect_error_mpi 2 "refit: error: $message" \
    "${MPIRUN[@]}" -np 4 "$REFIT" run --model tiny --trainer fsdp=2 --rollout tp=2 --iters 1 \
    --checkpoint "$file"
done 3<"$TMP/cases"

# ---- good checkpoints -------------------------------------------------------------------------

# Each format feeds a run whose weights then verify bit-exact in every mode, element by element
# against the file and by checksum against the file's. The checkpoint's seed (7) differs from
# the run's (1): the weights can only have come from the file.
expect_exit 0 "$REFIT" checkpoint --model tiny --checkpoint "$TMP/s7.safetensors" --seed 7
expect_exit 0 "$REFIT" checkpoint --model tiny --checkpoint "$TMP/s7" --seed 7 --shard-size 40000
expect_exit 0 "$REFIT" checkpoint --model tiny --checkpoint "$TMP/s7.h5" --seed 7 --format hdf5
for ck in s7.safetensors s7 s7.h5; do
  expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --model tiny --trainer fsdp=2 --rollout tp=2 \
    --iters 1 --seed 1 --mode unfused,grouped,fused --checkpoint "$TMP/$ck"
  expect_rows 3
done
expect_exit 0 "${MPIRUN[@]}" -np 6 "$REFIT" run --model tiny --trainer fsdp=2,tp=2 --rollout tp=2 \
  --iters 1 --plan star --mode fused --trainer-order jax --checkpoint "$TMP/s7.h5"
expect_rows 1
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --model tiny --trainer fsdp=2 --rollout tp=2 \
  --iters 1 --dtype fp16 --checkpoint "$TMP/f16.h5"
expect_rows 1
finish
