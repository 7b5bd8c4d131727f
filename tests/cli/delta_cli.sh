# Delta refits (--delta): p2p over mpi and shm, star over mpi, fanout over mpi, hierarchical
# over mpi and shm, host memory.
# Each run is verified element by element against the last version moved; the wire bytes,
# encodings (by tensor kind too), refit report's delta table, the transactional refusal of a
# corrupted piece (forwarded ones too), a stalled trainer's refit leaving the version before, a
# rollout rank that missed a version refit dense by its receipt, quantized rollouts (fp8, mxfp8,
# mxfp4, nvfp4), and the refusals of what is not supported yet are exact. A few seconds.
. "$(dirname "$0")/lib.sh"

JOB=(--model tiny --trainer fsdp=2 --rollout tp=2 --plan p2p --transport mpi --verify full)

# off then auto over every mode: the off runs keep no base, so auto's first iteration is dense.
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run "${JOB[@]}" --update sparse:0.01 \
  --delta off,auto --mode fused,grouped,unfused --iters 3 --output "$TMP/delta.h5"
expect_rows 6
expect_grep "# delta auto: version 12: dense (the trainer kept no version before it)" "$TMP/out"
expect_grep "# delta auto: version 15: 10162 wire bytes (3.632 % of the dense 279808); pieces: 0 dense, 62 sparse, 0 bitmask" "$TMP/out"
expect_grep "# delta auto: version 23: 10558 wire bytes (3.773 % of the dense 279808); pieces: 0 dense, 58 sparse, 4 bitmask" "$TMP/out"
# The same pieces by tensor kind: the norms' 640-element pieces are the ones that went bitmask.
expect_grep "# delta auto: pieces by tensor kind (dense/sparse/bitmask): embed 0/4/0, lm_head 0/4/0, q_proj 0/4/0, k_proj 0/4/0, v_proj 0/4/0, o_proj 0/8/0, gate_proj 0/8/0, up_proj 0/8/0, down_proj 0/8/0, norm 0/6/4" "$TMP/out"
expect_grep "# PASS" "$TMP/out"
# refit report's delta section: each auto run beside the off run of its mode.
expect_exit 0 "$REFIT" report "$TMP/delta.h5" -o "$TMP/report"
delta_rows=$(/usr/bin/python3 -c 'import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    print(r["run"], r["mode"], r["delta"], r["wire_bytes"], r["dense_run"], r["dense_wire_bytes"],
          r["wire_pct"][:6])' "$TMP/report/delta.csv")
