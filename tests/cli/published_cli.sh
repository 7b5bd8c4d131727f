# A published refit beside refit's prediction: the smallest row of configs/published/refits.json
# (Llama-3.1-8B, 8 trainer to 8 rollout H100s on two nodes, the JAX-vLLM bridge's 187 ms)
# simulated with --published-s and --published-label into a results file; refit report's two
# tables of predictions, line by line; a simulated run without a reference beside it; a
# prediction that does not fit passed over for the best; the attributes in the file; --published-label alone refused with one line.
. "$(dirname "$0")/lib.sh"
# Over mpi, as bench/published.py predicts the table (--transport auto would take nccl here).
job=(--model llama-3.1-8b --trainer fsdp=1,tp=8 --rollout tp=8 --cluster h100-hgx --transport mpi)
label="JAX-vLLM bridge (NVIDIA/JAX-Toolbox #1797)"
H5="$TMP/published.h5"

# The text output names the reference and each mode's ratio: 40.48 ms / 187 ms and
# 41.64 ms / 187 ms.
expect_exit 0 "$REFIT" simulate "${job[@]}" --mode grouped,fused --published-s 0.187 \
  --published-label "$label" --output "$H5"
expect_grep "published        0.187 s ($label)" "$TMP/out"
[ "$(grep -c '^  published      predicted / published ' "$TMP/out")" = 2 ] ||
  fail "two modes should print their ratio: $(cat "$TMP/out")"
expect_grep "  published      predicted / published 0.216" "$TMP/out"
expect_grep "  published      predicted / published 0.223" "$TMP/out"

# A prediction of the same job without a reference is listed, with its published cells empty,
# and is not counted among the reference's runs.
expect_exit 0 "$REFIT" simulate "${job[@]}" --mode unfused --plan star --output "$H5"

# JSON carries the reference and the ratio for tools (bench/published.sh reads them).
expect_exit 0 "$REFIT" simulate "${job[@]}" --mode fused --published-s 0.187 \
  --published-label "$label" --json
"${PY:-python3}" - "$TMP/out" "$label" <<'PYEOF' || fail "published JSON: $(head -c 1500 "$TMP/out")"
import json, sys
o = json.load(open(sys.argv[1]))
assert o["published"] == {"s": 0.187, "label": sys.argv[2]}, o["published"]
r = o["runs"][0]
assert abs(r["published_ratio"] - r["predicted_s"]["total"] / 0.187) < 1e-15, r
PYEOF

expect_exit 0 "$REFIT" report "$H5" -o "$TMP/rep"
sed -n '/^## Simulated runs/,$p' "$TMP/rep/report.md" >"$TMP/section"
cat >"$TMP/want" <<EOF
## Simulated runs (refit simulate: predicted)

| file | run | model | trainer | rollout | cluster | plan | mode | bucket_size_bytes | fits | predicted_ms | published_ms | published_label | ratio |
|---:|---:|---|---|---|---|---|---|---:|---|---:|---:|---|---:|
| 1 | 0 | llama-3.1-8b | fsdp=1,tp=8 | tp=8 | h100-hgx | p2p | grouped | 268435456 | yes | 40.480 | 187.000 | $label | 0.216 |
| 1 | 1 | llama-3.1-8b | fsdp=1,tp=8 | tp=8 | h100-hgx | p2p | fused | 268435456 | yes | 41.635 | 187.000 | $label | 0.223 |
| 1 | 2 | llama-3.1-8b | fsdp=1,tp=8 | tp=8 | h100-hgx | star | unfused | 268435456 | yes | 128.589 | - |  | - |

## Published refits: refit's best prediction beside each

| file | published_label | model | trainer | rollout | cluster | published_ms | runs | best_plan | best_mode | best_bucket_size_bytes | best_fits | predicted_ms | ratio |
|---:|---|---|---|---|---|---:|---:|---|---|---:|---|---:|---:|
| 1 | $label | llama-3.1-8b | fsdp=1,tp=8 | tp=8 | h100-hgx | 187.000 | 2 | p2p | grouped | 268435456 | yes | 40.480 | 0.216 |

EOF
diff "$TMP/want" "$TMP/section" >"$TMP/diff" || fail "report.md's prediction tables differ: $(cat "$TMP/diff")"
[ "$(tail -n +2 "$TMP/rep/published.csv" | wc -l)" = 1 ] ||
  fail "published.csv should hold one reference: $(cat "$TMP/rep/published.csv")"
expect_grep ">Published refits: refit's best prediction beside each</h2>" "$TMP/rep/report.html"

# The best prediction is one whose memory fits: Qwen3-235B-A22B 8:8 on H100 (the vLLM row) in
# one whole-stage bucket is faster (1258.361 ms) but stages more than an 80 GB GPU holds, so
# 4 MiB buckets' 1391.695 ms, slower but fitting, are the ones set beside the published 3.2 s.
q=(--model qwen3-235b-a22b --trainer fsdp=8 --rollout tp=8,ep --cluster h100-hgx --transport mpi --mode fused
  --published-s 3.2 --published-label vllm --output "$TMP/q.h5")
expect_exit 0 "$REFIT" simulate "${q[@]}" --bucket-size 0
expect_exit 0 "$REFIT" simulate "${q[@]}" --bucket-size 4MiB
expect_exit 0 "$REFIT" report "$TMP/q.h5" -o "$TMP/repq"
expect_grep "| 1 | 0 | qwen3-235b-a22b | fsdp=8,tp=1 | tp=8,ep | h100-hgx | p2p | fused | 0 | no | 1258.361 | 3200.000 | vllm | 0.393 |" "$TMP/repq/report.md"
expect_grep "| 1 | vllm | qwen3-235b-a22b | fsdp=8,tp=1 | tp=8,ep | h100-hgx | 3200.000 | 2 | p2p | fused | 4194304 | yes | 1391.695 | 0.435 |" "$TMP/repq/report.md"

if command -v h5dump >/dev/null; then
  h5dump -a /runs/0001/published_s -a /runs/0001/published_label "$H5" >"$TMP/attrs"
  expect_grep "(0): 0.187" "$TMP/attrs"
  expect_grep "(0): \"$label\"" "$TMP/attrs"
  h5dump -a /runs/0000/memory_fits "$TMP/q.h5" >"$TMP/attrs"
  expect_grep "(0): 0" "$TMP/attrs"
  # No reference, no attributes: the run reads as any simulated run of an older file.
  h5dump -a /runs/0002/published_s "$H5" >"$TMP/attrs" 2>&1 &&
    fail "run 0002 has no reference but has published_s: $(cat "$TMP/attrs")"
fi

expect_error 2 "refit: error: refit simulate --published-label needs --published-s SECONDS, the published time it labels" \
  "$REFIT" simulate "${job[@]}" --published-label "$label"
expect_error 2 "refit: error: option --published-s: '-1' is out of range [0, 86400]" \
  "$REFIT" simulate "${job[@]}" --published-s -1

finish
