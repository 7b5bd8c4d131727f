# gpt-oss end to end over the mpi transport: tiny-gpt-oss from an fsdp and an ep trainer into
# vLLM's tp and ep layouts, verified element by element; a checkpoint with Hugging Face's
# stacked expert tensors, read back as the trainer's weights (whole and sharded) and as the
# reference of refit verify; refit plan of gpt-oss-120b on 8 GPUs; the one-line errors.
. "$(dirname "$0")/lib.sh"
TINY="$REFIT_SOURCE_DIR/tests/data/tiny-gpt-oss.json"

run() {
  expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --model "$TINY" --warmup 1 --iters 1 \
    --bucket-size 16KiB --verify full "$@"
}

run --trainer fsdp=2 --rollout tp=2 --mode unfused,grouped,fused
expect_rows 3
run --trainer ep=2 --rollout tp=2,ep --trainer-style fsdp2
expect_rows 1
run --trainer tp=2 --rollout tp=1,dp=2 --plan star
expect_rows 1

# MXFP4 as gpt-oss's own checkpoints and vLLM's Mxfp4 method have it: the experts' weights
# only; attention, router, embeddings and lm_head stay bf16 (16 tensors: 2 layers x 4 experts x
# gate_up and down). tiny-gpt-oss's experts are 32 wide, one 1x32 block, so tp=2 (which would
# give each rank half a block of down_proj) is refused; a copy 64 wide takes tp=2.
run --trainer fsdp=2 --rollout tp=2,ep --rollout-dtype mxfp4 --mode unfused,fused
expect_rows 2
expect_grep "rollout tp=2,ep (mxfp4, block-quantized: expert_gate_up, expert_down only; wire 212784 bytes, 16 tensors quantized at the source, 0 at the destination)" "$TMP/out"
run --trainer ep=2 --rollout tp=1,dp=2 --rollout-dtype mxfp4 --trainer-style fsdp2
expect_rows 1
sed 's/"intermediate_size": 32/"intermediate_size": 64/' "$TINY" >"$TMP/wide.json"
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --model "$TMP/wide.json" --warmup 1 --iters 1 \
  --bucket-size 16KiB --verify full --trainer fsdp=2 --rollout tp=2 --rollout-dtype mxfp4 \
  --mode unfused,grouped,fused
expect_rows 3
expect_grep "rollout tp=2 (mxfp4, block-quantized: expert_gate_up, expert_down only; wire 239920 bytes, 16 tensors quantized at the source, 0 at the destination)" "$TMP/out"
expect_error 2 "refit: error: --rollout-dtype mxfp4: tensor 'model.layers.0.mlp.experts.0.down_proj' [64, 32] is cut inside a 1x32 block by rollout tp=2; use tp=1" \
  "$REFIT" plan --model "$TINY" --trainer fsdp=2 --rollout tp=2 --rollout-dtype mxfp4
# The other formats cover the same tensors; fp8's 128x128 blocks take whole experts (ep).
for dtype in mxfp8 nvfp4 fp8; do
  run --trainer fsdp=2 --rollout tp=2,ep --rollout-dtype "$dtype" --bucket-size 64KiB
  expect_rows 1
  expect_grep "($dtype, block-quantized: expert_gate_up, expert_down only; wire" "$TMP/out"
done

# The checkpoint holds the experts stacked as gpt-oss's does: gate_up_proj [E, D, 2Fe] with
# each expert's [2Fe, D] transposed, down_proj [E, Fe, D], biases [E, 2Fe] and [E, D].
expect_exit 0 "$REFIT" checkpoint --model "$TINY" --checkpoint "$TMP/g.safetensors" --seed 7
expect_grep "wrote $TMP/g.safetensors: tiny-gpt-oss, 61 tensors, 283040 bytes, safetensors" \
  "$TMP/out"
"${PY:-python3}" - "$TMP/g.safetensors" <<'PYEOF' || fail "stacked names, shapes or order"
import json, struct, sys
data = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", data[:8])
h = json.loads(data[8:8 + n])
p = "model.layers.1.mlp.experts."
assert h[p + "gate_up_proj"]["shape"] == [4, 64, 64], h
assert h[p + "gate_up_proj_bias"]["shape"] == [4, 64], h
assert h[p + "down_proj"]["shape"] == [4, 32, 64], h
assert h[p + "down_proj_bias"]["shape"] == [4, 64], h
assert h["model.layers.1.self_attn.sinks"]["shape"] == [4], h
assert h["model.layers.1.self_attn.o_proj.bias"]["dtype"] == "BF16", h
assert not any(".experts.0." in k for k in h), h
e = h[p + "gate_up_proj"]
assert e["data_offsets"][1] - e["data_offsets"][0] == 4 * 64 * 64 * 2, e
PYEOF
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --model "$TINY" --trainer fsdp=2 --rollout tp=2 \
  --iters 1 --seed 1 --verify full --checkpoint "$TMP/g.safetensors" --output "$TMP/g.h5"
