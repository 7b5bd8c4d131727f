# `refit simulate`: the two-node toy cluster's hand-computed case through the command line
# (text and JSON), simulated runs in a results file that refit verify and refit report keep apart
# from measured ones, a mapping transport (--transport ipc) timed as one copy a piece, every
# shipped cluster file loading, and the one-line errors (exit 2) for a missing cluster, a
# missing key, a bad number, an unknown key, a job too large, an unknown transport and a
# mapping one across nodes; the lower bound beside each prediction, and refit plan --cluster
# printing it; a quantized rollout's quantize line, naming its rate and moving with it; a delta
# refit's wire bytes under --update and --delta.
. "$(dirname "$0")/lib.sh"
toy="$REFIT_SOURCE_DIR/tests/data/cluster-toy.json"
# The hand-computed cases time mpi's messages (--transport auto would take nccl or ipc on the
# toy's GPUs; transport_auto.sh checks what it takes).
layout=(--model tiny --trainer fsdp=2 --rollout tp=2)
job=("${layout[@]}" --transport mpi)
see="see configs/clusters/README.md"

# tiny, fsdp=2 on node 0 -> tp=2 on node 1: all 279808 bytes through each node's one 1 GB/s
# adapter, 279.808 us; the packs (24576 bytes) and unpacks (98304) at 1000 GB/s on top.
expect_exit 0 "$REFIT" simulate --cluster "$toy" "${job[@]}" --mode grouped --bucket-size 0 --json
"${PY:-python3}" - "$TMP/out" <<'PYEOF' || fail "toy JSON: $(head -c 1500 "$TMP/out")"
import json, sys
o = json.load(open(sys.argv[1]))
r = o["runs"][0]
assert o["simulated"] is True and o["world_size"] == 4 and o["nodes_used"] == 2, o
assert o["model_bytes"] == 279168 and o["transfer_bytes"] == 279808 and o["memory"] == "device"
assert o["cluster"]["name"] == "toy" and o["cluster"]["nic_Gbps"] == 8 and o["calibration"] is None
p = r["predicted_s"]
assert abs(p["transfer"] - 279808e-9) < 1e-18, p
assert abs(p["pack"] - 24576e-12) < 1e-21 and abs(p["unpack"] - 98304e-12) < 1e-21, p
assert abs(p["total"] - (279808e-9 + 122880e-12)) < 1e-18, p
assert p["reshape"] == 0 and "setup" not in p
assert r["bottleneck"]["link"] == "nic_out node 0 adapter 0" and r["bottleneck"]["bytes"] == 279808
assert abs(r["bound_s"] - 279808e-9) < 1e-18
assert r["class_bytes"] == {"process": 0, "gpu": 0, "nvlink": 0, "pcie": 0, "host": 0,
                            "network": 279808}, r["class_bytes"]
assert r["messages"] == 62 and r["buckets"] == 1 and r["units"] == 1
m = r["memory"]
assert m["staging"] == 98304 and m["rollout"] == 140544 and m["fits"] is True, m
# The lower bound: all 279168 model bytes (the norms that both rollout ranks keep cross once)
# through node 1's one 1 GB/s adapter; the prediction moves the norms twice and packs.
assert abs(o["lower_bound_s"] - 279168e-9) < 1e-18, o["lower_bound_s"]
assert o["lower_bound_binding"] == "NIC ingress of node 1 (1 adapter, 1 GB/s)", o
assert r["lower_bound_s"] == o["lower_bound_s"], r
assert abs(r["ratio_to_bound"] - p["total"] / 279168e-9) < 1e-12, r
PYEOF

# The same as text: one block per mode.
expect_exit 0 "$REFIT" simulate --cluster "$toy" "${job[@]}" --mode unfused,fused
expect_grep "placement        4 ranks on 2 nodes, 2 a node; weights in GPU memory" "$TMP/out"
expect_grep "plan             p2p, 62 pieces, 62 blocks, 279808 transfer bytes" "$TMP/out"
expect_grep "; 62 messages, 21 units, 1 buckets" "$TMP/out"
expect_grep "; 4 messages, 1 units, 1 buckets" "$TMP/out"
expect_grep "  bottleneck     nic_out node 0 adapter 0: 279808 bytes at 1 GB/s, bound 0.0002798 s" "$TMP/out"
expect_grep "  bytes          process 0, gpu 0, nvlink 0, pcie 0, host 0, network 279808" "$TMP/out"
expect_grep "  lower bound    0.0002792 s (binding: NIC ingress of node 1 (1 adapter, 1 GB/s)); prediction / bound 1" "$TMP/out"
[ "$(grep -c '^  lower bound ' "$TMP/out")" = 2 ] || fail "one lower bound line per mode: $(cat "$TMP/out")"

