# refit verify between fp8 runs of the same weights that reached fp8 two ways: quantized in
# flight from bf16 (A) and read from a block-FP8 checkpoint (B). Their rollout checksums agree;
# B's trainer records the checksum of the fp8 shards it holds, which meets the checkpoint's and
# B's rollout's but not A's bf16 trainer checksum, so a verdict compares what both sides define
# and says so. Also: files whose linear weights mix F8_E4M3 and BF16, and verify's advice on
# inputs it cannot use (none names an option verify does not have).
. "$(dirname "$0")/lib.sh"
small="$REFIT_SOURCE_DIR/tests/data/fp8-small.json"
job=(--model "$small" --trainer fsdp=2 --rollout tp=2 --rollout-dtype fp8 --iters 1 --mode grouped)
q=model.layers.0.self_attn.q_proj.weight k=model.layers.0.self_attn.k_proj.weight

expect_exit 0 timeout 60 "${MPIRUN[@]}" -np 4 "$REFIT" run "${job[@]}" --output "$TMP/a.h5"
expect_exit 0 timeout 30 "$REFIT" checkpoint --model "$small" --dtype fp8 --checkpoint "$TMP/f8.safetensors"
expect_exit 0 timeout 60 "${MPIRUN[@]}" -np 4 "$REFIT" run "${job[@]}" --checkpoint "$TMP/f8.safetensors" --output "$TMP/b.h5"
expect_grep "# PASS" "$TMP/out"

# A against B and B against A: the 12 rollout checksums and the 5 bf16 tensors' trainer
# checksums agree; the 7 fp8 weights' trainer checksums are of other terms and not compared.
other="not compared: 7 trainer checksums of tensors the two runs' trainers held in different dtypes (one read a block-FP8 checkpoint, one quantized in flight)"
for pair in "a b" "b a"; do
  set -- $pair
  expect_exit 0 timeout 30 "$REFIT" verify "$TMP/$1.h5" --reference "$TMP/$2.h5"
  expect_grep "# compared 12 rollout and 5 trainer checksums; $other" "$TMP/out"
  expect_grep "# $TMP/$1.h5 run 0000 against $TMP/$2.h5: 0 of 12 tensors differ" "$TMP/out"
  expect_grep "# PASS" "$TMP/out"
done
# Each against the block-FP8 checkpoint: B's trainer checksums meet the file's too, A's fp8
# weights were quantized in flight from bf16.
expect_exit 0 timeout 30 "$REFIT" verify "$TMP/b.h5" --checkpoint "$TMP/f8.safetensors"
[ "$(grep -c . "$TMP/out")" -eq 3 ] || fail "verify B --checkpoint: $(cat "$TMP/out")"
expect_grep "# compared 12 rollout and 12 trainer checksums" "$TMP/out"
expect_exit 0 timeout 30 "$REFIT" verify "$TMP/a.h5" --checkpoint "$TMP/f8.safetensors"
expect_grep "# compared 12 rollout and 5 trainer checksums; not compared: 7 trainer checksums of tensors the checkpoint holds in fp8 and the run's trainer quantized in flight" "$TMP/out"

# Copies of B: its fp8 trainer checksums as files written before they were recorded (0), one
# trainer checksum changed, one rollout checksum changed.
/usr/bin/python3 - "$TMP/b.h5" "$TMP" <<'PYEOF' || fail "could not make the copies of b.h5"
import shutil, sys
import h5py
import numpy as np
src, tmp = sys.argv[1], sys.argv[2]
for name in ("old", "trainer", "rollout"):
    shutil.copy(src, f"{tmp}/{name}.h5")
    with h5py.File(f"{tmp}/{name}.h5", "r+") as f:
        t = f["runs/0000/tensors"]
        rows = t[...]
        fp8 = [i for i in range(len(rows)) if rows["dtype"][i].startswith(b"fp8")]
        assert len(fp8) == 7, fp8
        if name == "old":
            for i in fp8:
                rows["trainer_checksum"][i] = 0
        elif name == "trainer":
            rows["trainer_checksum"][fp8[0]] ^= np.uint64(1)
        else:
            rows["rollout_checksum"][fp8[0]][0] ^= np.uint64(1)
        t[...] = rows