expect_rows 1
expect_exit 0 "$REFIT" verify "$TMP/g.h5" --checkpoint "$TMP/g.safetensors"
expect_grep "# $TMP/g.h5 run 0000 against $TMP/g.safetensors: 0 of 61 tensors differ" "$TMP/out"
# Sharded: an entry stays whole in one shard; each ep rank reads its own experts.
expect_exit 0 "$REFIT" checkpoint --model "$TINY" --checkpoint "$TMP/shards" --shard-size 16KiB \
  --seed 7
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --model "$TINY" --trainer ep=2 \
  --rollout tp=2,ep --iters 1 --seed 1 --verify full --checkpoint "$TMP/shards"
expect_rows 1

# A stacked entry of the wrong shape names the entry.
"${PY:-python3}" - "$TMP/g.safetensors" "$TMP/bad.safetensors" <<'PYEOF' || fail "patch"
import json, struct, sys
data = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", data[:8])
h = json.loads(data[8:8 + n])
h["model.layers.1.mlp.experts.down_proj"]["shape"] = [4, 64, 32]
text = json.dumps(h).encode()
text += b" " * (-len(text) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text)) + text + data[8 + n:])
PYEOF
expect_error 2 "refit: error: checkpoint '$TMP/bad.safetensors': tensor model.layers.1.mlp.experts.down_proj has shape [4, 64, 32], the model needs [4, 32, 64]" \
  "$REFIT" verify "$TMP/g.h5" --checkpoint "$TMP/bad.safetensors"

# gpt-oss's own MXFP4 checkpoint: per layer experts.gate_up_proj_blocks U8 [E, 2Fe, D/32, 16]
# and _scales U8 [E, 2Fe, D/32], down_proj_blocks [E, D, Fe/32, 16] and _scales ([out, in], no
# .weight), the biases bf16 as in the bf16 file, every other tensor bf16 under its HF name; the
# reference of an mxfp4 run of the same weights.
expect_exit 0 "$REFIT" checkpoint --model "$TINY" --checkpoint "$TMP/g4.safetensors" --seed 7 \
  --dtype mxfp4
expect_grep "wrote $TMP/g4.safetensors: tiny-gpt-oss, 61 tensors, 210848 bytes, safetensors, mxfp4" \
  "$TMP/out"
"${PY:-python3}" - "$TMP/g4.safetensors" <<'PYEOF' || fail "mxfp4 names, shapes or dtypes"
import json, struct, sys
data = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", data[:8])
h = json.loads(data[8:8 + n])
h.pop("__metadata__")
want = {"model.embed_tokens.weight": ("BF16", [512, 64]), "model.norm.weight": ("BF16", [64]),
        "lm_head.weight": ("BF16", [512, 64])}
for l in range(2):
    a, p = "model.layers.%d.self_attn." % l, "model.layers.%d.mlp." % l
    for w, rows in (("q", 64), ("k", 32), ("v", 32), ("o", 64)):
        want[a + w + "_proj.weight"] = ("BF16", [rows, 64])
        want[a + w + "_proj.bias"] = ("BF16", [rows])
    want[a + "sinks"] = ("BF16", [4])
    want[p + "router.weight"] = ("BF16", [4, 64])
    want[p + "router.bias"] = ("BF16", [4])
    want[p + "experts.gate_up_proj_blocks"] = ("U8", [4, 64, 2, 16])
    want[p + "experts.gate_up_proj_scales"] = ("U8", [4, 64, 2])
    want[p + "experts.gate_up_proj_bias"] = ("BF16", [4, 64])
    want[p + "experts.down_proj_blocks"] = ("U8", [4, 64, 1, 16])
    want[p + "experts.down_proj_scales"] = ("U8", [4, 64, 1])
    want[p + "experts.down_proj_bias"] = ("BF16", [4, 64])
    for norm in ("input_layernorm", "post_attention_layernorm"):
        want["model.layers.%d.%s.weight" % (l, norm)] = ("BF16", [64])
