# `refit plan`: exact totals for the shipped models, the golden JSON for Llama-3.1-8B and the
# one-line errors for bad layouts, unknown models and bad options.
. "$(dirname "$0")/lib.sh"

# Published parameter counts of every shipped model.
for pair in llama-3.2-1b:1235814400 llama-3.1-8b:8030261248 llama-3.1-70b:70553706496 \
  llama-3.1-405b:405853388800 gemma-2b:2506172416 gemma-7b:8537680896 \
  gemma-2-9b:9241705984 gemma-3-1b:999885952 qwen3-8b:8190735360 tiny:139584; do
  model=${pair%%:*} params=${pair#*:}
  expect_exit 0 "$REFIT" plan --model "$model" --trainer fsdp=1 --rollout tp=1 --json
  expect_grep "\"total_params\": $params," "$TMP/out"
done

# The golden plan of the issue, byte for byte: p2p named, so that the cost model's choice
# (--plan auto, the default, adds its plan_choice line) does not move it.
golden="$REFIT_SOURCE_DIR/tests/data/plan-llama-3.1-8b-fsdp4tp2-tp4.json"
expect_exit 0 "$REFIT" plan --model llama-3.1-8b --trainer fsdp=4,tp=2 --rollout tp=4 --plan p2p --json
cmp -s "$TMP/out" "$golden" || fail "plan JSON differs from $golden: $(diff "$TMP/out" "$golden" | head)"
# Hand-derived figures inside it (see tests/test_plan.c).
expect_grep '"total_bytes": 16060522496,' "$TMP/out"
expect_grep '"pieces": 3368,' "$TMP/out"
tr -d ' \n' <"$TMP/out" >"$TMP/flat"
expect_grep '"recv_bytes":[4015529984,4015529984,4015529984,4015529984]' "$TMP/flat"
expect_grep '"send_bytes":[2007764992,2007764992,2007764992,2007764992,2007764992,2007764992,2007764992,2007764992]' "$TMP/flat"

# Text output names the model and the totals.
expect_exit 0 "$REFIT" plan --model llama-3.1-8b --trainer fsdp=4,tp=2 --rollout tp=4
expect_grep "parameters       8030261248" "$TMP/out"
expect_grep "pieces           3368 (0 reshape, 0 local copies)" "$TMP/out"
expect_exit 0 "$REFIT" plan --model llama-3.1-8b --trainer fsdp=4,tp=2 --rollout tp=4 --plan star
expect_grep "plan             star, fan-in: 4 stars of 2 arms" "$TMP/out"

# Any HF config.json works with --model PATH.
mkdir -p "$TMP/Qwen2-0.5B"
cat >"$TMP/Qwen2-0.5B/config.json" <<'JSON'
{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 151936,
 "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
 "num_attention_heads": 14, "num_key_value_heads": 2, "tie_word_embeddings": true,
 "torch_dtype": "bfloat16"}
JSON
expect_exit 0 "$REFIT" plan --model "$TMP/Qwen2-0.5B/config.json" --trainer fsdp=2 --rollout tp=2 --json
expect_grep '"total_params": 494032768,' "$TMP/out"
expect_grep '"model": "Qwen2-0.5B",' "$TMP/out"

# Layouts that do not divide: one line naming tensor, dimension and axis; exit 2.
expect_error 2 "refit: error: layout: model.layers.0.self_attn.q_proj.weight dim 0 has 32 heads, which do not divide over trainer fsdp=3; choose a trainer fsdp that divides 32" \
  "$REFIT" plan --model llama-3.1-8b --trainer fsdp=3 --rollout tp=2
expect_error 2 "refit: error: layout: model.layers.0.self_attn.q_proj.weight dim 0 has 14 heads, which do not divide over rollout tp=4; choose a rollout tp that divides 14" \
  "$REFIT" plan --model "$TMP/Qwen2-0.5B/config.json" --trainer fsdp=1 --rollout tp=4
expect_error 2 "refit: error: layout: model.layers.0.self_attn.k_proj.weight dim 0 has 2 kv heads, which neither divide over nor replicate evenly across rollout tp=7; choose a rollout tp that divides or is a multiple of 2" \
  "$REFIT" plan --model "$TMP/Qwen2-0.5B/config.json" --trainer fsdp=1 --rollout tp=7
# Qwen3 is dense (per-head q/k norms) and plans.
expect_exit 0 "$REFIT" plan --model qwen3-8b --trainer fsdp=2,tp=2 --rollout tp=4
expect_grep "model            qwen3-8b (qwen3, bf16)" "$TMP/out"
expect_grep "tensors          399 logical, 291 per rollout rank (fused)" "$TMP/out"

# Mixture-of-experts models with expert parallelism and pipeline stages on the trainer; the
# header says how trainer ranks are numbered.
expect_exit 0 "$REFIT" plan --model mixtral-8x7b --trainer fsdp=2,tp=2,ep=8,pp=4 --rollout tp=8
expect_grep "trainer          fsdp=2,tp=2,ep=8,pp=4 (tunix), 128 ranks, numbered tp fastest, then fsdp, ep, pp, dp" "$TMP/out"
expect_grep "tensors          995 logical, 227 per rollout rank (fused)" "$TMP/out"
# The manifest of rollout rank 3 of DeepSeek-V3 at tp=8 with ep: experts 96-127 in vLLM's
# stacked tensors, the fp32 correction bias, MLA's fused a-projection.
expect_exit 0 "$REFIT" plan --model deepseek-v3 --trainer fsdp=8 --rollout tp=8,ep --json \
  --rollout-rank 3
"${PY:-python3}" - "$TMP/out" <<'PYEOF' || fail "DeepSeek-V3 manifest: $(head -c 400 "$TMP/out")"
import json, sys
d = json.load(open(sys.argv[1]))
m = {e["name"]: e for e in d["rollout_manifest"]}
assert d["rollout_manifest_rank"] == 3 and d["rollout_manifest_experts"] == [96, 127], d
assert len(m) == 1 + 3 * 10 + 58 * 14 + 2, len(m)
def expect(name, shape, dtype, nbytes):
    e = m["model.layers." + name]
    assert (e["shape"], e["dtype"], e["bytes"]) == (shape, dtype, nbytes), (name, e)
expect("3.mlp.experts.w13_weight", [32, 4096, 7168], "bf16", 32 * 4096 * 7168 * 2)
expect("3.mlp.experts.w2_weight", [32, 7168, 2048], "bf16", 32 * 7168 * 2048 * 2)
expect("60.mlp.gate.e_score_correction_bias", [256], "fp32", 1024)
expect("0.self_attn.fused_qkv_a_proj.weight", [2112, 7168], "bf16", 2112 * 7168 * 2)
expect("0.mlp.gate_up_proj.weight", [4608, 7168], "bf16", 4608 * 7168 * 2)
PYEOF
expect_error 2 "refit: error: trainer ep=3 does not divide the 8 experts of model mixtral-8x7b; choose an ep that divides 8" \
  "$REFIT" plan --model mixtral-8x7b --trainer fsdp=2,ep=3 --rollout tp=2
expect_error 2 "refit: error: trainer pp=33 is more pipeline stages than model mixtral-8x7b has layers (32); choose a pp of at most 32" \
  "$REFIT" plan --model mixtral-8x7b --trainer pp=33 --rollout tp=2
expect_error 2 "refit: error: rollout ep puts the 8 experts of model mixtral-8x7b over tp*dp = 6 ranks, which do not divide them; choose tp*dp that divides 8" \
  "$REFIT" plan --model mixtral-8x7b --trainer fsdp=2 --rollout tp=2,dp=3,ep
expect_error 2 "refit: error: plan star: a star sends every engine replica the same boxes, and rollout ep puts each expert on one rank of all replicas; use --plan p2p" \
  "$REFIT" plan --model mixtral-8x7b --trainer fsdp=8 --rollout tp=8,ep --plan star
expect_error 2 "refit: error: --rollout-rank 8: rollout tp=8 has ranks 0 to 7; choose one" \
  "$REFIT" plan --model mixtral-8x7b --trainer fsdp=8 --rollout tp=8 --json --rollout-rank 8
expect_error 2 "refit: error: plan star: 3 trainer ranks and rollout tp=2 must both be powers of two (the reference bridge's stars); use --plan p2p" \
  "$REFIT" plan --model tiny --trainer fsdp=1,tp=1,dp=3 --rollout tp=2 --plan star
expect_error 2 "refit: error: trainer layout 'fsdp=two': fsdp must be an integer from 1 to 65536, not 'two'" \
  "$REFIT" plan --model tiny --trainer fsdp=two

# Thousands of data-parallel replicas plan by pieces, not ranks x ranks: 8192 trainer ranks to
# 8192 rollout ranks, every rollout rank getting each of its 31 pieces from its own replica's
# pair. (The bound is a guard against the quadratic planner coming back, not a benchmark.)
timeout 60 "$REFIT" plan --model tiny --trainer fsdp=2,dp=4096 --rollout tp=2,dp=4096 >"$TMP/out" ||
  fail "planning 8192 -> 8192 ranks did not finish within 60 s"
expect_grep 'pieces           253952 (0 reshape, 0 local copies)' "$TMP/out"
expect_grep 'send bytes       min 139904 (136.62 KiB)  max 139904 (136.62 KiB)  per trainer rank' "$TMP/out"

# Expert parallelism plans by the ranks that hold each expert, not tensors x trainer ranks.
# Each command runs under `timeout 60` with its peak resident memory measured; the bounds are
# guards against the old planner coming back (DeepSeek-V3 below took 77 s of CPU, the 65,536
# experts more than ten minutes), not benchmarks: both take about a second, three under ASan.
measure() {
  local what=$1
  shift
  /usr/bin/python3 -c 'import resource, subprocess, sys
with open(sys.argv[1], "w") as out:
    rc = subprocess.call(["timeout", "60"] + sys.argv[2:], stdout=out)
print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)' \
    "$TMP/out" "$@" >"$TMP/bounds"
  read -r rc mib <"$TMP/bounds"
  [ "$rc" -ne 124 ] || fail "$what did not finish within 60 s"
  [ "$rc" -eq 0 ] || fail "$what exited $rc"
  # ASan's shadow memory and quarantine (make sanitize sets REFIT_TEST_SLACK) are not refit's.
  [ -n "${REFIT_TEST_SLACK:-}" ] || [ "$mib" -lt 512 ] || fail "$what needed $mib MiB, more than 512"
}
# DeepSeek-V3 over 15,616 trainer ranks (ep=256, pp=61): each expert tensor is held by one.
measure "planning deepseek-v3 ep=256,pp=61" \
  "$REFIT" plan --model deepseek-v3 --trainer ep=256,pp=61 --rollout tp=8,ep
