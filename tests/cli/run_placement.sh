#!/bin/bash
# refit run places its ranks (GPU, cores, NUMA node, NIC), binds them, plans with the distances
# and records both in the header and the results file. The shipped 8-GPU topology gives exact
# values anywhere; on the live machine `refit topo` (the same placement) is the reference.
. "$(dirname "$0")/lib.sh"
command -v h5dump >/dev/null || { echo "skipped: h5dump is not installed"; exit 77; }
XML="$REFIT_SOURCE_DIR/tests/data/dgx8.xml"
RUN=("${MPIRUN[@]}" -np 4 "$REFIT" run --model tiny --iters 1 --warmup 0 --transport mpi)
E="refit: error:"

# rows FILE DATASET: one line per row of a compound dataset, fields separated by spaces.
rows() {
  h5dump -y -w 0 -d "$2" "$1" | sed -n '/^   DATA {/,/^   }/p' | sed '1d;$d' | tr -d '\n' |
    sed 's/} *, *{/\n/g' | tr -d '{}' | sed 's/,  */ /g; s/  */ /g; s/^ //; s/ *$//'
  echo
}
# placement FILE: the placement rows without host and pid, which differ from run to run.
placement() { rows "$1" /runs/0000/placement | cut -d' ' -f1,4-; }
# same WANT GOT WHAT: the two files are equal.
same() { diff "$1" "$2" >"$TMP/diff" || fail "$3 differ: $(cat "$TMP/diff")"; }

# Four ranks placed on the 8-GPU topology: GPUs 0-3 in bus order, socket 0's 16 cores split
# four ways, each GPU's NIC on its PCIe switch. The cores are not this machine's: recorded,
# not bound, and one line says so.
expect_exit 0 env REFIT_LOG=info "${RUN[@]}" --trainer fsdp=2 --rollout tp=2 \
  --topology-xml "$XML" --output "$TMP/xml.h5"
expect_rows 1
placement "$TMP/xml.h5" >"$TMP/got"
cat >"$TMP/want" <<'WANT'
0 0 -1 0 "0000:19:00.0" "0-3" 0 "mlx5_0"
1 1 -1 1 "0000:1a:00.0" "4-7" 0 "mlx5_1"
2 -1 0 2 "0000:39:00.0" "8-11" 0 "mlx5_2"
3 -1 1 3 "0000:3a:00.0" "12-15" 0 "mlx5_3"
WANT
same "$TMP/want" "$TMP/got" "placement rows (--topology-xml)"
grep '^#  rank' "$TMP/out" | sed 's/ host .* trainer / trainer /' >"$TMP/got"
cat >"$TMP/want" <<'WANT'
#  rank   0 trainer 0 rollout - gpu 0 bus 0000:19:00.0 cores 0-3   numa 0 nic mlx5_0
#  rank   1 trainer 1 rollout - gpu 1 bus 0000:1a:00.0 cores 4-7   numa 0 nic mlx5_1
#  rank   2 trainer - rollout 0 gpu 2 bus 0000:39:00.0 cores 8-11  numa 0 nic mlx5_2
#  rank   3 trainer - rollout 1 gpu 3 bus 0000:3a:00.0 cores 12-15 numa 0 nic mlx5_3
WANT
same "$TMP/want" "$TMP/got" "header rank lines (--topology-xml)"
sed 's/^refit\[[^]]*\]/refit/' "$TMP/err" | grep -c 'not bound' >"$TMP/count"
[ "$(cat "$TMP/count")" = 1 ] || fail "expected one 'not bound' line: $(cat "$TMP/err")"
expect_grep "refit[0@$(hostname)]: warning: placement is from a topology file, not this machine: recorded, not bound" "$TMP/err"
# The header's links are the plan `refit topo` shows for the same job: both prefer near sources.
expect_exit 0 "$REFIT" topo --model tiny --trainer fsdp=2 --rollout tp=2 --topology-xml "$XML"
grep '^link' "$TMP/out" >"$TMP/want"
expect_exit 0 "${RUN[@]}" --trainer fsdp=2 --rollout tp=2 --topology-xml "$XML"
sed -n 's/^#  link /link /p' "$TMP/out" >"$TMP/got"
same "$TMP/want" "$TMP/got" "links of refit run and refit topo"
expect_grep "# links: 4 numa (273.25 KiB)" "$TMP/out"
/usr/bin/python3 "$REFIT_SOURCE_DIR/tests/cli/results_h5py.py" "$TMP/xml.h5" --runs 1 --ok >"$TMP/py" ||
  [ $? -eq 77 ] || fail "results_h5py: $(cat "$TMP/py")"