got = {k: (v["dtype"], v["shape"]) for k, v in h.items()}
assert got == want, sorted(set(got.items()) ^ set((k, (d, tuple(s))) for k, (d, s) in want.items()))
PYEOF
run --trainer fsdp=2 --rollout tp=2,ep --rollout-dtype mxfp4 --seed 7 --output "$TMP/g4.h5"
expect_rows 1
expect_exit 0 "$REFIT" verify "$TMP/g4.h5" --checkpoint "$TMP/g4.safetensors"
expect_grep "# $TMP/g4.h5 run 0000 against $TMP/g4.safetensors: 0 of 61 tensors differ" "$TMP/out"
# The bf16 checkpoint of the same weights is not the reference of an mxfp4 run.
expect_error 2 "refit: error: checkpoint '$TMP/g.safetensors': tensor model.layers.0.mlp.experts.gate_up_proj_blocks is missing; is it a checkpoint of model tiny-gpt-oss? refit checkpoint writes a complete one" \
  "$REFIT" verify "$TMP/g4.h5" --checkpoint "$TMP/g.safetensors"

# gpt-oss-120b from an FSDP x EP trainer on 64 ranks into one 8-GPU engine, tp and ep.
expect_exit 0 "$REFIT" plan --model gpt-oss-120b --trainer fsdp=8,ep=8 --rollout tp=8 --plan p2p
expect_grep "parameters       116829156672" "$TMP/out"
expect_grep "tensors          18903 logical, 471 per rollout rank (fused)" "$TMP/out"
expect_exit 0 "$REFIT" plan --model gpt-oss-120b --trainer fsdp=8,ep=8 --rollout tp=8,ep \
  --json --rollout-rank 7
"${PY:-python3}" - "$TMP/out" <<'PYEOF' || fail "gpt-oss-120b manifest"
import json, sys
d = json.load(open(sys.argv[1]))
m = {e["name"]: e["shape"] for e in d["rollout_manifest"]}
assert m["model.layers.35.mlp.experts.w13_weight"] == [16, 5760, 2880], m
assert m["model.layers.35.mlp.experts.w2_bias"] == [16, 2880], m
assert m["model.layers.35.attn.sinks"] == [8], m
assert m["model.embedding.weight"] == [25136, 2880], m
assert d["rollout_manifest_experts"] == [112, 127], d
PYEOF
# In mxfp4 the experts travel as e2m1 and E8M0 scales where the trainer's shard holds whole
# 1x32 blocks (down_proj, sharded by rows); fsdp shards gate_up_proj's stored [E, D, 2Fe] along
# D, cutting blocks, so those go bf16 and the rollout quantizes them. tp=8 would leave each
# rank 360 of down_proj's 2880 columns, 11.25 blocks: refused, naming the tps that fit.
expect_exit 0 "$REFIT" plan --model gpt-oss-120b --trainer fsdp=8,ep=8 --rollout tp=8,ep \
  --plan p2p --rollout-dtype mxfp4
expect_grep "wire bytes       177712068096 (165.51 GiB) of the transfer bytes, mxfp4 and scales where the source quantizes" "$TMP/out"
expect_grep "quantized        4608 mxfp4 tensors at their source, 4608 at their destination (a piece cuts a block)" "$TMP/out"
expect_error 2 "refit: error: --rollout-dtype mxfp4: tensor 'model.layers.0.mlp.experts.0.down_proj' [2880, 2880] is cut inside a 1x32 block by rollout tp=8; use tp=1 or 2" \
  "$REFIT" plan --model gpt-oss-120b --trainer fsdp=8,ep=8 --rollout tp=8 --rollout-dtype mxfp4

# The errors.
expect_error 2 "refit: error: refit checkpoint --dtype fp8: model tiny-gpt-oss stacks its experts, which refit writes quantized only in the model's own format; use --dtype mxfp4, or drop --dtype to write its bf16 weights" \
  "$REFIT" checkpoint --model "$TINY" --checkpoint "$TMP/x.safetensors" --dtype fp8
[ -e "$TMP/x.safetensors" ] && fail "a refused checkpoint left $TMP/x.safetensors behind"
cat >"$TMP/odd.json" <<'EOF'
{"model_type": "gpt_oss", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 36,
 "num_hidden_layers": 1, "num_attention_heads": 8, "num_key_value_heads": 8, "head_dim": 8,
 "num_local_experts": 2}
EOF
expect_error 2 "refit: error: layout: model.layers.0.mlp.experts.0.gate_up_proj dim 0 has 36 interleaved gate/up row pairs, which do not divide over rollout tp=8; choose a rollout tp that divides 36 or add ep to the rollout" \
  "$REFIT" plan --model "$TMP/odd.json" --trainer fsdp=1 --rollout tp=8
finish
