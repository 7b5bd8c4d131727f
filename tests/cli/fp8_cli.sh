# --rollout-dtype fp8 through the command line: refit plan's fp8 lines (text and JSON, wire
# bytes and where quantization happens, the manifest's scales), the block-cut error, refit run
# moving fp8 in host memory over mpi (p2p, star and fanout, every mode, a dense and an MoE
# model, quantized at the source and at the destination, verified in full) and refusing the
# transports and memory it cannot use yet before anything is created (alone, under mpirun, and
# as a sweep's skipped combination), refit verify between fp8 runs, and refit simulate moving
# the wire bytes. The figures are derived in
# tests/test_layout_fp8.c and tests/test_plan_fp8.c.
. "$(dirname "$0")/lib.sh"
job=(--model llama-3.1-8b --trainer fsdp=4,tp=2 --rollout tp=4 --rollout-dtype fp8)

# Llama-3.1-8B to tp=4: a rollout rank holds per layer 54525952 fp8 bytes and 13312 bytes of
# scales, the embeddings and lm_head (32064 x 4096 bf16 each) and 65 norms: 2271125504 bytes,
# all of them quantized by the trainer ranks, whose shards are whole blocks.
expect_exit 0 "$REFIT" plan "${job[@]}"
expect_grep "tensors          291 logical, 323 per rollout rank (fused)" "$TMP/out"
expect_grep "rollout dtype    fp8: linear weights float8_e4m3fn, an fp32 weight_scale_inv per 128x128 block" "$TMP/out"
expect_grep "transfer bytes   16062119936 (14.96 GiB)" "$TMP/out"
expect_grep "wire bytes       9084502016 (8.46 GiB) of the transfer bytes, fp8 and scales where the source quantizes" "$TMP/out"
expect_grep "quantized        224 fp8 tensors at their source, 0 at their destination (a piece cuts a block)" "$TMP/out"
expect_grep "wire recv        min 2271125504 (2.12 GiB)  max 2271125504 (2.12 GiB)  per rollout rank" "$TMP/out"
expect_grep "quantize send    min 224  max 224  fp8 tensors per trainer rank" "$TMP/out"
expect_grep "quantize recv    min 0  max 0  fp8 tensors per rollout rank" "$TMP/out"
# Without fp8 the same plan prints none of these lines.
expect_exit 0 "$REFIT" plan --model llama-3.1-8b --trainer fsdp=4,tp=2 --rollout tp=4
grep -q "wire\|rollout dtype\|quantize" "$TMP/out" && fail "a plan without fp8 prints fp8 lines"

# fsdp2 over 64 ranks cuts every tensor's rows into 64: every block is cut at the source, the
# wire carries bf16 and each rollout rank quantizes all 224 tensors.
expect_exit 0 "$REFIT" plan --model llama-3.1-8b --trainer fsdp=64 --trainer-style fsdp2 --rollout tp=4 --rollout-dtype fp8 --plan p2p
expect_grep "wire bytes       16062119936 (14.96 GiB) of the transfer bytes" "$TMP/out"
expect_grep "quantized        0 fp8 tensors at their source, 224 at their destination" "$TMP/out"
expect_grep "quantize recv    min 224  max 224  fp8 tensors per rollout rank" "$TMP/out"

