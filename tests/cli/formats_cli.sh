# The quantized formats (src/format) through the command line: refit checkpoint writes each
# format in its ecosystem's names, dtypes and shapes, and numpy, quantizing the bf16 checkpoint
# of the same weights by each rule with code of its own, agrees on every byte and scale;
# fp8-ue8m0 moves through refit run in every mode and checks against its own checkpoint (and
# not against fp8's), as mxfp8 does in host memory with every plan, dense and MoE, mpi and shm,
# and the 4-bit formats (mxfp4, nvfp4) in host memory (tests/cli/gpu_run.sh moves them on the
# GPU).
. "$(dirname "$0")/lib.sh"
small="$REFIT_SOURCE_DIR/tests/data/fp8-small.json"

expect_exit 0 "$REFIT" checkpoint --model "$small" --checkpoint "$TMP/small.safetensors"
for f in fp8 fp8-ue8m0 mxfp8 mxfp8-floor mxfp4 mxfp4-floor nvfp4; do
  expect_exit 0 "$REFIT" checkpoint --model "$small" --dtype $f --checkpoint "$TMP/small-$f.safetensors"
done
expect_grep "wrote $TMP/small-nvfp4.safetensors: fp8-small, 12 tensors, 894492 bytes, safetensors, nvfp4 (linear weights e2m1 two a byte, an e4m3 weight_scale per 1x16 block and an fp32 weight_scale_2)" "$TMP/out"

PY=/usr/bin/python3
"$PY" -c "import numpy" || fail "numpy is missing for $PY (make deps installs python3-numpy)"
"$PY" - "$TMP" <<'PYEOF' || fail "a format checkpoint is not numpy's quantization of the bf16 one"
import json, re, struct, sys
import numpy as np

tmp = sys.argv[1]
f32 = np.float32

def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    head.pop("__metadata__", None)
    return head, raw[8 + n:]

def get(head, data, name, dtype, shape):
    e = head[name]
    assert e["shape"] == shape, (name, e["shape"], shape)
    assert e["dtype"] == dtype, (name, e["dtype"], dtype)
    a, b = e["data_offsets"]
    return np.frombuffer(data[a:b], dtype=np.uint8)

def e4m3_values():
    v = []
    for c in range(0x7f):  # 0x7f is NaN
        e, m = c >> 3, c & 7
        v.append(m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return np.array(v)

E4M3 = e4m3_values()
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6])

def encode(x, values, sign_bit):
    """Nearest value, ties to the even code, saturating at the largest; the sign kept."""
    a = np.abs(x).astype(np.float64)
    mids = (values[:-1] + values[1:]) / 2
    code = np.searchsorted(mids, a, side="left")
    tie = (code < len(mids)) & (mids[np.minimum(code, len(mids) - 1)] == a)
    code = np.where(tie & (code % 2 == 1), code + 1, code)
    return (code | np.where(np.signbit(x), sign_bit, 0)).astype(np.uint8)

def pow2_ceil_exp(s):
    m, e = np.frexp(s.astype(np.float64))  # s = m 2^e, m in [0.5, 1)
    e = np.where(m == 0.5, e - 1, e)
    return np.clip(np.where(s > 0, e, -127), -127, 127)

def floor_exp(a):
    m, e = np.frexp(a.astype(np.float64))
    return np.where(a > 0, e - 1, -127)

def global_group(name, names):
    """The tensors that share nvfp4's global scale, as one vLLM parameter's weight_scale_2:
    q/k/v (qkv_proj); gate/up (gate_up_proj, the shared experts' too, and each expert's w13:
    Mixtral's w1/w3); q_a/kv_a where q_a_proj exists (fused_qkv_a_proj)."""
    g = re.sub(r"\.(q_proj|k_proj|v_proj)\.weight$", ".qkv", name)
    g = re.sub(r"\.(gate_proj|up_proj|w1|w3)\.weight$", ".gate_up", g)
    if any(".q_a_proj." in n for n in names):
        g = re.sub(r"\.(q_a_proj|kv_a_proj_with_mqa)\.weight$", ".fused_qkv_a", g)
    return g

