# `refit simulate` on bad input (issue 36): cluster numbers beyond what a machine has (a rate of
# 1e300 GB/s, infinite in bytes a second, once made the flow model spin forever; 1e299 did once
# the calibration's fit scaled it), and calibration files whose run attributes are bad or name
# files. Each is one line, exit 2, under a timeout that a hang would run into.
. "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
T=(timeout 10)
vm="$REFIT_SOURCE_DIR/configs/clusters/vm-2core.json"
toy="$REFIT_SOURCE_DIR/tests/data/cluster-toy.json"
job=(--model tiny --trainer fsdp=2 --rollout tp=2)
see="see configs/clusters/README.md"

# cluster NAME FILE SED: a copy of FILE edited by SED, as $TMP/NAME.json.
cluster() { sed "$3" "$2" >"$TMP/$1.json"; }

# ---- cluster numbers out of range ------------------------------------------------------------

cluster huge "$vm" 's/"mpi_GBps": 7.19/"mpi_GBps": 1e300/'
expect_error 2 "refit: error: cluster $TMP/huge.json: key 'node.host.mpi_GBps' is 1e+300, outside the range 1e-06 to 1e+06 refit accepts; $see" \
  "${T[@]}" "$REFIT" simulate --cluster "$TMP/huge.json" "${job[@]}"
cluster slow "$vm" 's/"memcpy_GBps": 11.88/"memcpy_GBps": 1e-300/'
expect_error 2 "refit: error: cluster $TMP/slow.json: key 'node.host.memcpy_GBps' is 1e-300, outside the range 1e-06 to 1e+06 refit accepts; $see" \
  "${T[@]}" "$REFIT" simulate --cluster "$TMP/slow.json" "${job[@]}"
cluster memory "$vm" 's/"memory_GiB": 23/"memory_GiB": 1e300/'
expect_error 2 "refit: error: cluster $TMP/memory.json: key 'node.host.memory_GiB' is 1e+300, outside the range 0 to 1e+06 refit accepts; $see" \
  "${T[@]}" "$REFIT" simulate --cluster "$TMP/memory.json" "${job[@]}"
cluster latency "$vm" 's/"node": 10/"node": 1e7/'
expect_error 2 "refit: error: cluster $TMP/latency.json: key 'latency_us.node' is 1e+07, outside the range 0 to 1e+06 refit accepts; $see" \
  "${T[@]}" "$REFIT" simulate --cluster "$TMP/latency.json" "${job[@]}"
cluster nic "$toy" 's/"Gbps": 8/"Gbps": 1e300/'
expect_error 2 "refit: error: cluster $TMP/nic.json: key 'node.nics.Gbps' is 1e+300, outside the range 8e-06 to 8e+06 refit accepts; $see" \
  "${T[@]}" "$REFIT" simulate --cluster "$TMP/nic.json" "${job[@]}"
cluster nvlink "$toy" 's/"nvlink_GBps": 100/"nvlink_GBps": 1e300/'
expect_error 2 "refit: error: cluster $TMP/nvlink.json: key 'node.nvlink_GBps' is 1e+300, outside the range 1e-06 to 1e+06 refit accepts; $see" \
  "${T[@]}" "$REFIT" simulate --cluster "$TMP/nvlink.json" "${job[@]}"
# A number too large for a double is the JSON parser's to refuse.
cluster overflow "$toy" 's/"copy_GBps": 1000/"copy_GBps": 1e400/'
expect_error 2 "refit: error: cluster $TMP/overflow.json:7:66: real number overflow near '1e400'; fix the JSON in this file" \
  "${T[@]}" "$REFIT" simulate --cluster "$TMP/overflow.json" "${job[@]}"

# ---- the calibration's fit ------------------------------------------------------------------

# One measured run of tiny in host memory, one process in both roles.
expect_exit 0 timeout 60 "$REFIT" run --model tiny --trainer fsdp=1 --rollout tp=1 \
  --placement colocated --verify none --warmup 0 --iters 1 --output "$TMP/r.h5"
# 1e299 GB/s is refused as it loads, before the fit could scale it past the largest double.
cluster huge299 "$vm" 's/"mpi_GBps": 7.19/"mpi_GBps": 1e299/'
expect_error 2 "refit: error: cluster $TMP/huge299.json: key 'node.host.mpi_GBps' is 1e+299, outside the range 1e-06 to 1e+06 refit accepts; $see" \
  "${T[@]}" "$REFIT" simulate --cluster "$TMP/huge299.json" --calibration "$TMP/r.h5" "${job[@]}"
