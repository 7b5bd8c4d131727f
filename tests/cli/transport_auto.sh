# --transport auto, the default: on one node with host memory (--memory host, so that a machine
# with a GPU chooses alike; gpu_run.sh checks ipc there) refit run chooses shm and says why in
# the header's transport line and the results file (transport stays the name moved over;
# transport_requested and transport_choice beside it); a sweep resolves auto per combination
# beside a named mpi; a delta that fanout may forward between replicas passes shm over for mpi,
# which moves it; refit simulate chooses on the cluster, shm on one node of host memory, nccl on
# two nodes of GPUs; refit topo on a topology file's GPUs, ipc on one node and nccl on two.
. "$(dirname "$0")/lib.sh"
R=("timeout" "60" "$REFIT")
command -v h5dump >/dev/null || { echo "skipped: h5dump is not installed"; exit 77; }
JOB=(--model tiny --trainer fsdp=2 --rollout tp=2 --memory host --verify full --warmup 0 --iters 1)

# A sweep of auto and a named mpi in one mpirun: the header line of each, the rows' transports.
OUT="$TMP/auto.h5"
expect_exit 0 timeout 120 "${MPIRUN[@]}" -np 4 "$REFIT" run "${JOB[@]}" --transport auto,mpi \
  --output "$OUT"
expect_grep "run 1/2: transport=auto" "$TMP/out"
expect_grep "# transport: shm (auto: host weights, all 4 ranks on one node)" "$TMP/out"
expect_grep "run 2/2: transport=mpi" "$TMP/out"
expect_grep "# transport: mpi (--transport mpi)" "$TMP/out"
grep -v '^#' "$TMP/out" | grep -v '^run ' | awk '{ print $3 }' | tr '\n' ' ' | grep -qx "shm mpi " ||
  fail "the sweep's rows are not shm, then mpi: $(cat "$TMP/out")"
expect_same "run 0000 transport" "$(attr "$OUT" 0000 transport)" "shm"
expect_same "run 0000 transport_requested" "$(attr "$OUT" 0000 transport_requested)" "auto"
expect_same "run 0000 transport_choice" "$(attr "$OUT" 0000 transport_choice)" \
  "shm (auto: host weights, all 4 ranks on one node)"
expect_same "run 0001 transport" "$(attr "$OUT" 0001 transport)" "mpi"
expect_same "run 0001 transport_requested" "$(attr "$OUT" 0001 transport_requested)" "mpi"
h5dump -a /runs/0001/transport_choice "$OUT" >/dev/null 2>&1 &&
  fail "run 0001 of a named transport has a transport_choice"

# A delta refit with two replicas under --plan auto (which may choose fanout) over shm, which
# forwards it too; every element checks.
expect_exit 0 timeout 120 "${MPIRUN[@]}" -np 4 "$REFIT" run --model tiny --trainer fsdp=2 \
  --rollout tp=1,dp=2 --memory host --update sparse:0.5 --delta auto --verify full --warmup 1 \
  --iters 1
expect_grep "# transport: shm (auto: host weights, all 4 ranks on one node)" "$TMP/out"
expect_grep "# PASS" "$TMP/out"

# refit simulate on one node of host memory, then on two nodes of H200s (12 ranks, 8 a node).
expect_exit 0 "${R[@]}" simulate --cluster vm-2core "${JOB[@]:0:8}"
expect_grep "transport choice shm (auto: host weights, all 4 ranks on one node)" "$TMP/out"
expect_exit 0 "${R[@]}" simulate --cluster h200-hgx --model tiny --trainer fsdp=4 \
  --rollout tp=1,dp=8 --json --output "$TMP/sim.h5"
expect_grep '"transport": "nccl",' "$TMP/out"
expect_grep '"transport_choice": "nccl (auto: GPU weights, 12 ranks on 2 nodes)",' "$TMP/out"
expect_same "simulated transport_requested" "$(attr "$TMP/sim.h5" 0000 transport_requested)" "auto"
expect_same "simulated transport_choice" "$(attr "$TMP/sim.h5" 0000 transport_choice)" \
  "nccl (auto: GPU weights, 12 ranks on 2 nodes)"

# refit topo on the 8-GPU topology file: one node (ipc), or two nodes of two ranks (nccl).
dgx="$REFIT_SOURCE_DIR/tests/data/dgx8.xml"
expect_exit 0 "${R[@]}" topo "${JOB[@]:0:6}" --topology-xml "$dgx"
expect_same "topo, one node" "$(head -n 1 "$TMP/out")" \
  "transport: ipc (auto: GPU weights, all 4 ranks on one node)"
expect_exit 0 "${R[@]}" topo "${JOB[@]:0:6}" --topology-xml "$dgx" --ranks-per-node 2
expect_same "topo, two nodes" "$(head -n 1 "$TMP/out")" \
  "transport: nccl (auto: GPU weights, 4 ranks on 2 nodes)"
finish