# --bind none: cores "-" in the file and the header; every rank keeps the affinity it was
# started with (here mpirun binds rank 0 to core 0 and refit leaves it there).
expect_exit 0 env REFIT_LOG=debug "${MPIRUN[@]}" --bind-to core:overload-allowed -np 4 "$REFIT" \
  run --model tiny --iters 1 --warmup 0 --transport mpi --trainer fsdp=2 --rollout tp=2 \
  --bind none --output "$TMP/none.h5"
placement "$TMP/none.h5" | cut -d' ' -f6 | sort -u >"$TMP/got"
[ "$(cat "$TMP/got")" = '"-"' ] || fail "--bind none recorded cpus $(cat "$TMP/got")"
expect_grep "refit[0@$(hostname)]: debug: not bound (--bind none); CPU affinity 0 as launched" \
  "$TMP/err"
[ "$(grep -c 'debug: not bound (--bind none)' "$TMP/err")" -eq 4 ] ||
  fail "every rank should say it is not bound: $(cat "$TMP/err")"
grep -q 'bound to cores' "$TMP/err" && fail "--bind none bound a rank: $(cat "$TMP/err")"
# Unbound by mpirun, a rank has this shell's affinity; --bind none keeps it.
mine=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
expect_exit 0 env REFIT_LOG=debug "${MPIRUN[@]}" --bind-to none -np 4 "$REFIT" run --model tiny \
  --iters 1 --warmup 0 --transport mpi --trainer fsdp=2 --rollout tp=2 --bind none
expect_grep "refit[3@$(hostname)]: debug: not bound (--bind none); CPU affinity $mine as launched" \
  "$TMP/err"

# --bind auto on this machine binds each rank to the cores `refit topo` gives it.
expect_exit 0 "$REFIT" topo --model tiny --trainer fsdp=2 --rollout tp=2
awk '/^rank/ { print $2, $14, $16 }' "$TMP/out" >"$TMP/want"
expect_exit 0 env REFIT_LOG=debug "${RUN[@]}" --trainer fsdp=2 --rollout tp=2 \
  --output "$TMP/live.h5"
placement "$TMP/live.h5" | awk '{ gsub(/"/, ""); print $1, $6, $7 }' >"$TMP/got"
same "$TMP/want" "$TMP/got" "live placement (rank cores numa) and refit topo's"
while read -r rank cores numa; do
  expect_grep "refit[$rank@$(hostname)]: debug: bound to cores $cores and NUMA node $numa; CPU affinity $cores" \
    "$TMP/err"
done <"$TMP/want"

# --bind cores insists on cores of each rank's own: refused with topo.h's line when a NUMA node
# has fewer hardware threads than ranks (this 2-core machine), accepted otherwise.
"$REFIT" topo --model tiny --trainer fsdp=2 --rollout tp=2 --bind cores >/dev/null 2>"$TMP/topo_err"
if [ -s "$TMP/topo_err" ]; then
  expect_error_mpi 2 "$(cat "$TMP/topo_err")" "${RUN[@]}" --trainer fsdp=2 --rollout tp=2 \
    --bind cores
  if [ "$(nproc --all)" = 2 ] && [ "$(lscpu | sed -n 's/^NUMA node(s): *//p')" = 1 ]; then
    [ "$(cat "$TMP/topo_err")" = "$E NUMA node 0 has 2 hardware threads for 4 ranks; use --bind numa or fewer ranks per node" ] ||
      fail "--bind cores: $(cat "$TMP/topo_err")"
  fi
