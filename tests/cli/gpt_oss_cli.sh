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

# The errors.
expect_error 2 "refit: error: refit checkpoint --dtype fp8 does not write model tiny-gpt-oss's stacked experts yet; drop --dtype to write its bf16 weights" \
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