# --transport ipc, a mapping transport (simulated though a host build has none): tiny from
# fsdp=1 on GPU 0 to tp=1 on GPU 1 of the toy's node 0, every byte copied once by the rollout
# rank across NVLink (100 GB/s each way, below the 1000 GB/s copy rate): 279168 bytes / 100e9,
# the toy's latencies being 0; no messages, no packs, no staging; the copy and the notes are
# the two units of fused's one stage.
one=(--model tiny --trainer fsdp=1 --rollout tp=1)
expect_exit 0 "$REFIT" simulate --cluster "$toy" "${one[@]}" --transport ipc --mode fused --json
"${PY:-python3}" - "$TMP/out" <<'PYEOF' || fail "toy ipc JSON: $(head -c 1500 "$TMP/out")"
import json, sys
o = json.load(open(sys.argv[1]))
r = o["runs"][0]
assert o["transport"] == "ipc" and o["mapping"] is True and o["memory"] == "device", o
p = r["predicted_s"]
assert abs(p["total"] - 279168e-11) < 1e-18 and p["pack"] == 0 and p["unpack"] == 0, p
assert r["messages"] == 0 and r["units"] == 2 and r["buckets"] == 1, r
assert r["memory"]["staging"] == 0, r["memory"]
assert r["class_bytes"]["nvlink"] == 279168 and r["bottleneck"]["link"] == "nvlink_out node 0 gpu 0"
PYEOF
expect_exit 0 "$REFIT" simulate --cluster "$toy" "${one[@]}" --transport ipc --mode fused
expect_grep "weights in GPU memory; transport ipc (one copy a piece, straight across)" "$TMP/out"
expect_exit 0 "$REFIT" simulate --cluster "$toy" "${one[@]}" --transport nccl --mode fused
expect_grep "weights in GPU memory; transport nccl (messages)" "$TMP/out"

# A quantized rollout: tiny as mxfp8 from fsdp=1 to tp=1 colocated, one rank, its 147456 bytes
# of linear weights quantized at the source on its pack at the toy's default 895 GB/s (0.895 of
# its 1000 GB/s copy), 1.648e-07 s; a cluster file's quantize_GBps of 100 makes it 1.475e-06 s.
q=(--model tiny --trainer fsdp=1 --rollout tp=1 --rollout-dtype mxfp8 --placement colocated --mode grouped
  --transport mpi)
expect_exit 0 "$REFIT" simulate --cluster "$toy" "${q[@]}"
expect_grep "  quantize       147456 trainer-dtype bytes in packs, 0 in unpacks at 895 GB/s (gpu.quantize_GBps): 1.648e-07 s of pack and unpack" "$TMP/out"
sed 's/"copy_GBps": 1000}/"copy_GBps": 1000, "quantize_GBps": 100}/' "$toy" >"$TMP/toy-q.json"
expect_exit 0 "$REFIT" simulate --cluster "$TMP/toy-q.json" "${q[@]}"
expect_grep "  quantize       147456 trainer-dtype bytes in packs, 0 in unpacks at 100 GB/s (gpu.quantize_GBps): 1.475e-06 s of pack and unpack" "$TMP/out"
expect_grep "mode grouped     bucket 256.00 MiB: total 1.606e-06 s = pack 1.475e-06 + transfer 1.317e-07 + unpack 0 s" "$TMP/out"
# Unquantized jobs print no quantize line.
expect_exit 0 "$REFIT" simulate --cluster "$toy" "${job[@]}" --mode grouped
! grep -q "^  quantize" "$TMP/out" || fail "a quantize line without a format: $(cat "$TMP/out")"

# Every shipped cluster loads and simulates a job that fits it.
for c in h100-hgx h200-hgx gb200-nvl72 h20-hgx h800-hgx h200-lent vm-2core; do
  expect_exit 0 "$REFIT" simulate --cluster "$c" "${job[@]}" --json
  expect_grep "\"name\": \"$c\"," "$TMP/out"