else
  expect_exit 0 "${RUN[@]}" --trainer fsdp=2 --rollout tp=2 --bind cores
fi

# --nic auto exports each rank's NIC for NCCL (a leading '=' asks NCCL for that name exactly)
# and rank 0's environment in the results file shows it.
expect_exit 0 env REFIT_LOG=info "${RUN[@]}" --trainer fsdp=2 --rollout tp=2 \
  --topology-xml "$XML" --nic auto --output "$TMP/nic.h5"
for r in 0 1 2 3; do
  expect_grep "refit[$r@$(hostname)]: info: --nic auto: exported NCCL_IB_HCA==mlx5_$r" "$TMP/err"
done
h5dump -y -w 0 -d /runs/0000/env "$TMP/nic.h5" >"$TMP/env"
expect_grep '"NCCL_IB_HCA==mlx5_0"' "$TMP/env"
expect_exit 0 env NCCL_IB_HCA=keep "${RUN[@]}" --trainer fsdp=2 --rollout tp=2 \
  --topology-xml "$XML" --output "$TMP/nonic.h5"
h5dump -y -w 0 -d /runs/0000/env "$TMP/nonic.h5" >"$TMP/env"
expect_grep '"NCCL_IB_HCA=keep"' "$TMP/env"

# Colocated: trainer and rollout rank i share a process (a copy); GPUs 0-1 and 2-3 share a
# switch; the rest share socket 0.
expect_exit 0 "${RUN[@]}" --trainer fsdp=4 --rollout tp=4 --placement colocated \
  --topology-xml "$XML" --output "$TMP/colo.h5"
expect_rows 1
expect_grep "# links: 4 process (110.50 KiB), 4 switch (60.00 KiB), 8 numa (120.00 KiB)" \
  "$TMP/out"
rows "$TMP/colo.h5" /runs/0000/links >"$TMP/got"
cat >"$TMP/want" <<'WANT'
0 0 28288 "process"
0 1 15360 "switch"
0 2 15360 "numa"
0 3 15360 "numa"
1 0 15360 "switch"
1 1 28288 "process"
1 2 15360 "numa"
1 3 15360 "numa"
2 0 15360 "numa"
2 1 15360 "numa"
2 2 28288 "process"
2 3 15360 "switch"
3 0 15360 "numa"
3 1 15360 "numa"
3 2 15360 "switch"
3 3 28288 "process"
WANT
same "$TMP/want" "$TMP/got" "colocated links"

# Errors: one line, exit 2, before any transport starts.
available=$("$REFIT" run --help | sed -n 's/^transports in this build (--transport): //p')
if [ "$available" != "${available%nccl*}" ]; then
  expect_error_mpi 2 "$E nccl needs a GPU per rank, but the node has 8 GPUs for 10 ranks; use at most 8 ranks per node, or --transport ipc (ranks may share a GPU)" \
    "${MPIRUN[@]}" -np 10 "$REFIT" run --model tiny --trainer fsdp=2,dp=4 --rollout tp=2 \
    --transport nccl --topology-xml "$XML"
fi
expect_error_mpi 2 "$E --device 8 is out of range: the node has 8 GPUs" \
  "${RUN[@]}" --trainer fsdp=2 --rollout tp=2 --topology-xml "$XML" --device 8
echo '<topology><garbage' >"$TMP/bad.xml"
expect_error_mpi 2 "$E topology file '$TMP/bad.xml' does not load as hwloc XML" \
  "${RUN[@]}" --trainer fsdp=2 --rollout tp=2 --topology-xml "$TMP/bad.xml"
# HWLOC_XMLFILE goes to the ranks only: mpirun itself reads the machine with hwloc too.
expect_error_mpi 2 "$E topology file '$TMP/none.xml' cannot be read: No such file or directory" \
  "${MPIRUN[@]}" -x HWLOC_XMLFILE="$TMP/none.xml" -np 4 "$REFIT" run --model tiny \
  --transport mpi --trainer fsdp=2 --rollout tp=2
finish
