# The fanout plan end to end over the mpi transport: the trainer sends every element once, the
# engine replicas forward it to each other; every mode with two, three and four replicas, the
# tiny model and tiny-mixtral (with and without rollout ep), colocated too, every element
# verified. `refit plan` prints the forward stage exactly; a byte flipped on a forwarding rank
# is caught on every replica downstream of it, each line naming the rank it came from; the
# results file records the forward stage; the replicas-plans sweep compares the trainer's send
# bytes of p2p, star and fanout.
. "$(dirname "$0")/lib.sh"
DATA="$REFIT_SOURCE_DIR/tests/data"
MIX="$DATA/tiny-mixtral.json"

# run NP ARGS...: all three modes in one job, small buckets so pieces split.
run() {
  local np=$1
  shift
  expect_exit 0 "${MPIRUN[@]}" -np "$np" "$REFIT" run --mode unfused,grouped,fused \
    --plan fanout --warmup 1 --iters 1 --bucket-size 16KiB --verify full "$@"
  expect_rows 3
}

run 6 --model tiny --trainer fsdp=2 --rollout tp=2,dp=2                    # one forward step
run 10 --model tiny --trainer fsdp=2 --rollout tp=2,dp=4                   # two steps
run 7 --model tiny --trainer fsdp=2,tp=2 --rollout tp=1,dp=3 --trainer-style fsdp2
run 6 --model tiny --trainer fsdp=2 --rollout tp=2,dp=2 --trainer-order jax
run 4 --model tiny --trainer fsdp=2 --rollout tp=2,dp=2 --placement colocated
run 4 --model tiny --trainer fsdp=4 --rollout tp=1,dp=4 --placement colocated
run 6 --model "$MIX" --trainer fsdp=2 --rollout tp=2,dp=2
run 6 --model "$MIX" --trainer ep=2 --rollout tp=2,dp=2,ep                  # experts not forwarded
run 6 --model "$MIX" --trainer ep=2 --rollout tp=1,dp=4,ep
run 4 --model "$MIX" --trainer ep=4 --rollout tp=1,dp=4,ep --placement colocated
# The whole model in one bucket.
expect_exit 0 "${MPIRUN[@]}" -np 10 "$REFIT" run --model tiny --trainer fsdp=2 \
  --rollout tp=2,dp=4 --plan fanout --mode grouped,fused --bucket-size 0 --iters 1
expect_rows 2

# ---- refit plan: what leaves the trainer, what the replicas forward -------------------------
expect_exit 0 "$REFIT" plan --model tiny --trainer fsdp=2 --rollout tp=2,dp=4 --plan fanout
cat >"$TMP/want" <<'EOF'
model            tiny (llama, bf16)
parameters       139584
bytes            279168 (272.62 KiB)
tensors          21 logical, 15 per rollout rank (fused)
trainer          fsdp=2,tp=1 (tunix), 2 ranks, numbered tp fastest, then fsdp, ep, pp, dp
rollout          tp=2,dp=4, 8 ranks
placement        disaggregated, world size 10
plan             fanout: each element leaves the trainer once, for one of 4 replicas
pieces           188 (126 forward, 0 local copies)
blocks           62 transfer pieces once those contiguous on both ends are joined
transfer bytes   279808 (273.25 KiB)
contiguous       34048 (12.2%) of the transfer bytes lie in one run at both ends
strided          source 49152 (17.6%)  destination 196608 (70.3%)  both 0 (0.0%): rows at a pitch, copied once more by a message transport
forward bytes    839424 (819.75 KiB) between replicas
forward depth    2 (binomial trees over the 4 replicas, a step per level)
send bytes       min 139904 (136.62 KiB)  max 139904 (136.62 KiB)  per trainer rank
recv bytes       min 24576 (24.00 KiB)  max 55936 (54.62 KiB)  per rollout rank, from the trainer
forward send     min 86016 (84.00 KiB)  max 136448 (133.25 KiB)  per rollout rank
forward recv     min 83968 (82.00 KiB)  max 115328 (112.62 KiB)  per rollout rank
digest           159e82d25840832d
EOF
diff "$TMP/want" "$TMP/out" >"$TMP/diff" || fail "refit plan --plan fanout printed: $(cat "$TMP/diff")"
# p2p sends the same 279,808 bytes to each of the 4 replicas.
expect_exit 0 "$REFIT" plan --model tiny --trainer fsdp=2 --rollout tp=2,dp=4 --plan p2p
expect_grep "transfer bytes   1119232 (1.07 MiB)" "$TMP/out"

# The JSON, and tiny-mixtral under rollout ep: the experts leave the trainer once each, the
# replicas forward everything else, so p2p's trainer sends exactly fanout's forward bytes more.
expect_exit 0 "$REFIT" plan --model tiny --trainer fsdp=2 --rollout tp=2,dp=4 --plan fanout --json
mv "$TMP/out" "$TMP/fan.json"
expect_exit 0 "$REFIT" plan --model "$MIX" --trainer ep=2 --rollout tp=2,dp=2,ep --plan fanout \
  --json
