# --plan auto, the default: every plan kind is predicted by simulate's link model for the job's
# modes on the cluster, the fastest kept and named in one line (plan, simulate, run's job line
# and the results file's plan_choice). Fanout wins a replicated rollout where forwarding
# between replicas spreads the bytes, p2p where two replicas gain nothing from it; star is
# passed over, with its reason, on a layout that is not a power of two; a run with the default
# plans what rank 0 chose on every rank and verifies every element.
. "$(dirname "$0")/lib.sh"
R=("timeout" "60" "$REFIT")

# Eight replicas on the development VM: fanout, with every candidate's time (over mpi, whose
# messages these predictions time; --transport auto would take shm here).
expect_exit 0 "${R[@]}" simulate --cluster vm-2core --model tiny --trainer fsdp=4 --rollout tp=1,dp=8 \
  --transport mpi
expect_grep "plan             fanout," "$TMP/out"
expect_grep "plan choice      plan auto -> fanout: predicted 597 us against p2p 1.23 ms, star 2.25 ms, hierarchical has the pieces of fanout (mode grouped) on cluster vm-2core (1 node)" "$TMP/out"
# Two replicas: p2p.
expect_exit 0 "${R[@]}" simulate --cluster vm-2core --model tiny --trainer fsdp=4 --rollout tp=1,dp=2 \
  --transport mpi
expect_grep "plan choice      plan auto -> p2p: predicted 625 us against star 1.37 ms, fanout 646 us, hierarchical has the pieces of fanout (mode grouped) on cluster vm-2core (1 node)" "$TMP/out"
# Two nodes of H200s, two modes summed: the hierarchical plan, each byte into each node once;
# the JSON names the plan and the line.
expect_exit 0 "${R[@]}" simulate --cluster h200-hgx --model tiny --trainer fsdp=4 --rollout tp=1,dp=8 \
  --mode unfused,fused --json --transport mpi
expect_grep '"plan": "hierarchical",' "$TMP/out"
expect_grep '"plan_choice": "plan auto -> hierarchical: predicted 1.86 ms against p2p 1.86 ms, star 3.48 ms, fanout 2.05 ms (modes unfused,fused summed) on cluster h200-hgx (2 nodes)",' "$TMP/out"

# Six trainer ranks: star cannot plan them, and the line says why.
expect_exit 0 "${R[@]}" plan --cluster vm-2core --model tiny --trainer fsdp=2,dp=3 --rollout tp=2,dp=2
expect_grep "plan             p2p" "$TMP/out"
expect_grep "plan choice      plan auto -> p2p: predicted 340 us against star skipped (6 trainer ranks and rollout tp=2 must both be powers of two (the reference bridge's stars)), fanout 449 us, hierarchical has the pieces of fanout (mode grouped) on cluster vm-2core (1 node)" "$TMP/out"
# Rollout ep with one replica: star cannot plan it and fanout has p2p's pieces, so nothing is
# predicted.
expect_exit 0 "${R[@]}" plan --model "$REFIT_SOURCE_DIR/tests/data/tiny-mixtral.json" --trainer ep=2 \
  --rollout tp=2,ep
expect_grep "plan choice      plan auto -> p2p: the only distinct plan of this layout; star skipped (a star sends every engine replica the same boxes, and rollout ep puts each expert on one rank of all replicas), fanout has the pieces of p2p, hierarchical has the pieces of p2p" "$TMP/out"
# A named kind is planned as it always was, without a choice line.
expect_exit 0 "${R[@]}" plan --model tiny --trainer fsdp=2 --rollout tp=1,dp=4 --plan p2p
grep -q "plan choice" "$TMP/out" && fail "--plan p2p printed a plan choice: $(cat "$TMP/out")"

# refit run with the default on the CPU path: rank 0 chooses on the machine's one node, every
# rank plans fanout, every element verified; the job line and the results file say why.
OUT="$TMP/auto.h5"
expect_exit 0 timeout 120 "${MPIRUN[@]}" -np 6 "$REFIT" run --model tiny --trainer fsdp=2 \
  --rollout tp=1,dp=4 --transport mpi --verify full --warmup 0 --iters 1 --output "$OUT"
expect_rows 1
expect_grep "; seed 1; plan auto -> fanout: predicted 619 us against p2p 834 us, star 1.18 ms, hierarchical has the pieces of fanout (mode grouped) on cluster local (1 node)" "$TMP/out"
grep -v '^#' "$TMP/out" | awk '$2 != "fanout" { exit 1 }' || fail "the row's plan is not fanout: $(cat "$TMP/out")"
if command -v h5dump >/dev/null; then
  h5dump -a /runs/0000/plan "$OUT" | grep -q '(0): "fanout"' ||
    fail "runs/0000 plan is not fanout: $(h5dump -a /runs/0000/plan "$OUT")"
  h5dump -a /runs/0000/plan_choice "$OUT" |
    grep -qF '(0): "plan auto -> fanout: predicted 619 us against p2p 834 us' ||
    fail "runs/0000 lacks plan_choice: $(h5dump -a /runs/0000/plan_choice "$OUT")"
  # The report reads it as any run of a named plan.
  expect_exit 0 "${R[@]}" report "$OUT" --output-dir "$TMP/report"
fi
# A sweep takes auto among its plans: the run says plan=auto, its row the kind it chose.
expect_exit 0 timeout 120 "${MPIRUN[@]}" -np 4 "$REFIT" run --model tiny --trainer fsdp=2 \
  --rollout tp=1,dp=2 --plan star,auto --transport mpi --verify full --warmup 0 --iters 1
expect_grep "run 2/2: plan=auto" "$TMP/out"
grep -v '^#' "$TMP/out" | grep -v '^run ' | awk '{ print $2 }' | tr '\n' ' ' | grep -qx "star p2p " ||
  fail "the sweep's rows are not star, then p2p: $(cat "$TMP/out")"
finish
