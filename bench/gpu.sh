#!/usr/bin/env bash
# GPU measurement in one go, as run on the lent H200 (see results/h200/README.md):
# build with the machine's CUDA, NCCL, Open MPI and HDF5, run the GPU tests, the kernel
# benchmark against the device-to-device copy, refit's GPU transports, and the PyTorch peer.
#
#   bench/gpu.sh OUTDIR
# Needs: CUDA toolkit with NCCL, cmake, mpicc, HDF5 and hwloc headers. jansson and xxhash
# headers may come from Debian's -dev packages unpacked (dpkg -x) into carry/deps; the peer
# script (../shared/peers/torch_colocated_refit.py) may be copied into carry/peer.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bench/gpu.sh OUTDIR}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }

# Headers that the machine lacks, from carry/deps (their .so links point at the system's).
if [ -d carry/deps/usr/include ]; then
  lib=carry/deps/usr/lib/x86_64-linux-gnu
  ln -sfn /usr/lib/x86_64-linux-gnu/libjansson.so.4 $lib/libjansson.so
  ln -sfn /usr/lib/x86_64-linux-gnu/libxxhash.so.0 $lib/libxxhash.so
  export PKG_CONFIG_SYSROOT_DIR=$PWD/carry/deps PKG_CONFIG_PATH=$PWD/$lib/pkgconfig
fi

log "machine"
{ nvidia-smi --query-gpu=name,pci.bus_id,memory.total --format=csv; nvidia-smi topo -m; nproc; } \
  >"$OUT/machine.txt" 2>&1
log "build"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >"$OUT/build.txt" 2>&1 &&
  cmake --build build-gpu -j"$(nproc)" >>"$OUT/build.txt" 2>&1 || { tail -40 "$OUT/build.txt"; exit 1; }
grep "refit: CUDA" "$OUT/build.txt" | tee -a "$OUT/summary.txt"

log "tests (gpu, unit)"
ctest --test-dir build-gpu -L "gpu|unit" --output-on-failure >"$OUT/ctest.txt" 2>&1
tail -5 "$OUT/ctest.txt" | tee -a "$OUT/summary.txt"

log "kernels vs device-to-device copy"
build-gpu/refit-gpu-bench >"$OUT/kernels.txt" 2>&1
tee -a "$OUT/summary.txt" <"$OUT/kernels.txt"

R=build-gpu/refit
MODEL=${MODEL:-llama-3.1-8b}
log "refit run: nccl (single-rank communicator), $MODEL"
$R run --model "$MODEL" --trainer fsdp=1 --rollout tp=1 --placement colocated --transport nccl \
  --mode grouped,fused --iters 5 --output "$OUT/h200.h5" >"$OUT/nccl.txt" 2>&1
tee -a "$OUT/summary.txt" <"$OUT/nccl.txt"

log "refit run: nccl watchdog (--inject stall on a 2-process job is refused by NCCL on 1 GPU)"
mpirun -np 2 $R run --model tiny --trainer fsdp=1 --rollout tp=1 --transport nccl --inject stall \
  --timeout 5 --iters 1 >"$OUT/stall.txt" 2>&1
echo "exit $?" >>"$OUT/stall.txt"
tail -8 "$OUT/stall.txt" | tee -a "$OUT/summary.txt"

if [ -f carry/peer/torch_colocated_refit.py ]; then
  log "peer: PyTorch colocated refit (two processes, one GPU)"
  timeout 300 python3 carry/peer/torch_colocated_refit.py 10 >"$OUT/peer.txt" 2>&1
  tee -a "$OUT/summary.txt" <"$OUT/peer.txt"
fi
