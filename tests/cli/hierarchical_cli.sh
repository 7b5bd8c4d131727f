# The hierarchical plan end to end on one host standing for two domains (--domain-ranks): the
# trainer sends every element once to each domain and the replicas of a domain forward it to
# each other; every mode over mpi and shm, tiny and tiny-mixtral with rollout ep, every element
# verified, and an fp8 rollout. `refit plan` prints the two levels exactly, and a byte flipped
# on a root reaches the replica of its own domain only.
. "$(dirname "$0")/lib.sh"
MIX="$REFIT_SOURCE_DIR/tests/data/tiny-mixtral.json"

# run TRANSPORT ARGS...: six ranks, the trainer's two and rollout dp=4, domains of four world
# ranks (ranks 0-3: the trainer and replicas 0 and 1; ranks 4-5: replicas 2 and 3).
run() {
  local transport=$1
  shift
  expect_exit 0 timeout 120 "${MPIRUN[@]}" -np 6 "$REFIT" run --mode unfused,grouped,fused \
    --plan hierarchical --domain-ranks 4 --transport "$transport" --warmup 1 --iters 1 \
    --bucket-size 16KiB --verify full "$@"
  expect_rows 3
}
for transport in mpi shm; do
  run $transport --model tiny --trainer fsdp=2 --rollout tp=1,dp=4
  run $transport --model "$MIX" --trainer ep=2 --rollout tp=1,dp=4,ep
done
# An fp8 rollout: the roots forward fp8 and scales (buckets cut runs of blocks).
expect_exit 0 timeout 120 "${MPIRUN[@]}" -np 6 "$REFIT" run --mode unfused,grouped,fused \
  --model "$REFIT_SOURCE_DIR/tests/data/fp8-small.json" --trainer fsdp=2 --rollout tp=1,dp=4 \
  --rollout-dtype fp8 --plan hierarchical --domain-ranks 4 --warmup 0 --iters 1 \
  --bucket-size 20000 --verify full
expect_rows 3

# ---- refit plan: one replica's bytes into each domain, the rest forwarded inside ------------
expect_exit 0 "$REFIT" plan --model tiny --trainer fsdp=2 --rollout tp=1,dp=4 \
  --plan hierarchical --domain-ranks 4
cat >"$TMP/want" <<'WANT'
model            tiny (llama, bf16)
parameters       139584
bytes            279168 (272.62 KiB)
tensors          21 logical, 15 per rollout rank (fused)
trainer          fsdp=2,tp=1 (tunix), 2 ranks, numbered tp fastest, then fsdp, ep, pp, dp
rollout          tp=1,dp=4, 4 ranks
placement        disaggregated, world size 6
plan             hierarchical: each element enters each of 2 domains once, for one of its replicas
pieces           116 (42 forward, 0 local copies)
blocks           74 transfer pieces once those contiguous on both ends are joined
transfer bytes   558336 (545.25 KiB)
contiguous       165120 (29.6%) of the transfer bytes lie in one run at both ends
strided          source 0 (0.0%)  destination 393216 (70.4%)  both 0 (0.0%): rows at a pitch, copied once more by a message transport
forward bytes    558336 (545.25 KiB) between replicas
forward depth    1 (binomial trees over each domain's replicas, a step per level)
send bytes       min 279168 (272.62 KiB)  max 279168 (272.62 KiB)  per trainer rank
recv bytes       min 110848 (108.25 KiB)  max 168320 (164.38 KiB)  per rollout rank, from the trainer
forward send     min 110848 (108.25 KiB)  max 168320 (164.38 KiB)  per rollout rank
forward recv     min 110848 (108.25 KiB)  max 168320 (164.38 KiB)  per rollout rank
digest           45a035cbfa6b0234
WANT
diff "$TMP/want" "$TMP/out" >"$TMP/diff" || fail "refit plan --plan hierarchical: $(cat "$TMP/diff")"
# Without domains the plan is one domain: fanout's volumes, each element once from the trainer.
expect_exit 0 "$REFIT" plan --model tiny --trainer fsdp=2 --rollout tp=1,dp=4 \
  --plan hierarchical
expect_grep "plan             hierarchical: each element enters each of 1 domains once" "$TMP/out"
expect_grep "transfer bytes   279168 (272.62 KiB)" "$TMP/out"
expect_grep "forward depth    2 " "$TMP/out"
# refit simulate plans with the same domains: two of them on the one-node VM cluster, so each
# element crosses twice, as refit plan said above; without them, the cluster's one node.
expect_exit 0 "$REFIT" simulate --model tiny --trainer fsdp=2 --rollout tp=1,dp=4 \
  --plan hierarchical --domain-ranks 4 --cluster vm-2core --mode fused --json
expect_grep '"transfer_bytes": 558336,' "$TMP/out"
expect_exit 0 "$REFIT" simulate --model tiny --trainer fsdp=2 --rollout tp=1,dp=4 \
  --plan hierarchical --cluster vm-2core --mode fused --json
expect_grep '"transfer_bytes": 279168,' "$TMP/out"

# ---- a byte flipped on a root -----------------------------------------------------------------
# Rollout rank 0 (replica 0, the embeddings' root in domain 0) flips element 0 before
# forwarding it to replica 1; domain 1's replicas get the embeddings from the trainer. Every
# mode finds exactly two wrong elements, and the checksums differ.
cat >"$TMP/want" <<'WANT'
refit: error: verify: checksum of model.embed_tokens.weight differs: trainer 01a4d8de647adec3, rollout 01a4d8b4a35d3701
refit: error: verify: model.embed_tokens.weight on rollout rank 0: element 0 (row 0, col 0) is 0xb89e, expected 0xb8c4
refit: error: verify: model.embed_tokens.weight on rollout rank 1: element 0 (row 0, col 0) is 0xb89e, expected 0xb8c4 (received from rollout rank 0 via forwarding)
refit: warning: inject corrupt: flipped bits of model.embed_tokens.weight element (0, 0) on rollout rank 0, before forwarding it
WANT
for mode in unfused grouped fused; do
  expect_exit 1 timeout 120 "${MPIRUN[@]}" -np 6 "$REFIT" run --model tiny --trainer fsdp=2 \
    --rollout tp=1,dp=4 --plan hierarchical --domain-ranks 4 --mode $mode --iters 1 \
    --bucket-size 16KiB --inject corrupt
  grep '^refit' "$TMP/err" | sed 's/^refit\[[^]]*\]/refit/' | sort -u >"$TMP/lines"
  diff "$TMP/want" "$TMP/lines" >"$TMP/diff" || fail "corrupt root, $mode: $(cat "$TMP/diff")"
  grep -v '^#' "$TMP/out" | awk '$14 != "2" || $15 != "1bad" { exit 1 }' ||
    fail "the corrupt $mode row should show #wrong 2 and 1bad: $(grep -v '^#' "$TMP/out")"
done
finish
