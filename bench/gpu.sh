#!/usr/bin/env bash
# GPU measurement in one go, as run on the lent H200 (see results/h200/README.md):
# build with the machine's CUDA, NCCL, Open MPI and HDF5, run the GPU tests, the kernel
# benchmark against the device-to-device copy, refit's GPU transports, and the PyTorch peer.
#
#   bench/gpu.sh OUTDIR        TESTS=LABELS: the ctest labels to run first (default gpu|unit;
#                              none for no tests); CALIBRATE=0 leaves out the --calibrate job
#                              (the peer's device copy is then the limit); MPI_ITERS (2) for
#                              the 16 GB host-staged mpi rows
# Needs: CUDA toolkit with NCCL, cmake, mpicc, HDF5 and hwloc headers. jansson and xxhash
# headers may come from Debian's -dev packages unpacked (dpkg -x) into carry/deps; the peer
# script (../shared/peers/torch_colocated_refit.py) may be copied into carry/peer.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bench/gpu.sh OUTDIR}
. bench/gpu_env.sh

log "machine"
# What `refit run`'s placement lines are checked against: the driver's view of the GPU (bus
# id, CPU and NUMA affinity) and the kernel's (sysfs local_cpulist and numa_node).
{
  nvidia-smi --query-gpu=name,pci.bus_id,memory.total --format=csv
  nvidia-smi topo -m
  nproc
  for bus in $(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader); do
    dev=/sys/bus/pci/devices/$(echo "${bus#0000}" | tr 'A-F' 'a-f')
    echo "sysfs $dev: local_cpulist $(cat "$dev/local_cpulist") numa_node $(cat "$dev/numa_node")"
  done
} >"$OUT/machine.txt" 2>&1
build_gpu || exit 1
grep "refit: CUDA" "$OUT/build.txt" | tee -a "$OUT/summary.txt"

if [ "${TESTS:-gpu|unit}" != none ]; then
  log "tests (${TESTS:-gpu|unit})"
  ctest --test-dir build-gpu -L "${TESTS:-gpu|unit}" --output-on-failure >"$OUT/ctest.txt" 2>&1
  grep -E "Test +#|tests passed" "$OUT/ctest.txt" | tee -a "$OUT/summary.txt"
fi

log "kernels vs device-to-device copy"
build-gpu/refit-gpu-bench >"$OUT/kernels.txt" 2>&1
tee -a "$OUT/summary.txt" <"$OUT/kernels.txt"

# The peer first: its plain device-to-device copy of the 16.06 GB is the limit every row is
# compared with when the job is run without --calibrate (CALIBRATE=0).
if [ -f carry/peer/torch_colocated_refit.py ]; then
  log "peer: PyTorch colocated refit (two processes, one GPU)"
  timeout 300 python3 carry/peer/torch_colocated_refit.py 10 >"$OUT/peer.txt" 2>&1
  tee -a "$OUT/summary.txt" <"$OUT/peer.txt"
fi

R=build-gpu/refit
MODEL=${MODEL:-llama-3.1-8b}
H5="$OUT/h200.h5"
# One refit job: its output to a file and the summary, its exit code beside it. --warmup 0:
# each job's first timed iteration is its cold one, which bench/cold.py prints beside the
# job's setup and the steady state (the median of the iterations).
JOB_TAIL=12 JOB_TIMEOUT=300
ONE=(--model "$MODEL" --trainer fsdp=1 --rollout tp=1 --warmup 0 --iters 10 --output "$H5")

job placement $R topo --trainer fsdp=1 --rollout tp=1 --transport ipc
job ipc "${MPI[@]}" -np 2 $R run "${ONE[@]}" --transport ipc --mode grouped,fused
if [ "${CALIBRATE:-1}" != 0 ]; then
  job ipc-limits "${MPI[@]}" -np 2 $R run "${ONE[@]}" --iters 5 --transport ipc --mode fused \
    --calibrate
fi
job ipc-kernel "${MPI[@]}" -np 2 $R run "${ONE[@]}" --transport ipc --mode grouped,fused \
  --copy kernel
job ipc-jax "${MPI[@]}" -np 2 $R run "${ONE[@]}" --transport ipc --mode grouped,fused \
  --trainer-order jax
job ipc-unfused "${MPI[@]}" -np 2 $R run "${ONE[@]}" --transport ipc --mode unfused
job ipc-bucket0 "${MPI[@]}" -np 2 $R run "${ONE[@]}" --transport ipc --mode grouped --bucket-size 0
job ipc-one-process "${MPI[@]}" -np 1 $R run "${ONE[@]}" --placement colocated --transport ipc \
  --mode grouped,fused
job nccl "${MPI[@]}" -np 1 $R run "${ONE[@]}" --placement colocated --transport nccl \
  --mode grouped,fused
job fp8-ipc "${MPI[@]}" -np 2 $R run "${ONE[@]}" --transport ipc --mode fused \
  --rollout-dtype fp8 --verify checksum
job fp8-nccl "${MPI[@]}" -np 1 $R run "${ONE[@]}" --placement colocated --transport nccl \
  --mode fused --rollout-dtype fp8 --verify checksum
job mpi-pinned "${MPI[@]}" -np 2 $R run "${ONE[@]}" --iters "${MPI_ITERS:-2}" --transport mpi \
  --memory device --mode grouped,fused
job ipc-stall "${MPI[@]}" -np 2 $R run --model tiny --trainer fsdp=1 --rollout tp=1 \
  --transport ipc --inject stall --timeout 5 --iters 1

log "cold start beside the steady state"
python3 bench/cold.py "$H5" >"$OUT/cold.txt" 2>&1
tee -a "$OUT/summary.txt" <"$OUT/cold.txt"
log "done"
