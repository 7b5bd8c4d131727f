#!/usr/bin/env bash
# Batched pack/unpack copies on the GPU (issue 31): the GPU tests, then the same fused and
# grouped jobs over mpi with device memory (pack kernels into pinned staging) with this tree
# and with an earlier one, on one GPU, in one call: BEFORE_TAR names a `git archive
# --prefix=before/` tarball of the tree to compare with (it is built beside this one); without
# it only this tree's jobs run. Run as `OUT=DIR bench/batch_gpu.sh`.
cd "$(dirname "$0")/.."
OUT=${OUT:?}
. bench/gpu_env.sh
export REFIT_MODEL_DIR=$PWD/configs/models
build_gpu || exit 1
log "built after"
nvidia-smi --query-gpu=name,memory.total --format=csv >"$OUT/gpu.txt" 2>&1
BEFORE_TAR=${BEFORE_TAR:-}
versions=after
[ -n "$BEFORE_TAR" ] && versions="before after"
if [ -n "$BEFORE_TAR" ]; then
  (mkdir -p /tmp/b && tar -xf "$BEFORE_TAR" -C /tmp/b && cd /tmp/b/before &&
    cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >"$OUT/build-before.txt" 2>&1 &&
    cmake --build build-gpu -j8 --target refit >>"$OUT/build-before.txt" 2>&1 ||
    tail -20 "$OUT/build-before.txt") &
fi
(cd build-gpu && timeout 150 ctest -L gpu --output-on-failure) >"$OUT/ctest_gpu.txt" 2>&1
log "ctest -L gpu: exit $?"; grep -E "Test +#|tests passed|Failed" "$OUT/ctest_gpu.txt" | tee -a "$OUT/summary.txt"
wait
for v in $versions; do
  R=build-gpu/refit; [ $v = before ] && R=/tmp/b/before/build-gpu/refit
  JOB_TAIL=14 JOB_TIMEOUT=200 job moe-mpi-$v "${MPI[@]}" -np 3 $R run --model deepseek-v2-lite --trainer ep=2 \
    --rollout tp=1 --transport mpi --memory device --verify full --mode fused,grouped --warmup 1 --iters 3 --timeout 150
  JOB_TAIL=14 JOB_TIMEOUT=120 job llama-mpi-$v "${MPI[@]}" -np 2 $R run --model llama-3.1-8b --trainer fsdp=1 \
    --rollout tp=1 --transport mpi --memory device --verify full --mode fused,grouped --warmup 1 --iters 3 --timeout 100
done
JOB_TAIL=10 JOB_TIMEOUT=150 job hier-ipc "${MPI[@]}" -np 3 build-gpu/refit run --model llama-3.2-1b --trainer fsdp=1 \
  --rollout tp=1,dp=2 --transport ipc --verify full --mode grouped,fused --iters 3 --timeout 60
log done