expect_exit 0 "$REFIT" plan "${job[@]}" --json
"${PY:-python3}" - "$TMP/out" <<'PYEOF' || fail "fp8 plan JSON: $(head -c 1500 "$TMP/out")"
import json, sys
o = json.load(open(sys.argv[1]))
assert o["rollout_dtype"] == "fp8" and o["wire_transfer_bytes"] == 9084502016, o
assert o["wire_recv_bytes"] == [2271125504] * 4 and sum(o["wire_send_bytes"]) == 9084502016
assert o["source_quantized_tensors"] == 224 and o["destination_quantized_tensors"] == 0
assert o["source_quantized"] == [224] * 8 and o["destination_quantized"] == [0] * 4
m = {e["name"]: e for e in o["rollout_manifest"]}
assert len(m) == 323
q = m["model.layers.0.self_attn.qkv_proj.weight"]
assert q["shape"] == [1536, 4096] and q["dtype"] == "fp8_e4m3fn" and q["bytes"] == 6291456, q
s = m["model.layers.0.self_attn.qkv_proj.weight_scale_inv"]
assert s["shape"] == [12, 32] and s["dtype"] == "fp32" and s["bytes"] == 1536, s
assert m["model.layers.0.mlp.down_proj.weight_scale_inv"]["shape"] == [32, 28]
assert m["lm_head.weight"]["dtype"] == "bf16"
assert sum(e["bytes"] for e in o["rollout_manifest"]) == 2271125504
PYEOF
# DeepSeek-V3 with rollout ep: vLLM's stacked expert scales.
expect_exit 0 "$REFIT" plan --model deepseek-v3 --trainer fsdp=8 --rollout tp=8,ep --rollout-dtype fp8 --json
"${PY:-python3}" - "$TMP/out" <<'PYEOF' || fail "deepseek fp8 manifest: $(head -c 600 "$TMP/out")"
import json, sys
m = {e["name"]: e for e in json.load(open(sys.argv[1]))["rollout_manifest"]}
w13 = m["model.layers.3.mlp.experts.w13_weight_scale_inv"]
assert w13["shape"] == [32, 32, 56] and w13["bytes"] == 229376, w13
assert m["model.layers.3.mlp.experts.w2_weight_scale_inv"]["shape"] == [32, 56, 16]
assert m["model.layers.3.self_attn.fused_qkv_a_proj.weight_scale_inv"]["shape"] == [17, 56]
assert m["model.layers.3.mlp.gate.weight"]["dtype"] == "bf16"
assert m["model.layers.3.mlp.gate.e_score_correction_bias"]["dtype"] == "fp32"
PYEOF

# A rollout shard that cuts a block: one line naming the tensor and the tps that fit, exit 2.
expect_error 2 "refit: error: --rollout-dtype fp8: tensor 'model.layers.0.mlp.gate_proj.weight' [14336, 4096] is cut inside a 128x128 block by rollout tp=32; use tp=1, 2, 4, 8 or 16" \
  "$REFIT" plan --model llama-3.1-8b --trainer fsdp=1 --rollout tp=32 --rollout-dtype fp8
expect_error 2 "refit: error: option --rollout-dtype: 'fp4' is not one of model|fp8|fp8-ue8m0|mxfp8|mxfp8-floor|mxfp4|mxfp4-floor|nvfp4" \
  "$REFIT" plan --model llama-3.1-8b --rollout-dtype fp4

# refit run moves fp8 in host memory over mpi and shm, in GPU memory over ipc and nccl
# (engine_fp8.c; gpu_run checks those). GPU memory staged through mpi is refused before MPI or
# any file: alone, under mpirun printed once, and as a sweep's skipped combination.
not_moved="refit: error: --rollout-dtype fp8 with --memory device needs a transport that keeps the bytes on the GPU: use --transport ipc or nccl, or --memory host with mpi"
expect_error 2 "$not_moved" "$REFIT" run --model tiny --rollout-dtype fp8 --transport mpi --memory device --output "$TMP/run.h5"
[ -e "$TMP/run.h5" ] && fail "refit run --rollout-dtype fp8 --memory device created its results file"
expect_error_mpi 2 "$not_moved" "${MPIRUN[@]}" -np 4 "$REFIT" run --model tiny --rollout-dtype fp8 --transport mpi --memory device --output "$TMP/run.h5"
[ -e "$TMP/run.h5" ] && fail "refit run --rollout-dtype fp8 under mpirun created its results file"
expect_exit 0 "$REFIT" run --model tiny --rollout-dtype model,fp8 --transport mpi --memory device --dry-run
expect_grep "skip 2/2: rollout_dtype=fp8: ${not_moved#refit: error: }" "$TMP/out"
small="$REFIT_SOURCE_DIR/tests/data/fp8-small.json"
# Fanout: the trainer sends every element once, to replica 0, which forwards fp8 and scales.
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --model "$small" --trainer fsdp=2 --rollout tp=1,dp=2 --plan fanout \
  --rollout-dtype fp8 --mode unfused,grouped,fused --iters 2 --verify full --output "$TMP/fp8-fanout.h5"
expect_grep "# PASS" "$TMP/out"
[ "$(grep -c "  full            0        ok" "$TMP/out")" -eq 3 ] || fail "fp8 fanout: not three verified rows: $(cat "$TMP/out")"