def quantize(x, fmt, t=None):
    """t: the maximum |x| over x's global-scale group (nvfp4)."""
    rows, cols = x.shape
    if fmt in ("fp8", "fp8-ue8m0"):
        b = x.reshape(rows // 128, 128, cols // 128, 128).transpose(0, 2, 1, 3)
        amax = np.maximum(np.abs(b).max(axis=(2, 3)), f32(1e-4))
        if fmt == "fp8":
            factor = (f32(1) / amax) * f32(448)
            scale = amax * (f32(1) / f32(448))
        else:
            e = pow2_ceil_exp(amax * (f32(1) / f32(448)))
            scale = np.ldexp(f32(1), e).astype(f32)
            factor = np.ldexp(f32(1), -e).astype(f32)
        q = encode(b * factor[:, :, None, None], E4M3, 0x80)
        return q.transpose(0, 2, 1, 3).reshape(rows, cols), scale.astype(f32).view(np.uint8).ravel()
    n = 16 if fmt == "nvfp4" else 32
    b = x.reshape(rows, cols // n, n)
    amax = np.abs(b).max(axis=2)
    values, sign = (E2M1, 0x8) if "fp4" in fmt else (E4M3, 0x80)
    emax = 2 if "fp4" in fmt else 8
    if fmt == "nvfp4":
        g = t / f32(2688) if t > 0 else f32(1)
        sc = encode(amax / (f32(6) * g), E4M3, 0x80)
        sc = np.where(amax == 0, 0x38, np.where(sc & 0x7f == 0, 1, sc)).astype(np.uint8)
        div = E4M3[sc & 0x7f].astype(f32) * g
        q = encode(b / div[:, :, None], values, sign)
        scale, extra = sc.ravel(), np.array([g], dtype=f32).view(np.uint8)
    else:
        if fmt.endswith("-floor"):
            e = np.clip(floor_exp(amax) - emax, -127, 127)
        else:
            e = pow2_ceil_exp(amax * (f32(1) / f32(values[-1])))
        q = encode(b * np.ldexp(f32(1), -e).astype(f32)[:, :, None], values, sign)
        scale, extra = (e + 127).astype(np.uint8).ravel(), None
    q = q.reshape(rows, cols)
    if "fp4" in fmt:
        q = (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8)
    return q, scale, extra

head, data = load(tmp + "/small.safetensors")
linear = [k for k in head if k.endswith("proj.weight")]

def weights(name):
    e = head[name]
    a, b = e["data_offsets"]
    x = (np.frombuffer(data[a:b], dtype=np.uint16).astype(np.uint32) << 16).view(f32)
    return x.reshape(e["shape"])

group_amax = {}
for name in linear:
    g = global_group(name, linear)
    group_amax[g] = max(group_amax.get(g, f32(0)), np.abs(weights(name)).max())
names = {
    "fp8": (".weight", "F8_E4M3", ".weight_scale_inv", "F32", None),
    "fp8-ue8m0": (".weight", "F8_E4M3", ".weight_scale_inv", "F32", None),
    "mxfp8": (".weight", "F8_E4M3", ".weight_scale", "U8", None),
    "mxfp8-floor": (".weight", "F8_E4M3", ".weight_scale", "U8", None),
    "mxfp4": ("_blocks", "U8", "_scales", "U8", None),
    "mxfp4-floor": ("_blocks", "U8", "_scales", "U8", None),
    "nvfp4": (".weight", "U8", ".weight_scale", "F8_E4M3", ".weight_scale_2"),
}
checked = 0
for fmt, (wsuf, wdt, ssuf, sdt, gsuf) in names.items():
    qh, qd = load("%s/small-%s.safetensors" % (tmp, fmt))
    assert len(qh) == len(head) + len(linear) * (2 if gsuf else 1), (fmt, len(qh))
    for name in linear:
        x = weights(name)
        rows, cols = x.shape
        out = quantize(x, fmt, group_amax[global_group(name, linear)])
        p = name[: -len(".weight")]
        width = cols // 2 if "fp4" in fmt else cols
        bs = (128, 128) if fmt.startswith("fp8") else (1, 16 if fmt == "nvfp4" else 32)
        sshape = [rows // bs[0], cols // bs[1]]
        assert np.array_equal(get(qh, qd, p + wsuf, wdt, [rows, width]), out[0].ravel()), (fmt, name)
        assert np.array_equal(get(qh, qd, p + ssuf, sdt, sshape), out[1]), (fmt, name, "scales")
        if gsuf:
            assert np.array_equal(get(qh, qd, p + gsuf, "F32", []), out[2]), (fmt, name, "global")
        checked += 1
assert checked == 7 * 7, checked
print("numpy agrees on", checked, "quantized weights")
PYEOF

# fp8-ue8m0 in every mode over mpi, checked in full, then against the checkpoints: its own
# agrees, fp8's differs on every linear weight (the scales are other numbers).
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --model "$small" --trainer fsdp=2 --rollout tp=2 \
  --rollout-dtype fp8-ue8m0 --mode unfused,grouped,fused --iters 1 --output "$TMP/ue8m0.h5"
[ "$(grep -c "  full            0        ok" "$TMP/out")" -eq 3 ] || fail "fp8-ue8m0: not 3 verified rows"
expect_grep "rollout tp=2 (fp8-ue8m0, block-quantized; wire" "$TMP/out"
expect_exit 0 "$REFIT" verify "$TMP/ue8m0.h5" --checkpoint "$TMP/small-fp8-ue8m0.safetensors"
expect_grep "against $TMP/small-fp8-ue8m0.safetensors: 0 of 12 tensors differ" "$TMP/out"
expect_exit 1 "$REFIT" verify "$TMP/ue8m0.h5" --checkpoint "$TMP/small-fp8.safetensors"
expect_grep "against $TMP/small-fp8.safetensors: 7 of 12 tensors differ" "$TMP/out"

# mxfp8 (1x32 blocks along the columns, an E8M0 weight_scale byte each) moves in host memory:
# every mode over mpi, checked in full; each row a block, so fsdp's row shards hold whole
# blocks and every piece is quantized at its source (655360 fp8 bytes and 20480 scale bytes).
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --model "$small" --trainer fsdp=2 --rollout tp=2 \
  --rollout-dtype mxfp8 --mode unfused,grouped,fused --iters 1 --output "$TMP/mxfp8.h5"
[ "$(grep -c "  full            0        ok" "$TMP/out")" -eq 3 ] || fail "mxfp8: not 3 verified rows"
expect_grep "rollout tp=2 (mxfp8, block-quantized; wire 1203200 bytes, 7 tensors quantized at the source, 0 at the destination)" "$TMP/out"
# Its checksums against its own checkpoint: 0 differ; mxfp8-floor's scales (and so bytes)
# differ on every linear weight.
expect_exit 0 "$REFIT" verify "$TMP/mxfp8.h5" --checkpoint "$TMP/small-mxfp8.safetensors"
expect_grep "against $TMP/small-mxfp8.safetensors: 0 of 12 tensors differ" "$TMP/out"
expect_exit 1 "$REFIT" verify "$TMP/mxfp8.h5" --checkpoint "$TMP/small-mxfp8-floor.safetensors"
expect_grep "against $TMP/small-mxfp8-floor.safetensors: 7 of 12 tensors differ" "$TMP/out"
# fanout (forward pieces carry fp8 bytes and E8M0 scales), and star's reshape with mxfp8-floor
# checked by checksums.
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --model "$small" --trainer fsdp=2 --rollout tp=1,dp=2 --plan fanout \
  --rollout-dtype mxfp8 --mode unfused,grouped,fused --iters 1 --output "$TMP/mxfp8-fanout.h5"
[ "$(grep -c "  full            0        ok" "$TMP/out")" -eq 3 ] || fail "mxfp8 fanout: not 3 verified rows"
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --model "$small" --trainer fsdp=2 --rollout tp=2 --plan star \
  --rollout-dtype mxfp8-floor --mode unfused,grouped,fused --iters 1 --verify checksum --output "$TMP/mxfp8-star.h5"
[ "$(grep -c " checksum            -        ok" "$TMP/out")" -eq 3 ] || fail "mxfp8-floor star: not 3 checksum rows"
expect_exit 0 "$REFIT" verify "$TMP/mxfp8-star.h5" --checkpoint "$TMP/small-mxfp8-floor.safetensors"
# The MoE's stacked experts (weight_scale [experts, rows, cols / 32]) from trainer ep and pp to
# rollout ep.
moe="$REFIT_SOURCE_DIR/tests/data/fp8-moe.json"
expect_exit 0 "${MPIRUN[@]}" -np 6 "$REFIT" run --model "$moe" --trainer fsdp=1,ep=2,pp=2 --rollout tp=2,ep \
  --plan p2p --rollout-dtype mxfp8 --mode unfused,grouped,fused --iters 1 --output "$TMP/mxfp8-moe.h5"
[ "$(grep -c "  full            0        ok" "$TMP/out")" -eq 3 ] || fail "mxfp8 moe: not 3 verified rows"
# mxfp8-cut's down_proj has 192 columns: trainer tp=4 gives shards of 48, which cut 32-column
# blocks, so its pieces move as bf16 and the rollout quantizes them; over shm, in small buckets.
cut="$REFIT_SOURCE_DIR/tests/data/mxfp8-cut.json"
expect_exit 0 "${MPIRUN[@]}" -np 6 "$REFIT" run --model "$cut" --trainer tp=4 --rollout tp=2 --transport shm --plan p2p \
  --bucket-size 4096 --rollout-dtype mxfp8 --mode unfused,grouped,fused --iters 1 --output "$TMP/mxfp8-shm.h5"
[ "$(grep -c "  full            0        ok" "$TMP/out")" -eq 3 ] || fail "mxfp8 shm: not 3 verified rows"
expect_grep "6 tensors quantized at the source, 1 at the destination" "$TMP/out"
# A rollout tp whose shares cut a 32-column block: one line, before MPI.
expect_error 2 "refit: error: --rollout-dtype mxfp8: tensor 'model.layers.0.mlp.down_proj.weight' [128, 192] is cut inside a 1x32 block by rollout tp=4; use tp=1 or 2" \
  "$REFIT" plan --model "$cut" --rollout tp=4 --rollout-dtype mxfp8

# The 4-bit formats move in host memory: e2m1 two a byte (u8 [rows, cols / 2]), mxfp4's E8M0
# scales row-major, nvfp4's e4m3 scales in 128x4 tiles and its weight_scale_2, one global per
# fused tensor agreed over MPI. nvfp4 in every mode over mpi, checked in full, then against its
# own checkpoint (the file's globals are the fused groups' too): 327680 packed bytes and
# 40960 scale bytes of 655360 elements.
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --model "$small" --trainer fsdp=2 --rollout tp=2 \
  --rollout-dtype nvfp4 --mode unfused,grouped,fused --iters 1 --output "$TMP/nvfp4.h5"
[ "$(grep -c "  full            0        ok" "$TMP/out")" -eq 3 ] || fail "nvfp4: not 3 verified rows"
expect_grep "rollout tp=2 (nvfp4, block-quantized; wire 896000 bytes, 7 tensors quantized at the source, 0 at the destination)" "$TMP/out"
expect_exit 0 "$REFIT" verify "$TMP/nvfp4.h5" --checkpoint "$TMP/small-nvfp4.safetensors"
expect_grep "against $TMP/small-nvfp4.safetensors: 0 of 12 tensors differ" "$TMP/out"
# mxfp4 over shm from JAX order on mxfp8-cut: trainer tp=4 cuts down_proj's 32-column blocks,
# so its pieces are quantized on the rollout ranks (packed at the round's end), the other six
# tensors transposed at their sources; fanout's forward pieces carry packed bytes and scales.
expect_exit 0 "$REFIT" checkpoint --model "$cut" --dtype mxfp4 --checkpoint "$TMP/cut-mxfp4.safetensors"
expect_exit 0 "${MPIRUN[@]}" -np 6 "$REFIT" run --model "$cut" --trainer tp=4 --trainer-order jax \
  --rollout tp=1,dp=2 --plan fanout --transport shm --rollout-dtype mxfp4 --mode grouped,fused --iters 1 \
  --output "$TMP/mxfp4.h5"
[ "$(grep -c "  full            0        ok" "$TMP/out")" -eq 2 ] || fail "mxfp4: not 2 verified rows"
expect_grep "6 tensors quantized at the source, 1 at the destination" "$TMP/out"
expect_exit 0 "$REFIT" verify "$TMP/mxfp4.h5" --checkpoint "$TMP/cut-mxfp4.safetensors"
expect_grep "against $TMP/cut-mxfp4.safetensors: 0 of 12 tensors differ" "$TMP/out"
# A MoE with MLA (fused_qkv_a_proj shares one global; w13_weight one per expert, gate and up
# sharing it; scales in tiles per expert): trainer ep to rollout ep, then star by checksums, and
# its checkpoint.
expect_exit 0 "$REFIT" checkpoint --model tiny-deepseek --dtype nvfp4 --checkpoint "$TMP/ds-nvfp4.safetensors"
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --model tiny-deepseek --trainer fsdp=1,ep=2 --rollout tp=2,ep \
  --rollout-dtype nvfp4 --mode grouped --iters 1 --output "$TMP/ds-nvfp4.h5"
expect_grep "  full            0        ok" "$TMP/out"
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --model tiny-deepseek --trainer fsdp=2 --rollout tp=2 --plan star \
  --rollout-dtype nvfp4 --mode fused --verify checksum --iters 1 --output "$TMP/ds-nvfp4.h5"
expect_grep " checksum            -        ok" "$TMP/out"
expect_exit 0 "$REFIT" verify "$TMP/ds-nvfp4.h5" --checkpoint "$TMP/ds-nvfp4.safetensors"
expect_grep "against $TMP/ds-nvfp4.safetensors: 0 of 67 tensors differ" "$TMP/out"
# A flipped byte is found.
expect_exit 1 "${MPIRUN[@]}" -np 4 "$REFIT" run --model "$small" --trainer fsdp=2 --rollout tp=2 \
  --rollout-dtype nvfp4 --iters 1 --inject corrupt --output "$TMP/nvfp4-bad.h5"
expect_grep "# FAIL: verification failed in mode grouped" "$TMP/out"
# Each format's checkpoint as the trainer's weights (refit run --checkpoint F --rollout-dtype F):
# each trainer rank reads its shard's quantized bytes (4-bit ones packed), the scales of every
# block it touches and nvfp4's global, and all of them move as they are, so the rollout is the
# file. On mxfp8-cut, trainer tp=4 in JAX order cuts down_proj's 32-column blocks, whose scales
# both sides send; over shm in small buckets, then fanout over mpi; every byte and scale checked
# against the file, and the results against its checksums. The wire holds the file's bytes
# (4-bit elements half a byte each) and scales, a cut block's scale from both of its shards.
for fw in mxfp8:276480 mxfp4:206848 nvfp4:210944; do
  f=${fw%:*}
  ck="$TMP/cut-in-$f.safetensors"
  expect_exit 0 "$REFIT" checkpoint --model "$cut" --dtype $f --seed 4 --checkpoint "$ck"
  expect_exit 0 "${MPIRUN[@]}" -np 6 "$REFIT" run --model "$cut" --trainer tp=4 --trainer-order jax --rollout tp=2 \
    --rollout-dtype $f --checkpoint "$ck" --transport shm --bucket-size 64KiB --mode unfused,fused --iters 1 \
    --output "$TMP/in-$f.h5"
  expect_grep "rollout tp=2 ($f from the $f checkpoint; wire ${fw#*:} bytes, quantized bytes and scales as the trainer holds them)" "$TMP/out"
  [ "$(grep -c "  full            0        ok" "$TMP/out")" -eq 2 ] || fail "$f checkpoint input, p2p: $(cat "$TMP/out")"
  expect_exit 0 "${MPIRUN[@]}" -np 6 "$REFIT" run --model "$cut" --trainer fsdp=2,tp=2 --rollout tp=1,dp=2 --plan fanout \
    --rollout-dtype $f --checkpoint "$ck" --mode fused --iters 1 --output "$TMP/in-$f.h5"
  expect_grep "  full            0        ok" "$TMP/out"
  expect_exit 0 "$REFIT" verify "$TMP/in-$f.h5" --checkpoint "$ck"
  expect_grep "against $ck: 0 of 12 tensors differ" "$TMP/out"
done
# Formats alike on file take each other's: fp8-ue8m0 carries a block-FP8 file as it is.
expect_exit 0 "${MPIRUN[@]}" -np 2 "$REFIT" run --model "$small" --trainer fsdp=1 --rollout tp=1 \
  --rollout-dtype fp8-ue8m0 --checkpoint "$TMP/small-fp8.safetensors" --iters 1 --output "$TMP/in-ue8m0.h5"
expect_grep "  full            0        ok" "$TMP/out"
# Any other format refuses the file in one line, naming the formats that take it; so does an
# nvfp4 file whose fused members hold different globals, which one rollout global cannot hold.
expect_error 2 "refit: error: --rollout-dtype mxfp8 cannot take the nvfp4 checkpoint '$TMP/small-nvfp4.safetensors' as the trainer's weights: refit carries a quantized checkpoint's bytes as they are; use --rollout-dtype nvfp4, or a checkpoint in the model's dtype" \
  "$REFIT" run --model "$small" --rollout-dtype mxfp8 --checkpoint "$TMP/small-nvfp4.safetensors"
expect_error 2 "refit: error: --rollout-dtype mxfp4 cannot take the fp8 checkpoint '$TMP/small-fp8.safetensors' as the trainer's weights: refit carries a quantized checkpoint's bytes as they are; use --rollout-dtype fp8 or fp8-ue8m0, or a checkpoint in the model's dtype" \
  "$REFIT" run --model "$small" --rollout-dtype mxfp4 --checkpoint "$TMP/small-fp8.safetensors"
expect_error 2 "refit: error: --rollout-dtype nvfp4 cannot take the mxfp8 checkpoint '$TMP/small-mxfp8.safetensors' as the trainer's weights: refit carries a quantized checkpoint's bytes as they are; use --rollout-dtype mxfp8 or mxfp8-floor, or a checkpoint in the model's dtype" \
  "$REFIT" run --model "$small" --rollout-dtype nvfp4 --checkpoint "$TMP/small-mxfp8.safetensors"
expect_error 2 "refit: error: --plan star cannot move the mxfp4 checkpoint '$TMP/small-mxfp4.safetensors': its reshape would move the quantized bytes without their scales; use --plan p2p or fanout" \
  "$REFIT" run --model "$small" --rollout-dtype mxfp4-floor --plan star --checkpoint "$TMP/small-mxfp4.safetensors"
cp "$TMP/small-nvfp4.safetensors" "$TMP/apart-nvfp4.safetensors"
/usr/bin/python3 - "$TMP/apart-nvfp4.safetensors" <<'PYEOF' || fail "could not set q_proj's global apart"
import json, struct, sys
path = sys.argv[1]
raw = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
e = json.loads(raw[8:8 + n])["model.layers.0.self_attn.q_proj.weight_scale_2"]
at = 8 + n + e["data_offsets"][0]
raw[at:at + 4] = struct.pack("<f", 2 * struct.unpack("<f", raw[at:at + 4])[0])
open(path, "wb").write(raw)
PYEOF
expect_error_mpi 2 "refit: error: checkpoint '$TMP/apart-nvfp4.safetensors': model.layers.0.self_attn.k_proj.weight_scale_2 is 0.000741141208 but model.layers.0.self_attn.q_proj.weight_scale_2 is 0.00148228242; a rollout holds one global scale for the tensors it fuses, so they must share one (refit checkpoint --dtype nvfp4 writes such a file)" \
  "${MPIRUN[@]}" -np 2 "$REFIT" run --model "$small" --trainer fsdp=1 --rollout tp=1 --rollout-dtype nvfp4 \
  --checkpoint "$TMP/apart-nvfp4.safetensors" --iters 1 --output "$TMP/apart.h5"
finish