PYEOF
expect_exit 0 timeout 30 "$REFIT" verify "$TMP/b.h5" --reference "$TMP/old.h5"
expect_grep "# compared 12 rollout and 5 trainer checksums; not compared: 7 trainer checksums of fp8 tensors that one of the runs did not record (written before refit recorded them)" "$TMP/out"
expect_grep "# PASS" "$TMP/out"
expect_exit 0 timeout 30 "$REFIT" verify "$TMP/old.h5" --checkpoint "$TMP/f8.safetensors"
expect_grep "# compared 12 rollout and 5 trainer checksums; not compared: 7 trainer checksums of fp8 tensors that the run did not record (written before refit recorded them)" "$TMP/out"
# A changed fp8 trainer checksum fails against B and the checkpoint, not against A (whose
# trainer held bf16); a changed rollout checksum fails against all three.
expect_exit 1 timeout 30 "$REFIT" verify "$TMP/trainer.h5" --reference "$TMP/b.h5"
expect_grep "differs: $q  trainer " "$TMP/out"
expect_grep "# FAIL: 1 tensors differ" "$TMP/out"
expect_exit 1 timeout 30 "$REFIT" verify "$TMP/trainer.h5" --checkpoint "$TMP/f8.safetensors"
expect_grep "# FAIL: 1 tensors differ" "$TMP/out"
expect_exit 0 timeout 30 "$REFIT" verify "$TMP/trainer.h5" --reference "$TMP/a.h5"
for against in "--reference $TMP/a.h5" "--reference $TMP/b.h5" "--checkpoint $TMP/f8.safetensors"; do
  expect_exit 1 timeout 30 "$REFIT" verify "$TMP/rollout.h5" $against
  expect_grep "# FAIL: 1 tensors differ" "$TMP/out"
done

# A block-FP8 checkpoint given to verify a model-dtype run: the advice is verify's.
expect_exit 0 timeout 30 "$REFIT" run --model "$small" --trainer fsdp=1 --rollout tp=1 --placement colocated \
  --iters 1 --mode grouped --output "$TMP/bf16.h5"
expect_error 2 "refit: error: checkpoint '$TMP/f8.safetensors': tensor $q is F8_E4M3 (a block-FP8 checkpoint), which only the rollout of an fp8 run (refit run --rollout-dtype fp8) can meet; verify such a run against it, or this run against a BF16 checkpoint" \
  timeout 30 "$REFIT" verify "$TMP/bf16.h5" --checkpoint "$TMP/f8.safetensors"
# Two model-dtype runs in different dtypes: their trainer checksums are of other values, not
# compared, and every rollout checksum differs.
expect_exit 0 timeout 30 "$REFIT" run --model "$small" --dtype fp32 --trainer fsdp=1 --rollout tp=1 --placement colocated \
  --iters 1 --mode grouped --output "$TMP/fp32.h5"
expect_exit 1 timeout 30 "$REFIT" verify "$TMP/bf16.h5" --reference "$TMP/fp32.h5"
expect_grep "# compared 12 rollout and 0 trainer checksums; not compared: 12 trainer checksums of tensors the two runs' trainers held in different dtypes" "$TMP/out"
grep -q "quantized in flight" "$TMP/out" && fail "bf16 against fp32 was told of fp8: $(cat "$TMP/out")"
expect_grep "# FAIL: 12 tensors differ" "$TMP/out"
expect_exit 0 timeout 30 "$REFIT" checkpoint --model "$small" --dtype fp32 --checkpoint "$TMP/f32.safetensors"
expect_error 2 "refit: error: checkpoint '$TMP/f32.safetensors': tensor model.embed_tokens.weight is F32, but the run's trainer held it in BF16; verify the run against a checkpoint of its weights in that dtype" \
  timeout 30 "$REFIT" verify "$TMP/bf16.h5" --checkpoint "$TMP/f32.safetensors"

# Files whose linear weights mix F8_E4M3 and BF16, made from the bf16 and the fp8 checkpoint of
# the same weights: q_proj BF16 and the rest block-FP8, and q_proj block-FP8 and k_proj BF16.
# Each is refused in one line naming the tensor that differs from the first linear weight,
# by refit run --rollout-dtype fp8 (which once advised adding --rollout-dtype fp8) and by verify.
expect_exit 0 timeout 30 "$REFIT" checkpoint --model "$small" --checkpoint "$TMP/bf.safetensors"
/usr/bin/python3 - "$TMP" "$q" "$k" <<'PYEOF' || fail "could not make the mixed checkpoints"
import json, struct, sys
tmp, q, k = sys.argv[1:]
def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    meta = head.pop("__metadata__", None)
    data = raw[8 + n:]
    return {name: (e, data[e["data_offsets"][0]:e["data_offsets"][1]]) for name, e in head.items()}