# On a terminal (script(1) gives it one) a calibration says how far it is, on stderr.
expect_exit 0 "${T[@]}" script -qec "$REFIT simulate --cluster vm-2core --calibration $TMP/r.h5 \
${job[*]} --memory host" /dev/null
expect_grep "refit: calibration $TMP/r.h5: 1 of 1 runs done" "$TMP/out"
# A run measured faster than any rate can explain (a median of a picosecond, crafted below)
# pulls the fit's memcpy rate up as far as it may go: it ends, at no more than 1e+06 GB/s, and
# prints nothing on stderr (no progress off a terminal).
PY=/usr/bin/python3
if "$PY" -c 'import h5py' 2>/dev/null; then
  cp "$TMP/r.h5" "$TMP/fast.h5"
  "$PY" -c 'import sys, h5py; h5py.File(sys.argv[1], "a")["runs/0000"].attrs["time_median_s"] = 1e-12' \
    "$TMP/fast.h5" || fail "could not craft fast.h5"
  expect_exit 0 "${T[@]}" "$REFIT" simulate --cluster vm-2core --calibration "$TMP/fast.h5" \
    "${job[@]}" --memory host
  expect_grep "calibration      $TMP/fast.h5: 1 runs and 0 limits (0 runs passed over)" "$TMP/out"
  rate=$(grep -o 'host.memcpy_GBps 11.88 -> [^,]*' "$TMP/out" | awk '{print $4}')
  awk -v r="$rate" 'BEGIN { exit !(r > 1e5 && r <= 1e6) }' ||
    fail "the fitted memcpy rate '$rate' is not in (1e5, 1e6]: $(cat "$TMP/out")"
  [ -s "$TMP/err" ] && fail "a calibration off a terminal printed on stderr: $(cat "$TMP/err")"
fi

# ---- calibration files with bad attributes --------------------------------------------------

if ! "$PY" -c 'import h5py' 2>/dev/null; then
  echo "note: h5py is not importable by $PY: the crafted calibration files are not tested"
  finish
fi
# craft NAME ATTRIBUTE VALUE: $TMP/NAME.h5, the run with ATTRIBUTE of /runs/0000 set to VALUE
# (a float where VALUE is "inf").
craft() {
  cp "$TMP/r.h5" "$TMP/$1.h5"
  "$PY" - "$TMP/$1.h5" "$2" "$3" <<'EOF' || fail "could not craft $1"
import sys, h5py
path, attribute, value = sys.argv[1:]
with h5py.File(path, "a") as f:
    f["runs/0000"].attrs[attribute] = float(value) if value == "inf" else value
EOF
}
cal=("${T[@]}" "$REFIT" simulate --cluster vm-2core "${job[@]}" --memory host --calibration)
todo="give a results file written by refit run"
# A path in the model attribute is not opened: refit records a model's name there.
craft model-path model /etc/passwd
expect_error 2 "refit: error: calibration $TMP/model-path.h5: run /runs/0000: attribute 'model' is '/etc/passwd', not a model's name; $todo" \
  "${cal[@]}" "$TMP/model-path.h5"
# An unknown name: one line naming file, run and attribute (the list of models it gives is
# the shipped one's, which grows).
craft model-unknown model no-such-model
expect_exit 2 "${cal[@]}" "$TMP/model-unknown.h5"
want="refit: error: calibration $TMP/model-unknown.h5: run /runs/0000: attribute 'model' is 'no-such-model': unknown model 'no-such-model'; use one of: "
[ "$(wc -l <"$TMP/err")" -eq 1 ] && [ "$(head -c ${#want} "$TMP/err")" = "$want" ] &&
  grep -q ", or a path to a Hugging Face config.json; $todo\$" "$TMP/err" ||
  fail "unknown model attribute: $(cat "$TMP/err")"
craft trainer trainer fsdp=x
expect_error 2 "refit: error: calibration $TMP/trainer.h5: run /runs/0000: attribute 'trainer' is 'fsdp=x': fsdp must be an integer from 1 to 65536, not 'x'; $todo" \
  "${cal[@]}" "$TMP/trainer.h5"
craft dtype dtype int4
expect_error 2 "refit: error: calibration $TMP/dtype.h5: run /runs/0000: attribute 'dtype' is 'int4': 'int4' is not one of model|bf16|fp16|fp32|fp8|fp8-ue8m0|mxfp8|mxfp8-floor|mxfp4|mxfp4-floor|nvfp4; $todo" \
  "${cal[@]}" "$TMP/dtype.h5"
craft transport transport pigeon
expect_error 2 "refit: error: calibration $TMP/transport.h5: run /runs/0000: attribute 'transport' is 'pigeon': 'pigeon' is not a transport; refit has mpi, shm, rma, nccl, ipc; $todo" \
  "${cal[@]}" "$TMP/transport.h5"
craft median time_median_s inf
expect_error 2 "refit: error: calibration $TMP/median.h5: run /runs/0000: attribute 'time_median_s' is inf, not a time; $todo" \
  "${cal[@]}" "$TMP/median.h5"
# The recorded options' model path is read only where the model attribute is its name: here it
# names a file that is not JSON, which the shipped tiny is used instead of.
echo "not json" >"$TMP/other.json"
craft config config_json "{\"model\": \"$TMP/other.json\"}"
expect_exit 0 "${cal[@]}" "$TMP/config.h5"
expect_grep "calibration      $TMP/config.h5: 1 runs and 0 limits (0 runs passed over)" "$TMP/out"
finish