mv "$TMP/out" "$TMP/mix-fan.json"
expect_exit 0 "$REFIT" plan --model "$MIX" --trainer ep=2 --rollout tp=2,dp=2,ep --plan p2p --json
mv "$TMP/out" "$TMP/mix-p2p.json"
"${PY:-python3}" - "$TMP" <<'PYEOF' || fail "refit plan --json of fanout plans"
import json, sys
d = sys.argv[1]
fan = json.load(open(f"{d}/fan.json"))
assert fan["plan"] == "fanout", fan["plan"]
assert fan["forward_depth"] == 2 and fan["forward_pieces"] == 126, fan
assert fan["transfer_bytes"] == 279808 == sum(fan["send_bytes"]), fan
assert fan["forward_bytes"] == 3 * 279808 == sum(fan["forward_send_bytes"]), fan
assert sum(fan["forward_recv_bytes"]) == fan["forward_bytes"], fan
assert fan["forward_send_bytes"] == [92160, 92160, 105088, 105088, 86016, 86016, 136448, 136448]
mf, mp = json.load(open(f"{d}/mix-fan.json")), json.load(open(f"{d}/mix-p2p.json"))
assert mf["forward_depth"] == 1 and "forward_depth" not in mp, (mf, mp)
assert mf["transfer_bytes"] == 478464 and mf["forward_bytes"] == 183552, mf
assert mp["transfer_bytes"] == mf["transfer_bytes"] + mf["forward_bytes"] == 662016, mp
PYEOF

# ---- a byte flipped on a forwarding rank ----------------------------------------------------
# Rollout rank 1 (tp rank 1 of replica 0, the embeddings' root) flips row 256 of embed_tokens
# before forwarding; replica 0 forwards to replicas 2 (step 0) and 1 (step 1), replica 2 to 3:
# rollout ranks 3 and 5 get it from 1, rank 7 from 5. Every mode finds all four.
cp "$REFIT_SOURCE_DIR/tests/data/fanout-corrupt-forward.txt" "$TMP/want"
for mode in unfused grouped fused; do
  expect_exit 1 "${MPIRUN[@]}" -np 10 "$REFIT" run --model tiny --trainer fsdp=2 \
    --rollout tp=2,dp=4 --plan fanout --mode $mode --iters 1 --bucket-size 16KiB --inject corrupt
  grep '^refit' "$TMP/err" | sed 's/^refit\[[^]]*\]/refit/' | sort -u >"$TMP/lines"
  diff "$TMP/want" "$TMP/lines" >"$TMP/diff" || fail "corrupt forward, $mode: $(cat "$TMP/diff")"
  expect_grep "# FAIL: verification failed in mode $mode" "$TMP/out"
  grep -v '^#' "$TMP/out" | awk '$14 != "4" || $15 != "1bad" { exit 1 }' ||
    fail "the corrupt $mode row should show #wrong 4 and 1bad: $(grep -v '^#' "$TMP/out")"
done

# ---- the results file records the forward stage ---------------------------------------------
expect_exit 0 "${MPIRUN[@]}" -np 10 "$REFIT" run --model tiny --trainer fsdp=2 \
  --rollout tp=2,dp=4 --plan fanout --mode fused --iters 1 --output "$TMP/fan.h5"
expect_rows 1
if /usr/bin/python3 -c 'import h5py' 2>/dev/null; then
  /usr/bin/python3 "$REFIT_SOURCE_DIR/tests/cli/results_h5py.py" "$TMP/fan.h5" --runs 1 --ok \
    >"$TMP/py" || fail "results_h5py: $(cat "$TMP/py")"
fi
h5dump -a /runs/0000/plan/forward_depth "$TMP/fan.h5" | grep -q '(0): 2$' ||
  fail "plan/forward_depth is not 2: $(h5dump -a /runs/0000/plan/forward_depth "$TMP/fan.h5")"
h5dump -a /runs/0000/plan/forward_bytes "$TMP/fan.h5" | grep -q '(0): 839424$' ||
  fail "plan/forward_bytes is not 839424"

# ---- the sweep: 1, 2 and 4 replicas x p2p, star, fanout on 4 colocated ranks ----------------
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --config \
  "$REFIT_SOURCE_DIR/configs/sweeps/replicas-plans.json" --model tiny --output "$TMP/sweep.h5"
[ "$(grep -c '^# PASS$' "$TMP/out")" -eq 9 ] || fail "the sweep should pass 9 runs: $(cat "$TMP/out")"
expect_exit 0 "$REFIT" report "$TMP/sweep.h5" -o "$TMP/report"
# Trainer send bytes per layout and plan: a copy per replica for p2p and star, one for fanout.
/usr/bin/python3 -c 'import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    print(r["rollout"], r["plan"], r["trainer_send_bytes"])' "$TMP/report/layouts.csv" >"$TMP/sends"
cat >"$TMP/want" <<'EOF'
tp=1 p2p 279168
tp=1 star 279168
tp=1 fanout 279168
tp=1,dp=2 p2p 558336
tp=1,dp=2 star 558336
tp=1,dp=2 fanout 279168
tp=1,dp=4 p2p 1116672
tp=1,dp=4 star 1116672
tp=1,dp=4 fanout 279168
EOF
diff "$TMP/want" "$TMP/sends" >"$TMP/diff" || fail "trainer send bytes per plan: $(cat "$TMP/diff")"
finish
