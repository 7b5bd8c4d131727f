#!/bin/bash
# refit topo: placement on the shipped 8-GPU, 2-socket topology, without MPI or the hardware.
. "$(dirname "$0")/lib.sh"
XML="$REFIT_SOURCE_DIR/tests/data/dgx8.xml"

# Acceptance: each rank's cores and NIC are local to its GPU (GPU g and mlx5_g share a PCIe
# switch; GPUs 0-3 and cores 0-15 are socket 0, GPUs 4-7 and cores 16-31 socket 1).
expect_exit 0 "$REFIT" topo --topology-xml "$XML" --ranks-per-node 8 --trainer fsdp=4 \
  --rollout tp=4
grep '^rank' "$TMP/out" >"$TMP/ranks"
cat >"$TMP/want" <<'WANT'
rank 0 node 0 trainer 0 rollout - gpu 0 bus 0000:19:00.0 cores 0-3 numa 0 nic mlx5_0
rank 1 node 0 trainer 1 rollout - gpu 1 bus 0000:1a:00.0 cores 4-7 numa 0 nic mlx5_1
rank 2 node 0 trainer 2 rollout - gpu 2 bus 0000:39:00.0 cores 8-11 numa 0 nic mlx5_2
rank 3 node 0 trainer 3 rollout - gpu 3 bus 0000:3a:00.0 cores 12-15 numa 0 nic mlx5_3
rank 4 node 0 trainer - rollout 0 gpu 4 bus 0000:99:00.0 cores 16-19 numa 1 nic mlx5_4
rank 5 node 0 trainer - rollout 1 gpu 5 bus 0000:9a:00.0 cores 20-23 numa 1 nic mlx5_5
rank 6 node 0 trainer - rollout 2 gpu 6 bus 0000:b9:00.0 cores 24-27 numa 1 nic mlx5_6
rank 7 node 0 trainer - rollout 3 gpu 7 bus 0000:ba:00.0 cores 28-31 numa 1 nic mlx5_7
WANT
diff "$TMP/want" "$TMP/ranks" >"$TMP/diff" || fail "rank lines differ: $(cat "$TMP/diff")"
# 4 trainer ranks x 4 rollout ranks, all across the two sockets.
[ "$(grep -c '^link .* distance node$' "$TMP/out")" -eq 16 ] ||
  fail "expected 16 links of distance node: $(grep '^link' "$TMP/out")"
expect_grep "link 0 -> 4 bytes " "$TMP/out"

# Two nodes of four ranks: links between them cross the network; HWLOC_XMLFILE works too.
expect_exit 0 env HWLOC_XMLFILE="$XML" "$REFIT" topo --ranks-per-node 4 --trainer fsdp=4 \
  --rollout tp=4
expect_grep "rank 4 node 1 trainer - rollout 0 gpu 0 bus 0000:19:00.0 cores 0-3 numa 0 nic mlx5_0" \
  "$TMP/out"
expect_grep "link 0 -> 4 bytes 192352256 distance network" "$TMP/out"

# Colocated: trainer and rollout rank i share a process.
expect_exit 0 "$REFIT" topo --topology-xml "$XML" --trainer fsdp=4 --rollout tp=4 \
  --placement colocated
expect_grep "link 0 -> 0 bytes 192352256 distance process" "$TMP/out"
expect_grep "link 0 -> 1 bytes 141885440 distance switch" "$TMP/out"

# Three trainer replicas: the engine on GPUs 6-7 takes everything from the replica on GPUs 4-5,
# the only one on its socket.
expect_exit 0 "$REFIT" topo --topology-xml "$XML" --trainer fsdp=2,dp=3 --rollout tp=2
[ "$(grep -c '^link' "$TMP/out")" -eq 4 ] && [ "$(grep -c '^link [45] -> [67] .* numa$' \
  "$TMP/out")" -eq 4 ] || fail "links should all come from ranks 4-5: $(grep '^link' "$TMP/out")"

expect_exit 0 "$REFIT" topo --topology-xml "$XML" --ranks-per-node 8 --trainer fsdp=4 \
  --rollout tp=4 --json
python3 -c 'import json,sys
d = json.load(sys.stdin)
assert len(d["ranks"]) == 8 and len(d["links"]) == 16, d
assert d["ranks"][5]["nic"] == "mlx5_5" and d["ranks"][5]["cores"] == "20-23", d["ranks"][5]
assert d["ranks"][5]["trainer"] is None and d["ranks"][5]["rollout"] == 1
' <"$TMP/out" || fail "--json output is not the expected JSON: $(head -c 600 "$TMP/out")"

# Errors: one line, exit 2.
E="refit: error:"
expect_error 2 "$E topology file '$TMP/none.xml' cannot be read: No such file or directory" \
  "$REFIT" topo --topology-xml "$TMP/none.xml"
# A FIFO is refused at once instead of blocking in open (the bound guards against a hang).
mkfifo "$TMP/fifo.xml"
expect_error 2 "$E topology file '$TMP/fifo.xml' cannot be read: is a FIFO, not a regular file" \
  timeout 10 "$REFIT" topo --topology-xml "$TMP/fifo.xml"
echo '<topology><garbage' >"$TMP/bad.xml"
expect_error 2 "refit: error: topology file '$TMP/bad.xml' does not load as hwloc XML" \
  "$REFIT" topo --topology-xml "$TMP/bad.xml"
MSG="nccl needs a GPU per rank, but the node has 8 GPUs for 16 ranks; use at most 8 ranks per node, or --transport ipc (ranks may share a GPU)"
expect_error 2 "$E $MSG" \
  "$REFIT" topo --topology-xml "$XML" --trainer fsdp=8 --rollout tp=8 --transport nccl
expect_error 2 "refit: error: --device 8 is out of range: the node has 8 GPUs" \
  "$REFIT" topo --topology-xml "$XML" --device 8
finish