expect_grep "pieces           51352 (0 reshape, 0 local copies)" "$TMP/out"
expect_grep "blocks           36504 transfer pieces once those contiguous on both ends are joined" "$TMP/out"
expect_grep "transfer bytes   1356485951488 (1.23 TiB)" "$TMP/out"
expect_grep "send bytes       min 0 (0 B)  max 319750144 (304.94 MiB)  per trainer rank" "$TMP/out"
expect_grep "recv bytes       min 169560743936 (157.92 GiB)  max 169560743936 (157.92 GiB)  per rollout rank" "$TMP/out"
expect_grep "digest           29417c0ba3f2e0f2" "$TMP/out"
# The small Mixtral with 65,536 experts, one per trainer rank: 393,233 tensors.
sed 's/"num_local_experts": 4/"num_local_experts": 65536/' \
  "$REFIT_SOURCE_DIR/tests/data/tiny-mixtral.json" >"$TMP/mixtral-64k.json"
measure "planning 65536 experts over ep=65536" \
  "$REFIT" plan --model "$TMP/mixtral-64k.json" --trainer ep=65536 --rollout tp=4,ep
expect_grep "tensors          393233 logical, 17 per rollout rank (fused)" "$TMP/out"
expect_grep "pieces           393284 (0 reshape, 0 local copies)" "$TMP/out"
expect_grep "blocks           262212 transfer pieces once those contiguous on both ends are joined" "$TMP/out"
expect_grep "send bytes       min 73728 (72.00 KiB)  max 8462336 (8.07 MiB)  per trainer rank" "$TMP/out"
expect_grep "recv bytes       min 1224786560 (1.14 GiB)  max 1224786560 (1.14 GiB)  per rollout rank" "$TMP/out"
expect_grep "digest           14387fa4df0b060d" "$TMP/out"