[ "$delta_rows" = "0 fused off 279808   
1 grouped off 279808   
2 unfused off 279808   
3 fused auto 10162 0 279808 3.6317
4 grouped auto 10742 1 279808 3.8390
5 unfused auto 10558 2 279808 3.7733" ] || fail "delta.csv: $delta_rows"

# The generated versions mark the elements they change (adam by comparing each element's bits
# as it writes them) and encode reads those marks instead of comparing the versions: the same
# wire bytes as --delta-compare, which compares every element with the kept copy. The marks take
# a 64-bit word per 64 elements of each tensor's shard and two words more, 18160 bytes over the
# two trainer ranks; every piece of both is read from its marks.
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run "${JOB[@]}" --update adam:1e-6 --delta auto \
  --mode fused --iters 2 --output "$TMP/marks.h5"
expect_grep "# delta auto: version 2: 70632 wire bytes (25.24 % of the dense 279808); pieces: 0 dense, 0 sparse, 62 bitmask; the trainer keeps 281088 bytes of its previous version; 62 pieces encoded from the trainer's marks of what changed (18160 bytes)" "$TMP/out"
expect_grep "# PASS" "$TMP/out"
if command -v h5dump >/dev/null; then
  h5dump -a /runs/0000/delta_marked_pieces "$TMP/marks.h5" | grep -q "(0): 62" ||
    fail "the results file lacks delta_marked_pieces 62"
fi
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run "${JOB[@]}" --update adam:1e-6 --delta auto \
  --mode fused --iters 2 --delta-compare
expect_grep "# delta auto: version 2: 70632 wire bytes (25.24 % of the dense 279808); pieces: 0 dense, 0 sparse, 62 bitmask; the trainer keeps 281088 bytes of its previous version" "$TMP/out"
grep -q "trainer's marks" "$TMP/out" && fail "--delta-compare still read the trainer's marks"
expect_grep "# PASS" "$TMP/out"

# Over shm the rollout ranks copy the encoded pieces out of the trainers' offered buffers.
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run "${JOB[@]/mpi/shm}" --update sparse:0.01 \
  --delta auto --mode fused,grouped --iters 3
expect_grep "# delta auto: version 3: 10192 wire bytes (3.642 % of the dense 279808); pieces: 0 dense, 58 sparse, 4 bitmask" "$TMP/out"
expect_grep "# delta auto: version 7: 10258 wire bytes (3.666 % of the dense 279808); pieces: 0 dense, 60 sparse, 2 bitmask" "$TMP/out"
expect_grep "# PASS" "$TMP/out"

# A MoE whose experts the trainer holds by ep (and whose fp32 router bias has 4-byte
# elements), and fp32 weights throughout, each verified element by element.
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run "${JOB[@]/tiny/tiny-deepseek}" --update sparse:0.01 \
  --delta auto --iters 3 --trainer fsdp=1,ep=2
expect_grep "# delta auto: version 3: 18604 wire bytes (3.901 % of the dense 476928); pieces: 0 dense, 132 sparse, 2 bitmask" "$TMP/out"
expect_grep "# PASS" "$TMP/out"
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run "${JOB[@]}" --dtype fp32 --update sparse:0.01 \
  --delta auto --iters 3
expect_grep "# delta auto: version 3: 12928 wire bytes (2.31 % of the dense 559616); pieces: 0 dense, 58 sparse, 4 bitmask" "$TMP/out"
expect_grep "# PASS" "$TMP/out"

# Every element changed: auto sends dense pieces; half changed, bitmask as asked. The first
# also has a tp rank drop version 1 (--inject skip-version, with tp only): its receipt still
# says version 0, so version 2 goes to it dense (as it would anyway here) and it ends at 2.
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run "${JOB[@]}" --update full --delta auto \
  --mode fused --iters 2 --inject skip-version
expect_grep "# delta auto: version 0: dense (the rollout holds no version)" "$TMP/out"
expect_grep "# delta auto: version 2: rollout rank 1 holds version 0, not 1: sent dense" "$TMP/out"
expect_grep "# delta auto: version 2: 281792 wire bytes (100.7 % of the dense 279808); pieces: 62 dense, 0 sparse, 0 bitmask (31 pieces of the run dense for a stale receipt)" "$TMP/out"
expect_grep "# PASS" "$TMP/out"
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run "${JOB[@]}" --update sparse:0.5 --delta bitmask \
  --mode fused --iters 2
expect_grep "# delta bitmask: version 2: 159826 wire bytes (57.12 % of the dense 279808); pieces: 0 dense, 0 sparse, 62 bitmask" "$TMP/out"

# A flipped byte of an encoded piece: refused before anything is written, and the full check
# against the version before finds every element of it.
expect_exit 3 "${MPIRUN[@]}" -np 4 "$REFIT" run "${JOB[@]}" --update sparse:0.01 --delta auto \
  --mode fused --iters 3 --inject corrupt
expect_grep "error: delta for model.embed_tokens.weight rows 256..512 cols 0..32 (trainer rank 0 to rollout rank 1): the payload's hash 0e2145b8a2aa458e does not match the header's 1a25812da720226a; refusing it, the piece keeps its previous version" "$TMP/err"
expect_grep "# delta auto: the refit of version 3 was refused; the rollout still holds version 2: 0 wrong elements" "$TMP/out"

# A rollout replica that drops a version (--inject skip-version: rollout rank 1, the second
# replica, receives and checks version 2, then does not apply it) holds version 1 by its
# receipt, so the last iteration sends it version 3 dense while rollout rank 0 gets a delta;
# every element is then version 3's. Each run drops one: the second drops version 6. The 37
# dense pieces are rank 1's.
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run "${JOB[@]/tp=2/tp=1,dp=2}" --update sparse:0.01 \
  --delta auto --mode fused,grouped --iters 3 --inject skip-version --output "$TMP/skip.h5"
expect_rows 2
expect_grep "warning: inject skip-version: rollout rank 1 drops version 2 (received and checked, not applied); it still holds version 1" "$TMP/err"
expect_grep "# delta auto: version 3: rollout rank 1 holds version 1, not 2: sent dense" "$TMP/out"
expect_grep "# delta auto: version 3: 289714 wire bytes (51.89 % of the dense 558336); pieces: 37 dense, 35 sparse, 2 bitmask (37 pieces of the run dense for a stale receipt)" "$TMP/out"
expect_grep "# delta auto: version 7: rollout rank 1 holds version 5, not 6: sent dense" "$TMP/out"
[ "$(grep -c 'sent dense' "$TMP/out")" -eq 2 ] || fail "expected two stale lines: $(cat "$TMP/out")"
[ "$(attr "$TMP/skip.h5" 0001 delta_stale_dense_pieces)" = 37 ] ||
  fail "delta_stale_dense_pieces is '$(attr "$TMP/skip.h5" 0001 delta_stale_dense_pieces)', expected 37"
expect_error 2 "refit: error: --inject skip-version: a rollout rank drops a delta refit, so every --delta choice must send deltas (auto, sparse or bitmask), not off" \
  "$REFIT" run "${JOB[@]}" --delta off,auto --inject skip-version
expect_error 2 "refit: error: --inject skip-version needs 3 iterations or more (--warmup plus --iters): the first is dense, a rollout rank drops the one before the last, and the last refits it dense" \
  "$REFIT" run "${JOB[@]}" --delta auto --warmup 0 --iters 2 --inject skip-version

# A trainer rank that stalls in a delta refit (--inject stall strikes the last iteration under
# --delta): the rollout ranks time out waiting for its sizes, and nothing was applied, which the
# full check against the version before shows.
expect_exit 3 "${MPIRUN[@]}" -np 4 "$REFIT" run "${JOB[@]}" --update sparse:0.01 --delta auto \
  --mode fused --iters 1 --inject stall --timeout 0.5
expect_grep "error: timed out after 0.5 s waiting for the delta sizes; a peer rank is dead or stalled (raise --timeout if the job is just slow)" "$TMP/err"
expect_grep "# delta auto: the refit of version 1 timed out; the rollout still holds version 0: 0 wrong elements" "$TMP/out"

# Fanout: the trainer sends each encoded piece to the tensor's root replica, which forwards it,
# still encoded, down the tree (4 replicas: 2 steps); the wire bytes count both, and the replicas
# forward exactly 3x what the trainer sent (every piece reaches the 3 other replicas).
FAN=(--model tiny --trainer fsdp=2 --rollout tp=1,dp=4 --plan fanout --transport mpi --verify full)
expect_exit 0 "${MPIRUN[@]}" -np 6 "$REFIT" run "${FAN[@]}" --update sparse:0.01 --delta auto \
  --mode fused,grouped --iters 3
expect_rows 2
expect_grep "# delta auto: version 3: 37448 wire bytes (3.354 % of the dense 1116672, 28086 of them forwarded between replicas); pieces: 0 dense, 35 sparse, 2 bitmask" "$TMP/out"
expect_grep "# delta auto: version 7: 37736 wire bytes (3.379 % of the dense 1116672, 28302 of them forwarded between replicas); pieces: 0 dense, 36 sparse, 1 bitmask" "$TMP/out"
expect_grep "# PASS" "$TMP/out"

# A flipped byte on the root before it forwards, colocated (a rank gets back, forwarded, what its
# trainer rank encoded): the root and every replica downstream refuse it, each naming the piece
# and who forwarded it; nothing is applied, and after two delta versions the full check against
# version 2 finds every element of it on every replica.
cat >"$TMP/want" <<'EOF'
refit: error: delta for model.embed_tokens.weight rows 0..512 cols 16..32 (trainer rank 1 to rollout rank 0): the payload's hash 90f66d83c6568b0e does not match the header's 4d4271dc69cfe598; refusing it, the piece keeps its previous version
refit: error: delta for model.embed_tokens.weight rows 0..512 cols 16..32 (trainer rank 1 to rollout rank 0, forwarded to rollout rank 1 by rollout rank 0): the payload's hash 90f66d83c6568b0e does not match the header's 4d4271dc69cfe598; refusing it, the piece keeps its previous version
refit: error: delta for model.embed_tokens.weight rows 0..512 cols 16..32 (trainer rank 1 to rollout rank 0, forwarded to rollout rank 2 by rollout rank 0): the payload's hash 90f66d83c6568b0e does not match the header's 4d4271dc69cfe598; refusing it, the piece keeps its previous version
refit: error: delta for model.embed_tokens.weight rows 0..512 cols 16..32 (trainer rank 1 to rollout rank 0, forwarded to rollout rank 3 by rollout rank 2): the payload's hash 90f66d83c6568b0e does not match the header's 4d4271dc69cfe598; refusing it, the piece keeps its previous version
refit: warning: inject corrupt: flipped the last byte of the delta for model.embed_tokens.weight rows 0..512 cols 16..32 (trainer rank 1 to rollout rank 0)
EOF
expect_exit 3 "${MPIRUN[@]}" -np 4 "$REFIT" run "${FAN[@]/fsdp=2/fsdp=4}" --placement colocated \
  --update sparse:0.01 --delta auto --mode grouped --iters 3 --inject corrupt
grep '^refit' "$TMP/err" | sed 's/^refit\[[^]]*\]/refit/' | sort -u >"$TMP/lines"
diff "$TMP/want" "$TMP/lines" >"$TMP/diff" || fail "fanout delta corrupt: $(cat "$TMP/diff")"
expect_grep "# delta auto: the refit of version 3 was refused; the rollout still holds version 2: 0 wrong elements" "$TMP/out"

# Hierarchical (two domains of two replicas): the flip on domain 0's root reaches the replica of
# its own domain only; version 1 went as a delta and holds.
cat >"$TMP/want" <<'EOF'
refit: error: delta for model.embed_tokens.weight rows 0..512 cols 0..32 (trainer rank 0 to rollout rank 0): the payload's hash f052cca08b782716 does not match the header's 172bdee251445ff3; refusing it, the piece keeps its previous version
refit: error: delta for model.embed_tokens.weight rows 0..512 cols 0..32 (trainer rank 0 to rollout rank 0, forwarded to rollout rank 1 by rollout rank 0): the payload's hash f052cca08b782716 does not match the header's 172bdee251445ff3; refusing it, the piece keeps its previous version
refit: warning: inject corrupt: flipped the last byte of the delta for model.embed_tokens.weight rows 0..512 cols 0..32 (trainer rank 0 to rollout rank 0)
EOF
expect_exit 3 "${MPIRUN[@]}" -np 6 "$REFIT" run "${FAN[@]/fanout/hierarchical}" --domain-ranks 4 \
  --update sparse:0.01 --delta auto --mode fused --iters 2 --inject corrupt
grep '^refit' "$TMP/err" | sed 's/^refit\[[^]]*\]/refit/' | sort -u >"$TMP/lines"
diff "$TMP/want" "$TMP/lines" >"$TMP/diff" || fail "hierarchical delta corrupt: $(cat "$TMP/diff")"
expect_grep "# delta auto: the refit of version 2 was refused; the rollout still holds version 1: 0 wrong elements" "$TMP/out"

# Star: the reshape between the trainers stays dense; the transfer encodes the coupling buffers
# against their kept copy, each whole-embedding piece only in the share its rollout rank keeps.
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run "${JOB[@]/p2p/star}" --update sparse:0.01 --delta auto \
  --mode unfused,fused --iters 2 --warmup 0
expect_grep "# delta auto: version 1: 9426 wire bytes (2.294 % of the dense 410880); pieces: 0 dense, 40 sparse, 2 bitmask; the trainer keeps 412160 bytes of its previous version" "$TMP/out"
expect_grep "# delta auto: version 3: 9552 wire bytes (2.325 % of the dense 410880); pieces: 0 dense, 38 sparse, 4 bitmask" "$TMP/out"
expect_grep "# PASS" "$TMP/out"
# A flipped byte is refused naming the share of the whole embedding that was encoded.
expect_exit 3 "${MPIRUN[@]}" -np 4 "$REFIT" run "${JOB[@]/p2p/star}" --update sparse:0.01 --delta auto \
  --mode grouped --iters 3 --warmup 0 --inject corrupt
expect_grep "error: delta for model.embed_tokens.weight rows 256..512 cols 0..64 (trainer rank 1 to rollout rank 1): the payload's hash 9a063b7f95618fbc does not match the header's a9cdace39ffa9de5; refusing it, the piece keeps its previous version" "$TMP/err"
expect_grep "# delta auto: the refit of version 2 was refused; the rollout still holds version 1: 0 wrong elements" "$TMP/out"

# Quantized rollouts: a piece its source quantizes sends the delta of its wire bytes (quantized
# bytes, then scales), compared with the dense refit's quantized wire. fp8 in every mode over mpi;
# mxfp8 of a MoE's stacked experts (trainer ep and pp to rollout ep) over shm; mxfp4 with a
# replica that misses a version, which then gets its quantized pieces dense.
S="$REFIT_SOURCE_DIR/tests/data/fp8-small.json"
Q=(--trainer fsdp=2 --rollout tp=2 --plan p2p --transport mpi --verify full --update sparse:0.01 --delta auto --warmup 0)
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --model "$S" "${Q[@]}" --rollout-dtype fp8 \
  --mode unfused,fused,grouped --iters 2
expect_rows 3
expect_grep "# delta auto: version 1: 50343 wire bytes (4.256 % of the dense 1182880); pieces: 0 dense, 36 sparse, 0 bitmask" "$TMP/out"
expect_grep "# delta auto: version 5: 49231 wire bytes (4.162 % of the dense 1182880); pieces: 0 dense, 36 sparse, 0 bitmask" "$TMP/out"
expect_grep "# PASS" "$TMP/out"
# refit report compares it with the dense run's quantized wire too, as the line does.
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --model "$S" "${Q[@]}" --rollout-dtype fp8 \
  --delta off,auto --mode fused --iters 2 --output "$TMP/q.h5"
expect_exit 0 "$REFIT" report "$TMP/q.h5" -o "$TMP/qreport"
delta_rows=$(/usr/bin/python3 -c 'import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    print(r["run"], r["delta"], r["wire_bytes"], r["dense_wire_bytes"], r["wire_pct"][:6])' \
  "$TMP/qreport/delta.csv")
[ "$delta_rows" = "0 off 1182880  
1 auto 49139 1182880 4.1541" ] || fail "quantized delta.csv: $delta_rows"
expect_exit 0 "${MPIRUN[@]}" -np 6 "$REFIT" run --model "$REFIT_SOURCE_DIR/tests/data/fp8-moe.json" "${Q[@]/mpi/shm}" \
  --trainer fsdp=1,ep=2,pp=2 --rollout tp=2,ep --rollout-dtype mxfp8 --mode fused --iters 2
expect_grep "# delta auto: version 1: 221694 wire bytes (8.21 % of the dense 2700288); pieces: 0 dense, 58 sparse, 0 bitmask" "$TMP/out"
expect_grep "# PASS" "$TMP/out"
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --model "$S" "${Q[@]}" --rollout tp=1,dp=2 \
  --rollout-dtype mxfp4 --iters 3 --inject skip-version
expect_grep "# delta auto: version 2: 922714 wire bytes (52.79 % of the dense 1747968); pieces: 21 dense, 21 sparse, 0 bitmask (21 pieces of the run dense for a stale receipt)" "$TMP/out"
expect_grep "# PASS" "$TMP/out"
# nvfp4's per-tensor globals move with the versions: the rollout writes them with the pieces, so
# a refused refit leaves the globals of the version before too (the full check reads them).
expect_exit 3 "${MPIRUN[@]}" -np 4 "$REFIT" run --model "$S" "${Q[@]}" --rollout-dtype nvfp4 \
  --iters 3 --inject corrupt
expect_grep "# delta auto: the refit of version 2 was refused; the rollout still holds version 1: 0 wrong elements" "$TMP/out"
# A piece quantized on arrival is refused in one line.
expect_exit 2 "${MPIRUN[@]}" -np 6 "$REFIT" run --model "$REFIT_SOURCE_DIR/tests/data/mxfp8-cut.json" \
  "${Q[@]}" --trainer tp=4 --rollout-dtype mxfp8 --iters 1
expect_grep "error: --delta auto: mxfp8 quantized at the destination ('model.layers.0.mlp.down_proj.weight': a trainer shard cuts its blocks) is not supported with delta refits yet; use a trainer layout whose shards hold whole blocks, or --delta off" "$TMP/err"

# Hierarchical over shm: each replica offers the pieces it forwards, and the next copies them out.
expect_exit 0 "${MPIRUN[@]}" -np 6 "$REFIT" run "${FAN[@]/fanout/hierarchical}" --domain-ranks 4 \
  --transport shm --update sparse:0.01 --delta auto --mode grouped --iters 2 --warmup 0
expect_grep "# delta auto: version 1: 36968 wire bytes (3.311 % of the dense 1116672, 18484 of them forwarded between replicas); pieces: 0 dense, 72 sparse, 2 bitmask" "$TMP/out"
expect_grep "# PASS" "$TMP/out"

finish