bf, f8 = load(f"{tmp}/bf.safetensors"), load(f"{tmp}/f8.safetensors")
def write(path, bf16):
    head, data = {}, b""
    for name, (e, b) in f8.items():
        base = name[:-len("_scale_inv")] if name.endswith("_scale_inv") else name
        if base == bf16:
            if name != base:
                continue
            e, b = bf[name]
        head[name] = {"dtype": e["dtype"], "shape": e["shape"], "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    text = json.dumps(head).encode()
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + data)
write(f"{tmp}/mixed-q.safetensors", q)
write(f"{tmp}/mixed-k.safetensors", k)
# q_proj's scales as F8_E4M3, a byte each
head, data = {}, b""
for name, (e, b) in f8.items():
    dtype = e["dtype"]
    if name == q + "_scale_inv":
        dtype, b = "F8_E4M3", b[: len(b) // 4]
    head[name] = {"dtype": dtype, "shape": e["shape"], "data_offsets": [len(data), len(data) + len(b)]}
    data += b
text = json.dumps(head).encode()
open(f"{tmp}/scale-f8.safetensors", "wb").write(struct.pack("<Q", len(text)) + text + data)
PYEOF
mixed_q="refit: error: checkpoint '$TMP/mixed-q.safetensors': tensor $k is F8_E4M3 but the first linear weight $q is BF16; a checkpoint holds every linear weight as F8_E4M3 (block-FP8) or none, so use a checkpoint of one kind"
mixed_k="refit: error: checkpoint '$TMP/mixed-k.safetensors': tensor $k is BF16 but the first linear weight $q is F8_E4M3; a checkpoint holds every linear weight as F8_E4M3 (block-FP8) or none, so use a checkpoint of one kind"
one=(--model "$small" --trainer fsdp=1 --rollout tp=1 --rollout-dtype fp8 --iters 1)
expect_error_mpi 2 "$mixed_q" timeout 60 "${MPIRUN[@]}" -np 2 "$REFIT" run "${one[@]}" --checkpoint "$TMP/mixed-q.safetensors" --output "$TMP/mixed.h5"
expect_error_mpi 2 "$mixed_k" timeout 60 "${MPIRUN[@]}" -np 2 "$REFIT" run "${one[@]}" --checkpoint "$TMP/mixed-k.safetensors" --output "$TMP/mixed.h5"
[ -e "$TMP/mixed.h5" ] && fail "a run from a mixed checkpoint created its results file"
# A scale tensor in F8_E4M3: named as the scales it is (not "add --rollout-dtype fp8", given).
expect_error_mpi 2 "refit: error: checkpoint '$TMP/scale-f8.safetensors': tensor ${q}_scale_inv is F8_E4M3, but a block-FP8 checkpoint holds the scales of $q as F32, one per 128x128 block; give a complete block-FP8 checkpoint (refit checkpoint --dtype fp8 writes one)" \
  timeout 60 "${MPIRUN[@]}" -np 2 "$REFIT" run "${one[@]}" --checkpoint "$TMP/scale-f8.safetensors" --output "$TMP/mixed.h5"
expect_error 2 "$mixed_q" timeout 30 "$REFIT" verify "$TMP/bf16.h5" --checkpoint "$TMP/mixed-q.safetensors"
expect_error 2 "$mixed_k" timeout 30 "$REFIT" verify "$TMP/a.h5" --checkpoint "$TMP/mixed-k.safetensors"

# Results files verify cannot read: its advice is to give one a run wrote, not another --output.
printf 'not hdf5\n' >"$TMP/text.h5"
want="give a results file written by 'refit run --output'"
expect_error 2 "refit: error: results file '$TMP/text.h5' is not an HDF5 file or is damaged; $want" \
  timeout 30 "$REFIT" verify "$TMP/text.h5" --reference "$TMP/a.h5"
expect_exit 0 timeout 30 "$REFIT" checkpoint --model "$small" --format hdf5 --checkpoint "$TMP/ck.h5"
expect_error 2 "refit: error: results file '$TMP/ck.h5' is an HDF5 file but not refit's results; $want" \
  timeout 30 "$REFIT" verify "$TMP/a.h5" --reference "$TMP/ck.h5"
finish