# A real fp8 refit: fp8-small (every tensor whole blocks) from fsdp=2 to tp=2, p2p and star,
# every mode, --verify full. The trainer's shards hold whole blocks: 7 tensors are quantized at
# the source, and the wire carries 1182880 of p2p's 1838080 bytes and 1707168 of star's
# (refit plan's figures; star's transfer moves whole coupling buffers).
for plan in p2p:1182880 star:1707168; do
  wire=${plan#*:} plan=${plan%:*}
  expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --model "$small" --trainer fsdp=2 --rollout tp=2 \
    --rollout-dtype fp8 --plan $plan --mode unfused,grouped,fused --iters 2 --verify full --output "$TMP/fp8-$plan.h5"
  expect_grep "rollout tp=2 (fp8, block-quantized; wire $wire bytes, 7 tensors quantized at the source, 0 at the destination)" "$TMP/out"
  expect_grep "# PASS" "$TMP/out"
  [ "$(grep -c "  full            0        ok" "$TMP/out")" -eq 3 ] || fail "fp8 $plan: not three verified rows: $(cat "$TMP/out")"
done
# JAX order stores the shards transposed; the quantizer reads them that way, so the pieces are
# quantized at their sources as in HF order, with the same wire bytes.
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --model "$small" --trainer fsdp=2 --trainer-order jax --rollout tp=2 \
  --rollout-dtype fp8 --mode unfused,grouped,fused --iters 2 --verify full --output "$TMP/fp8-jax.h5"
expect_grep "(fp8, block-quantized; wire 1182880 bytes, 7 tensors quantized at the source, 0 at the destination)" "$TMP/out"
expect_grep "# PASS" "$TMP/out"
# Over shm the rollout rank reads its sources' memory and quantizes (JAX order pulls too).
for order in hf jax; do
  expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --model "$small" --trainer fsdp=2 --trainer-order $order --rollout tp=2 \
    --rollout-dtype fp8 --transport shm --mode unfused,grouped,fused --iters 2 --verify full --output "$TMP/fp8-shm-$order.h5"
  expect_grep "# PASS" "$TMP/out"
  [ "$(grep -c "  full            0        ok" "$TMP/out")" -eq 3 ] || fail "fp8 shm $order: not three verified rows: $(cat "$TMP/out")"
done
# A small Mixtral-style MoE (whole blocks per expert) from trainer ep and pp: to rollout ep
# with p2p, and to plain tp with star (a star cannot feed rollout ep).
moe="$REFIT_SOURCE_DIR/tests/data/fp8-moe.json"
for rollout in "tp=2,ep p2p" "tp=2 star"; do
  expect_exit 0 "${MPIRUN[@]}" -np 6 "$REFIT" run --model "$moe" --trainer fsdp=1,ep=2,pp=2 --rollout ${rollout% *} \
    --rollout-dtype fp8 --plan ${rollout#* } --mode unfused,grouped,fused --iters 2 --verify full --output "$TMP/fp8-moe.h5"
  expect_grep "# PASS" "$TMP/out"
  [ "$(grep -c "  full            0        ok" "$TMP/out")" -eq 3 ] || fail "fp8 moe $rollout: not three verified rows: $(cat "$TMP/out")"
done

# The tensors table's verdicts: an fp8 tensor has no trainer checksum to meet, so with one
# replica its checksum was compared with nothing (-1, its bytes checked by --verify full), and
# fanout's two replicas meet each other (1); the 5 bf16 tensors meet the trainer's (1). The
# h5py checker takes the file as a whole.
/usr/bin/python3 - "$TMP/fp8-p2p.h5" "$TMP/fp8-fanout.h5" <<'PYEOF' || fail "fp8 verdicts in the results file"
import sys
import h5py
for path, want in zip(sys.argv[1:], [{-1: 7, 1: 5}, {1: 12}]):
    with h5py.File(path, "r") as f:
        for run in f["runs"]:
            ok = list(f["runs"][run]["tensors"]["ok"])
            got = {v: ok.count(v) for v in set(ok)}
            assert got == want, (path, run, got, want)
PYEOF
/usr/bin/python3 "$REFIT_SOURCE_DIR/tests/cli/results_h5py.py" "$TMP/fp8-p2p.h5" --runs 3 --ok \
  >"$TMP/py" || fail "results_h5py fp8: $(cat "$TMP/py")"
# The runs' checksums are of fp8 bytes and scales: the same under p2p, star and JAX order, and
# refit verify compares fp8 runs with fp8 runs only.
expect_exit 0 "$REFIT" verify "$TMP/fp8-p2p.h5" --reference "$TMP/fp8-star.h5"
expect_grep "# PASS" "$TMP/out"
expect_exit 0 "$REFIT" verify "$TMP/fp8-jax.h5" --reference "$TMP/fp8-p2p.h5"
expect_grep "# PASS" "$TMP/out"
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --model "$small" --trainer fsdp=2 --rollout tp=2 --iters 1 --output "$TMP/bf16.h5"
expect_error 2 "refit: error: run 0002 of '$TMP/fp8-p2p.h5' moved fp8 rollouts but the reference run 0000 of '$TMP/bf16.h5' moved model-dtype; compare runs of one rollout dtype" \
  "$REFIT" verify "$TMP/fp8-p2p.h5" --reference "$TMP/bf16.h5"

# A block-FP8 checkpoint (DeepSeek-V3's layout) of the same synthetic weights: refit verify
# compares the fp8 run's rollout checksums with its fp8 bytes and scales.
expect_exit 0 "$REFIT" checkpoint --model "$small" --dtype fp8 --checkpoint "$TMP/small-fp8.safetensors"
expect_grep "wrote $TMP/small-fp8.safetensors: fp8-small, 12 tensors, 1181344 bytes, safetensors, fp8 (linear weights float8_e4m3fn, an fp32 weight_scale_inv per 128x128 block)" "$TMP/out"
expect_exit 0 "$REFIT" verify "$TMP/fp8-p2p.h5" --checkpoint "$TMP/small-fp8.safetensors"
expect_grep "run 0002 against $TMP/small-fp8.safetensors: 0 of 12 tensors differ" "$TMP/out"
expect_exit 0 "$REFIT" checkpoint --model "$small" --dtype fp8 --seed 2 --checkpoint "$TMP/seed2-fp8.safetensors"
expect_exit 1 "$REFIT" verify "$TMP/fp8-p2p.h5" --checkpoint "$TMP/seed2-fp8.safetensors"
expect_grep "# FAIL: 12 tensors differ" "$TMP/out"
expect_exit 0 "$REFIT" checkpoint --model "$small" --checkpoint "$TMP/small.safetensors"
expect_error 2 "refit: error: checkpoint '$TMP/small.safetensors': tensor model.layers.0.self_attn.q_proj.weight is BF16, but a block-FP8 checkpoint holds it as F8_E4M3 with its weight_scale_inv; compare an fp8 run with a block-FP8 checkpoint (refit checkpoint --dtype fp8 writes one)" \
  "$REFIT" verify "$TMP/fp8-p2p.h5" --checkpoint "$TMP/small.safetensors"
expect_error 2 "refit: error: option --dtype fp8 writes a quantized checkpoint (refit checkpoint); the trainer's weights are model, bf16, fp16 or fp32: use --rollout-dtype fp8 to move fp8 rollouts" \
  "$REFIT" plan --model "$small" --dtype fp8
# Weights read from a checkpoint (seed 7): --verify full quantizes the file's rows for its
# reference, and the run agrees with the block-FP8 checkpoint of the same weights only.
expect_exit 0 "$REFIT" checkpoint --model "$small" --seed 7 --checkpoint "$TMP/seed7.safetensors"
expect_exit 0 "$REFIT" checkpoint --model "$small" --dtype fp8 --seed 7 --checkpoint "$TMP/seed7-fp8.safetensors"
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --model "$small" --trainer fsdp=2 --rollout tp=2 --rollout-dtype fp8 \
  --checkpoint "$TMP/seed7.safetensors" --mode grouped --iters 1 --verify full --output "$TMP/seed7.h5"
expect_grep "# PASS" "$TMP/out"
expect_exit 0 "$REFIT" verify "$TMP/seed7.h5" --checkpoint "$TMP/seed7-fp8.safetensors"
expect_exit 1 "$REFIT" verify "$TMP/seed7.h5" --checkpoint "$TMP/small-fp8.safetensors"
# A block-FP8 checkpoint as the trainer's weights: each trainer rank reads its rows of the fp8
# weights and the scales of the blocks they touch, and both move as they are. fp8-cut's 64-row
# heads make fsdp=4 shards that cut blocks, so two shards send a cut block's scale each
# (1183040 wire bytes against 1181344 in the file); every mode, HF and JAX order, mpi and shm,
# fanout and colocated, every byte and scale checked against the file's, and the rollout's
# checksums against the file's fp8 checksums.
cut="$REFIT_SOURCE_DIR/tests/data/fp8-cut.json"
expect_exit 0 "$REFIT" checkpoint --model "$cut" --dtype fp8 --seed 5 --checkpoint "$TMP/cut-fp8.safetensors"
for run in "hf mpi" "jax mpi" "hf shm" "jax shm"; do
  expect_exit 0 "${MPIRUN[@]}" -np 6 "$REFIT" run --model "$cut" --trainer fsdp=4 --trainer-order ${run% *} \
    --rollout tp=2 --rollout-dtype fp8 --checkpoint "$TMP/cut-fp8.safetensors" --transport ${run#* } \
    --mode unfused,grouped,fused --bucket-size 64KiB --iters 2 --verify full --output "$TMP/cut-in.h5"
  expect_grep "rollout tp=2 (fp8 from the fp8 checkpoint; wire 1183040 bytes, quantized bytes and scales as the trainer holds them)" "$TMP/out"
  expect_grep "# PASS" "$TMP/out"
  [ "$(grep -c "  full            0        ok" "$TMP/out")" -eq 3 ] || fail "fp8 checkpoint input $run: not three verified rows: $(cat "$TMP/out")"
done
expect_exit 0 "${MPIRUN[@]}" -np 6 "$REFIT" run --model "$cut" --trainer fsdp=4 --rollout tp=1,dp=2 --plan fanout \
  --rollout-dtype fp8 --checkpoint "$TMP/cut-fp8.safetensors" --mode grouped,fused --verify full --output "$TMP/cut-in.h5"
[ "$(grep -c "  full            0        ok" "$TMP/out")" -eq 2 ] || fail "fp8 checkpoint input, fanout: $(cat "$TMP/out")"
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --model "$cut" --trainer fsdp=4 --rollout tp=2 --placement colocated \
  --rollout-dtype fp8 --checkpoint "$TMP/cut-fp8.safetensors" --mode grouped,fused --verify full --output "$TMP/cut-in.h5"
[ "$(grep -c "  full            0        ok" "$TMP/out")" -eq 2 ] || fail "fp8 checkpoint input, colocated: $(cat "$TMP/out")"
expect_exit 0 "$REFIT" verify "$TMP/cut-in.h5" --checkpoint "$TMP/cut-fp8.safetensors"
expect_grep "against $TMP/cut-fp8.safetensors: 0 of 12 tensors differ" "$TMP/out"
# Each of those 16 runs met the block-FP8 file's checksums: every tensor's verdict is 1.
/usr/bin/python3 - "$TMP/cut-in.h5" <<'PYEOF' || fail "fp8 checkpoint input: verdicts in the results file"
import sys
import h5py
with h5py.File(sys.argv[1], "r") as f:
    assert len(f["runs"]) == 16, list(f["runs"])
    for run in f["runs"]:
        assert list(f["runs"][run]["tensors"]["ok"]) == [1] * 12, run
PYEOF
expect_exit 0 "$REFIT" checkpoint --model "$cut" --dtype fp8 --seed 6 --checkpoint "$TMP/cut-fp8-6.safetensors"
expect_exit 1 "$REFIT" verify "$TMP/cut-in.h5" --checkpoint "$TMP/cut-fp8-6.safetensors"
expect_grep "# FAIL: 12 tensors differ" "$TMP/out"
# What cannot move it, in one line each: star (its reshape has no scales), a bf16 rollout, and
# a truncated file, which is described as the block-FP8 file it is.
expect_error 2 "refit: error: --plan star cannot move the fp8 checkpoint '$TMP/cut-fp8.safetensors': its reshape would move the quantized bytes without their scales; use --plan p2p or fanout" \
  "$REFIT" run --model "$cut" --trainer fsdp=1 --rollout tp=1 --rollout-dtype fp8 --plan star --checkpoint "$TMP/cut-fp8.safetensors"
expect_error_mpi 2 "refit: error: checkpoint '$TMP/cut-fp8.safetensors': tensor model.layers.0.self_attn.q_proj.weight is F8_E4M3 (a block-FP8 checkpoint), which refit reads as trainer weights for fp8 rollouts only: add --rollout-dtype fp8, or use a BF16 checkpoint" \
  "${MPIRUN[@]}" -np 2 "$REFIT" run --model "$cut" --trainer fsdp=1 --rollout tp=1 --checkpoint "$TMP/cut-fp8.safetensors"
cp "$TMP/cut-fp8.safetensors" "$TMP/cut-short.safetensors"
truncate -s 1000000 "$TMP/cut-short.safetensors"
expect_error_mpi 2 "refit: error: checkpoint '$TMP/cut-short.safetensors': tensor lm_head.weight data [921296, 1183440) ends beyond the file's 1000000 bytes (truncated)" \
  "${MPIRUN[@]}" -np 2 "$REFIT" run --model "$cut" --trainer fsdp=1 --rollout tp=1 --rollout-dtype fp8 --checkpoint "$TMP/cut-short.safetensors" --output "$TMP/short.h5"
[ -e "$TMP/short.h5" ] && fail "a run from a truncated fp8 checkpoint created its results file"

# The fp8 file against an independent quantizer: numpy re-quantizes the bf16 checkpoint of the
# same weights by DeepGEMM's per_block_cast_to_fp8 (fp32 steps, e4m3 nearest-even by its own
# code) and every fp8 byte and scale must match; and the header is DeepSeek-V3's layout.
PY=/usr/bin/python3
"$PY" -c "import numpy" || fail "numpy is missing for $PY (make deps installs python3-numpy)"
"$PY" - "$TMP/small.safetensors" "$TMP/small-fp8.safetensors" <<'PYEOF' || fail "the fp8 checkpoint is not the numpy quantization of the bf16 one"
import json, struct, sys
import numpy as np

def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    head.pop("__metadata__", None)
    return head, raw[8 + n:]

def tensor(head, data, name, dt):
    e = head[name]
    a, b = e["data_offsets"]
    return np.frombuffer(data[a:b], dtype=dt).reshape(e["shape"])

def e4m3(x):  # float32 -> float8_e4m3fn codes, nearest even, saturating at 448
    a = np.abs(x).astype(np.float64)  # exact: every float32 is a float64
    sign = np.where(np.signbit(x), 0x80, 0).astype(np.uint8)
    _, e = np.frexp(a)  # a = m * 2^e, 0.5 <= m < 1: e - 1 is the binary exponent
    e = e - 1
    normal = e >= -6
    q_n = np.rint(a / np.exp2(e - 3))  # 8..16 steps, half to even
    code_n = (e + 6) * 8 + q_n
    code_s = np.rint(a / 2.0 ** -9)
    code = np.where(normal, code_n, code_s)
    code = np.where(a >= 448, 0x7E, code)
    code = np.where(a == 0, 0, code)
    return sign | code.astype(np.uint8)

bf_head, bf = load(sys.argv[1])
f8_head, f8 = load(sys.argv[2])
names = [k for k in f8_head if not k.endswith("_scale_inv")]
assert len(names) == 12 and list(bf_head) == names, (list(bf_head), names)
checked = 0
for name in names:
    e = f8_head[name]
    if e["dtype"] != "F8_E4M3":
        assert e["dtype"] == bf_head[name]["dtype"] and name + "_scale_inv" not in f8_head, name
        a, b = e["data_offsets"]
        c, d = bf_head[name]["data_offsets"]
        assert f8[a:b] == bf[c:d], name
        continue
    x = (tensor(bf_head, bf, name, np.uint16).astype(np.uint32) << 16).view(np.float32)
    rows, cols = x.shape
    br, bc = -(-rows // 128), -(-cols // 128)
    s = f8_head[name + "_scale_inv"]
    assert s["dtype"] == "F32" and s["shape"] == [br, bc], s
    got_q = tensor(f8_head, f8, name, np.uint8)
    got_s = tensor(f8_head, f8, name + "_scale_inv", np.uint32)
    for i in range(br):
        for j in range(bc):
            blk = x[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128]
            amax = np.maximum(np.max(np.abs(blk)), np.float32(1e-4)).astype(np.float32)
            factor = (np.float32(1) / amax) * np.float32(448)
            q = e4m3((blk * factor).astype(np.float32))
            scale = (amax * (np.float32(1) / np.float32(448))).astype(np.float32)
            assert (q == got_q[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128]).all(), (name, i, j)
            assert scale.view(np.uint32) == got_s[i, j], (name, i, j)
            checked += 1
assert checked == 4 * 4 + 3 * 8, checked  # q, k, v, o: 2x2 blocks; gate, up, down: 8
print("numpy agrees on", checked, "blocks")
PYEOF
if command -v h5dump >/dev/null; then
  h5dump -a /runs/0000/rollout_dtype -a /runs/0000/plan/wire_transfer_bytes "$TMP/fp8-p2p.h5" >"$TMP/dump" 2>&1
  expect_grep '(0): "fp8"' "$TMP/dump"
  expect_grep "(0): 1182880" "$TMP/dump"
fi
expect_error 2 "refit: error: option --bucket-size: 8192 bytes is below the 16388 of one 128x128 fp8 block and its scale, which --rollout-dtype fp8 moves whole; use 16388 or more (or 0)" \
  "$REFIT" simulate --cluster h200-hgx --model llama-3.1-8b --rollout-dtype fp8 --bucket-size 8192

# refit simulate moves the wire bytes: tp=8 rollout ranks hold 1135828992 bytes each.
sim=(simulate --cluster h200-hgx --model llama-3.1-8b --trainer fsdp=8 --rollout tp=8 --mode grouped)
expect_exit 0 "$REFIT" "${sim[@]}" --rollout-dtype fp8
expect_grep "rollout dtype    fp8: 9086631936 transfer bytes on the wire (what the prediction moves), 224 fp8 tensors quantized at their source, 0 at their destination" "$TMP/out"
expect_grep "  bytes          process 0, gpu 0, nvlink 0, pcie 0, host 0, network 9086631936" "$TMP/out"
expect_exit 0 "$REFIT" "${sim[@]}"
expect_grep "  bytes          process 0, gpu 0, nvlink 0, pcie 0, host 0, network 16064249856" "$TMP/out"
expect_exit 0 "$REFIT" "${sim[@]}" --rollout-dtype fp8 --json --output "$TMP/sim.h5"
"${PY:-python3}" - "$TMP/out" <<'PYEOF' || fail "fp8 simulate JSON: $(head -c 1500 "$TMP/out")"
import json, sys
o = json.load(open(sys.argv[1]))
assert o["rollout_dtype"] == "fp8" and o["wire_transfer_bytes"] == 9086631936, o
assert o["source_quantized_tensors"] == 224 and o["destination_quantized_tensors"] == 0
PYEOF
# A rollout rank that quantizes on arrival holds a landing buffer in the trainer's dtype beside
# its fp8 tensors: fsdp=64 cuts every block, so at tp=4 each rank holds its 2271125504 fp8 bytes
# (the plan above) and the bf16 of its 32 x 54525952 linear weight elements, 3489660928 bytes.
expect_exit 0 "$REFIT" simulate --cluster h200-hgx --model llama-3.1-8b --trainer fsdp=64 --trainer-style fsdp2 \
  --rollout tp=4 --rollout-dtype fp8 --json
"${PY:-python3}" - "$TMP/out" <<'PYEOF' || fail "fp8 landing memory: $(head -c 1500 "$TMP/out")"
import json, sys
m = json.load(open(sys.argv[1]))["runs"][0]["memory"]
assert m["rollout"] == 2271125504 + 3489660928 == m["peak_bytes"], m
PYEOF
# The simulated run records the rollout dtype and the wire bytes.
if command -v h5dump >/dev/null; then
  h5dump -a /runs/0000/rollout_dtype -a /runs/0000/plan/wire_transfer_bytes "$TMP/sim.h5" >"$TMP/dump" 2>&1
  expect_grep '(0): "fp8"' "$TMP/dump"
  expect_grep "(0): 9086631936" "$TMP/dump"
  h5dump -d /runs/0000/plan/wire_recv_bytes "$TMP/sim.h5" >"$TMP/dump" 2>&1
  expect_grep "(0): 1135828992, 1135828992, 1135828992, 1135828992, 1135828992," "$TMP/dump"
  expect_grep "(5): 1135828992, 1135828992, 1135828992" "$TMP/dump"
fi
finish