done

# Simulated runs in a results file: marked, passed over by verify, listed by report.
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run "${job[@]}" --iters 1 --output "$TMP/r.h5"
expect_exit 0 "$REFIT" simulate --cluster "$toy" "${job[@]}" --mode grouped,fused --output "$TMP/r.h5"
expect_exit 0 "$REFIT" verify "$TMP/r.h5" --reference "$TMP/r.h5"
expect_grep "# $TMP/r.h5 run 0000 against $TMP/r.h5: 0 of 21 tensors differ" "$TMP/out"
expect_error 2 "refit: error: results file '$TMP/r.h5': run 0002 is a simulated run (refit simulate) and holds no measured results; give another --run" \
  "$REFIT" verify "$TMP/r.h5" --reference "$TMP/r.h5" --run 2
expect_exit 0 "$REFIT" report "$TMP/r.h5" -o "$TMP/report"
grep -c ',simulated,' "$TMP/report/status.csv" >"$TMP/n" || true
[ "$(cat "$TMP/n")" = 2 ] || fail "status.csv should list 2 simulated runs: $(cat "$TMP/report/status.csv")"
[ "$(tail -n +2 "$TMP/report/modes_buckets.csv" | wc -l)" = 1 ] ||
  fail "modes_buckets.csv should hold the measured run only: $(cat "$TMP/report/modes_buckets.csv")"
if command -v h5dump >/dev/null; then
  h5dump -a /runs/0001/simulated -a /runs/0001/status -a /runs/0001/cluster "$TMP/r.h5" >"$TMP/attrs"
  expect_grep '"simulated"' "$TMP/attrs"
  expect_grep '"toy"' "$TMP/attrs"
  expect_grep '(0): 1' "$TMP/attrs"
fi

# Errors: one line each, exit 2.
expect_error 2 "refit: error: refit simulate needs --cluster NAME|FILE (configs/clusters holds h100-hgx, h200-hgx, gb200-nvl72, h20-hgx, h800-hgx, h200-lent and vm-2core)" \
  "$REFIT" simulate "${job[@]}"
expect_error 2 "refit: error: unknown cluster 'nope'; give a cluster JSON file or the name of one in configs/clusters" \
  "$REFIT" simulate --cluster nope "${job[@]}"
sed 's/"pcie_GBps": 10,//' "$toy" >"$TMP/missing.json"
expect_error 2 "refit: error: cluster $TMP/missing.json: key 'node.pcie_GBps' is missing or not a positive number; $see" \
  "$REFIT" simulate --cluster "$TMP/missing.json" "${job[@]}"
sed 's/"Gbps": 8/"Gbps": "fast"/' "$toy" >"$TMP/bad.json"
expect_error 2 "refit: error: cluster $TMP/bad.json: key 'node.nics.Gbps' is missing or not a positive number; $see" \
  "$REFIT" simulate --cluster "$TMP/bad.json" "${job[@]}"
sed 's/"nvlink_GBps"/"nvlnk_GBps"/' "$toy" >"$TMP/typo.json"
expect_error 2 "refit: error: cluster $TMP/typo.json: unknown key 'node.nvlnk_GBps'; $see" \
  "$REFIT" simulate --cluster "$TMP/typo.json" "${job[@]}"
expect_error 2 "refit: error: the job needs 6 ranks but cluster toy has 2 nodes of 2 ranks (4); choose smaller layouts or a cluster file with more nodes" \
  "$REFIT" simulate --cluster "$toy" --model tiny --trainer fsdp=2 --rollout tp=4
expect_error 2 "refit: error: cluster vm-2core has no GPUs, so the weights cannot be in GPU memory; use --memory host" \
  "$REFIT" simulate --cluster vm-2core "${job[@]}" --memory device
expect_error 2 "refit: error: option --transport: 'ucx' is not a transport; refit has mpi, shm, rma, nccl, ipc" \
  "$REFIT" simulate --cluster "$toy" "${job[@]}" --transport ucx