# A star plan is counted as it is made, not kept (rf_plan_options.summary): DeepSeek-V3 from 64
# trainer ranks (ep=16, pp=4) to 4 replicas of tp=8 has 14.5 million pieces, which took 4 s of
# CPU and 890 MiB when refit plan held them and its [tensor x trainer rank] coupling table; it
# now takes under a second and 30 MiB.
measure "planning a star of deepseek-v3 ep=16,pp=4 -> tp=8,dp=4" \
  "$REFIT" plan --model deepseek-v3 --plan star --trainer ep=16,pp=4 --rollout tp=8,dp=4
expect_grep "plan             star, fan-in: 8 stars of 8 arms" "$TMP/out"
expect_grep "pieces           14526400 (2905280 reshape, 58160 local copies)" "$TMP/out"
expect_grep "blocks           11621120 transfer pieces once those contiguous on both ends are joined" "$TMP/out"
expect_grep "extra bytes      103788052480 (96.66 GiB) sent whole but not kept" "$TMP/out"
expect_grep "send bytes       min 86402060288 (80.47 GiB)  max 86402060288 (80.47 GiB)  per trainer rank" "$TMP/out"
expect_grep "digest           4aaa9e4c09615e7f" "$TMP/out"
[ -n "${REFIT_TEST_SLACK:-}" ] || [ "$mib" -lt 128 ] ||
  fail "planning the star needed $mib MiB, more than 128: are its pieces kept again?"

# Unknown model: one line listing what exists; exit 2.
expect_exit 2 "$REFIT" plan --model llama-9
expect_grep "unknown model 'llama-9'" "$TMP/err"
[ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "unknown model printed more than one line"

finish
