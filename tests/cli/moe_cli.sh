# Mixture-of-experts models end to end over the mpi transport: the small Mixtral-style and
# DeepSeek-style configs (MLA, shared experts, a dense first layer, the fp32 correction bias)
# in every mode, p2p and star, verified element by element and by checksum, with expert and
# pipeline parallelism on the trainer and expert parallelism on the rollout; checkpoints with
# Hugging Face's per-expert names; the one-line errors, with nothing written.
. "$(dirname "$0")/lib.sh"
DATA="$REFIT_SOURCE_DIR/tests/data"
MIX="$DATA/tiny-mixtral.json"
DS="$DATA/tiny-deepseek.json"

# run NP PLAN ARGS...: all three modes in one job, small buckets so pieces split.
run() {
  local np=$1 plan=$2
  shift 2
  expect_exit 0 "${MPIRUN[@]}" -np "$np" "$REFIT" run --transport mpi --mode unfused,grouped,fused \
    --plan "$plan" --warmup 1 --iters 1 --bucket-size 16KiB --verify full "$@"
  expect_rows 3
}

for plan in p2p star; do
  run 4 $plan --model "$MIX" --trainer fsdp=2 --rollout tp=2
  run 6 $plan --model "$MIX" --trainer fsdp=2,ep=2 --rollout tp=2 --trainer-style fsdp2
  run 6 $plan --model "$DS" --trainer tp=2,ep=2 --rollout tp=2
  run 4 $plan --model "$DS" --trainer fsdp=2 --rollout tp=2 --trainer-order jax
done
# Trainer pp and ep together, into rollout ep over two engines (p2p: a star sends every
# replica the same boxes), and colocated.
run 8 p2p --model "$MIX" --trainer ep=2,pp=2 --rollout tp=2,dp=2,ep
run 8 p2p --model "$DS" --trainer ep=2,pp=2 --rollout tp=2,dp=2,ep --trainer-style fsdp2
run 4 p2p --model "$DS" --trainer ep=4 --rollout tp=4,ep --placement colocated
# EP -> EP with the same experts on both ends: whole experts move as blocks, one message each.
expect_exit 0 "${MPIRUN[@]}" -np 8 "$REFIT" run --model "$MIX" --trainer ep=4 --rollout tp=4,ep \
  --transport mpi --mode unfused --iters 1 --verify full
expect_rows 1
expect_grep "   unfused       p2p       mpi         476800        92        84" "$TMP/out"

# A safetensors checkpoint with per-expert names, written by refit and read by each ep rank
# for its own experts only; seed 7 in the file, seed 1 in the run: the weights come from it.
expect_exit 0 "$REFIT" checkpoint --model "$DS" --checkpoint "$TMP/ds.safetensors" --seed 7
expect_grep "wrote $TMP/ds.safetensors: tiny-deepseek, 67 tensors, 440704 bytes, safetensors" \
  "$TMP/out"
"${PY:-python3}" - "$TMP/ds.safetensors" <<'PYEOF' || fail "per-expert names or dtypes"
import json, struct, sys
data = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", data[:8])
h = json.loads(data[8:8 + n])
assert h["model.layers.2.mlp.experts.3.down_proj.weight"]["shape"] == [64, 32], h
assert h["model.layers.1.mlp.gate.e_score_correction_bias"]["dtype"] == "F32", h
assert h["model.layers.1.mlp.experts.0.gate_proj.weight"]["dtype"] == "BF16", h
PYEOF
expect_exit 0 "${MPIRUN[@]}" -np 8 "$REFIT" run --model "$DS" --trainer ep=2,pp=2 \
  --rollout tp=2,dp=2,ep --iters 1 --seed 1 --mode fused,unfused --verify full \
  --checkpoint "$TMP/ds.safetensors" --output "$TMP/ds.h5"
expect_rows 2
# The tensors table records each tensor's own dtype.
h5dump -d /runs/0000/tensors "$TMP/ds.h5" >"$TMP/tensors" 2>&1 || fail "h5dump of the tensors table"
tr -d ' \n' <"$TMP/tensors" >"$TMP/flat"
expect_grep '"model.layers.1.mlp.gate.e_score_correction_bias","fp32",1,[4,1],16,' "$TMP/flat"

# A checkpoint missing one expert: one line, exit 2, and no results file.
"${PY:-python3}" - "$TMP/ds.safetensors" "$TMP/missing.safetensors" <<'PYEOF' || fail "patch"
import json, struct, sys
data = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", data[:8])
h = json.loads(data[8:8 + n])
del h["model.layers.2.mlp.experts.1.up_proj.weight"]
text = json.dumps(h).encode()
text += b" " * (-len(text) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text)) + text + data[8 + n:])
PYEOF
expect_error_mpi 2 "refit: error: checkpoint '$TMP/missing.safetensors': tensor model.layers.2.mlp.experts.1.up_proj.weight is missing; is it a checkpoint of model tiny-deepseek? refit checkpoint writes a complete one" \
  "${MPIRUN[@]}" -np 8 "$REFIT" run --model "$DS" --trainer ep=2,pp=2 --rollout tp=2,dp=2,ep \
  --iters 1 --checkpoint "$TMP/missing.safetensors" --output "$TMP/none.h5"
[ -e "$TMP/none.h5" ] && fail "a failed run left $TMP/none.h5 behind"

# The shipped MoE sweep: 4 trainer meshes x 3 rollouts x 2 modes on 4 colocated ranks, each job
# verified element by element.
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --config "$REFIT_SOURCE_DIR/configs/sweeps/moe-layouts.json" \
  --output "$TMP/sweep.h5"
[ "$(grep -c '^run [0-9]*/24: ' "$TMP/out")" = 24 ] || fail "moe-layouts ran: $(grep '^run' "$TMP/out")"
[ "$(grep -c '^# PASS$' "$TMP/out")" = 12 ] || fail "moe-layouts footers: $(grep '^#' "$TMP/out" | tail -5)"

# Layouts MoE brings that do not fit: one line, exit 2, before any data moves.
expect_error_mpi 2 "refit: error: trainer ep=3 does not divide the 4 experts of model tiny-mixtral; choose an ep that divides 4" \
  "${MPIRUN[@]}" -np 5 "$REFIT" run --model "$MIX" --trainer ep=3 --rollout tp=2 --iters 1
expect_error_mpi 2 "refit: error: trainer pp=4 is more pipeline stages than model tiny-deepseek has layers (3); choose a pp of at most 3" \
  "${MPIRUN[@]}" -np 6 "$REFIT" run --model "$DS" --trainer pp=4 --rollout tp=2 --iters 1
finish