expect_error 2 "refit: error: a mapping transport (ipc, shm) reaches the processes of one node, but the job's 4 ranks take 2 nodes of cluster toy (2 ranks a node); use --transport nccl or mpi, or smaller layouts" \
  "$REFIT" simulate --cluster "$toy" "${job[@]}" --transport ipc
expect_error 2 "refit: error: option --memory device: the shm transport moves host memory; use --memory host or --transport ipc" \
  "$REFIT" simulate --cluster "$toy" "${one[@]}" --transport shm --memory device
# refit plan --cluster prints the same bound for the plan's job, and a bad cluster is one line.
expect_exit 0 "$REFIT" plan --cluster "$toy" "${layout[@]}"
expect_grep "lower bound      0.0002792 s on cluster toy, for any plan over mpi with the weights in GPU memory (binding: NIC ingress of node 1 (1 adapter, 1 GB/s))" "$TMP/out"
expect_exit 0 "$REFIT" plan --cluster "$toy" "${layout[@]}" --json
"${PY:-python3}" -c 'import json,sys; o=json.load(open(sys.argv[1])); assert abs(o["lower_bound_s"]-279168e-9)<1e-18 and o["cluster"]=="toy", o' "$TMP/out" ||
  fail "plan --cluster JSON: $(head -c 600 "$TMP/out")"
expect_error 2 "refit: error: unknown cluster 'nowhere'; give a cluster JSON file or the name of one in configs/clusters" \
  "$REFIT" plan --cluster nowhere "${layout[@]}"

finish

# --update and --delta: the same job at 1% changed, auto: each of its 62 pieces goes sparse,
# 10380 bytes on the wire instead of 279808; adam's fraction only a run can count.
expect_exit 0 "$REFIT" simulate --cluster "$toy" "${job[@]}" --mode grouped --update sparse:0.01 --delta auto
expect_grep "  delta          auto, 1% of elements changed: 10380 transfer bytes on the wire, 0 forwarded; 62 chunks (279808 bytes whole) encoded: dense 0, bitmask 0, sparse 62" "$TMP/out"
expect_exit 2 "$REFIT" simulate --cluster "$toy" "${job[@]}" --update adam:1e-6 --delta auto
expect_grep "refit: error: --update adam:1e-6: refit simulate cannot know what fraction adam's steps change; give --update sparse:F with the fraction a refit run printed" "$TMP/out"

# rma's setup step register on the toy with 1 ms a window and 1 GB/s of arenas allocated as
# windows: tiny's fsdp=2 -> tp=2 makes 3 windows a rank, one per arena, the largest rank's
# arenas 140544 bytes (each tensor 64-byte aligned): 3 ms + 140.544 us; or with --register
# tensor 21 + 1 + 15 windows over memory refit allocated, 37 ms: each trainer rank holds half
# of each of the 21 tensors, p2p has no coupling buffers (one empty window), each rollout rank
# part of each of the 15 fused tensors. The toy without the keys predicts none; no other
# transport registers.
"${PY:-python3}" - "$toy" "$TMP/toy-register.json" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["latency_us"]["register"] = 1000
c["node"]["host"]["register_GBps"] = 1
json.dump(c, open(sys.argv[2], "w"))
PYEOF
rma=("${layout[@]}" --transport rma --memory host)
expect_exit 0 "$REFIT" simulate --cluster "$TMP/toy-register.json" "${rma[@]}"
expect_grep "register         --register arena: 3 windows a rank, up to 140544 bytes a rank: 0.003141 s once per job (latency_us.register 1000 us a window, node.host.register_GBps 1)" "$TMP/out"
expect_exit 0 "$REFIT" simulate --cluster "$TMP/toy-register.json" "${rma[@]}" --register tensor
expect_grep "register         --register tensor: 37 windows a rank, up to 140544 bytes a rank: 0.037 s once per job (latency_us.register 1000 us a window, node.host.register_GBps 1)" "$TMP/out"
expect_exit 0 "$REFIT" simulate --cluster "$toy" "${rma[@]}"
expect_grep "register         --register arena: 3 windows a rank, up to 140544 bytes a rank: not modelled (the cluster gives no latency_us.register or node.host.register_GBps)" "$TMP/out"
expect_error 2 "refit: error: option --register tensor: the mpi transport registers no memory; use --transport rma, or leave --register out" \
  "$REFIT" simulate --cluster "$toy" "${job[@]}" --register tensor
