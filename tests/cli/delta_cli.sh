# Delta refits (--delta): p2p over mpi and shm, host memory. Each run is verified element by element
# against the last version moved; the wire bytes, encodings, the transactional refusal of a
# corrupted piece and the refusals of what is not supported yet are exact. A few seconds.
. "$(dirname "$0")/lib.sh"

JOB=(--model tiny --trainer fsdp=2 --rollout tp=2 --plan p2p --transport mpi --verify full)

# off then auto over every mode: the off runs keep no base, so auto's first iteration is dense.
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run "${JOB[@]}" --update sparse:0.01 \
  --delta off,auto --mode fused,grouped,unfused --iters 3
expect_rows 6
expect_grep "# delta auto: version 12: dense (the trainer kept no version before it)" "$TMP/out"
expect_grep "# delta auto: version 15: 10162 wire bytes (3.632 % of the dense 279808); pieces: 0 dense, 62 sparse, 0 bitmask" "$TMP/out"
expect_grep "# delta auto: version 23: 10558 wire bytes (3.773 % of the dense 279808); pieces: 0 dense, 58 sparse, 4 bitmask" "$TMP/out"
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

# Every element changed: auto sends dense pieces; half changed, bitmask as asked.
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run "${JOB[@]}" --update full --delta auto \
  --mode fused --iters 2
expect_grep "# delta auto: version 0: dense (the rollout holds no version)" "$TMP/out"
expect_grep "# delta auto: version 2: 281792 wire bytes (100.7 % of the dense 279808); pieces: 62 dense, 0 sparse, 0 bitmask" "$TMP/out"
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run "${JOB[@]}" --update sparse:0.5 --delta bitmask \
  --mode fused --iters 2
expect_grep "# delta bitmask: version 2: 159826 wire bytes (57.12 % of the dense 279808); pieces: 0 dense, 0 sparse, 62 bitmask" "$TMP/out"

# A flipped byte of an encoded piece: refused before anything is written, and the full check
# against the version before finds every element of it.
expect_exit 3 "${MPIRUN[@]}" -np 4 "$REFIT" run "${JOB[@]}" --update sparse:0.01 --delta auto \
  --mode fused --iters 3 --inject corrupt
expect_grep "error: delta for model.embed_tokens.weight rows 256..512 cols 0..32 (trainer rank 0 to rollout rank 1): the payload's hash 0e2145b8a2aa458e does not match the header's 1a25812da720226a; refusing it, the piece keeps its previous version" "$TMP/err"
expect_grep "# delta auto: the refit of version 3 was refused; the rollout still holds version 2: 0 wrong elements" "$TMP/out"

# What is not supported yet, one line each.
expect_exit 2 "${MPIRUN[@]}" -np 4 "$REFIT" run "${JOB[@]/p2p/star}" --delta auto --iters 1
expect_grep "error: --delta auto: --plan star is not supported with delta refits yet; use --plan p2p or --delta off" "$TMP/err"
finish
