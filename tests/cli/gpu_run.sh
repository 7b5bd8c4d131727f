# The GPU data plane end to end: the ipc transport (two or more processes on one GPU), mpi
# staged through pinned host memory, and what NCCL allows on the GPUs present. Skips (77)
# without a GPU or in a build without CUDA, so CI reports it as skipped, never as passed.
. "$(dirname "$0")/lib.sh"

if ! "$REFIT" run --help | grep -q '^transports in this build (--transport): .*ipc'; then
  echo "skip: this build has no CUDA (no ipc transport)"
  exit 77
fi
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if [ "$gpus" -eq 0 ]; then
  echo "skip: no GPU visible (nvidia-smi -L lists none)"
  exit 77
fi
RUN=("${MPIRUN[@]}" -x NCCL_NVLS_ENABLE=0)

# ipc between two processes on one GPU: every mode verifies. HF order pulls (the rollout
# reads the trainer's memory), JAX order pushes (the trainer writes into the rollout's).
expect_exit 0 "${RUN[@]}" -np 2 "$REFIT" run --model tiny --trainer fsdp=1 --rollout tp=1 \
  --transport ipc --mode unfused,grouped,fused --bucket-size 64KiB
expect_rows 3
expect_grep "transport ipc (weights in device memory)" "$TMP/out"
expect_exit 0 "${RUN[@]}" -np 2 "$REFIT" run --model tiny --trainer fsdp=1 --rollout tp=1 \
  --transport ipc --mode unfused,grouped,fused --bucket-size 64KiB --trainer-order jax
expect_rows 3
# --transport auto, the default, takes ipc for GPU weights on one node (host weights: shm).
expect_exit 0 "${RUN[@]}" -np 2 "$REFIT" run --model tiny --trainer fsdp=1 --rollout tp=1 \
  --mode grouped
expect_rows 1
expect_grep "# transport: ipc (auto: GPU weights, both ranks on one node)" "$TMP/out"
expect_exit 0 "${RUN[@]}" -np 2 "$REFIT" run --model tiny --trainer fsdp=1 --rollout tp=1 \
  --mode grouped --memory host
expect_rows 1
expect_grep "# transport: shm (auto: host weights, both ranks on one node)" "$TMP/out"
# rma on a GPU machine: host weights unless asked, every mode verified; --memory device is
# refused in one line, which names what to install where the MPI is not CUDA-aware (the lent
# H200's Open MPI 4.1.6) and says this build moves host memory only where it is.
expect_exit 0 "${RUN[@]}" -np 4 "$REFIT" run --model tiny --trainer fsdp=2 --rollout tp=2 \
  --transport rma --mode unfused,grouped,fused --verify full
expect_rows 3
expect_grep "transport rma (weights in host memory)" "$TMP/out"
want="refit: error: the rma transport moves host memory only: this MPI is not CUDA-aware (MPIX_Query_cuda_support() is 0); install an Open MPI built --with-cuda (and UCX) for GPU windows, or use --memory host"
ompi_info --parsable --all 2>/dev/null | grep -q 'mpi_built_with_cuda_support:value:true' &&
  want="refit: error: the rma transport moves host memory only in this build of refit, though this MPI is CUDA-aware; use --memory host, or --transport ipc or nccl for GPU weights"
expect_error_ranks 2 "$want" "${RUN[@]}" -np 2 "$REFIT" run --model tiny --trainer fsdp=1 \
  --rollout tp=1 --transport rma --memory device
expect_exit 0 "${RUN[@]}" -np 4 "$REFIT" run --model tiny --trainer fsdp=2 --rollout tp=2 \
  --transport ipc --plan star --mode grouped,fused --trainer-order jax
expect_rows 2
expect_exit 0 "${RUN[@]}" -np 2 "$REFIT" run --model tiny --trainer fsdp=2 --rollout tp=2 \
  --placement colocated --transport ipc --mode fused --trainer-order jax
expect_rows 1

# Four processes sharing the GPU: a 2:2 p2p plan, the star plan (its reshape stage pulls
# between trainer ranks, its transfer from the coupling buffers) and a colocated job.
expect_exit 0 "${RUN[@]}" -np 4 "$REFIT" run --model tiny --trainer fsdp=2 --rollout tp=2 \
  --transport ipc --mode unfused,grouped,fused --bucket-size 64KiB
expect_rows 3
expect_exit 0 "${RUN[@]}" -np 4 "$REFIT" run --model tiny --trainer fsdp=2 --rollout tp=2 \
  --transport ipc --plan star --mode grouped,fused
expect_rows 2
expect_exit 0 "${RUN[@]}" -np 2 "$REFIT" run --model tiny --trainer fsdp=2 --rollout tp=2 \
  --placement colocated --transport ipc --mode grouped,fused
expect_rows 2
# The other --copy paths on a 2:2 refit, every element checked (the jobs above take auto's
# choice): kernels alone, and the copy engines for every run and 2-D box, through the peer's
# mapping too.
for copy in kernel engine; do
  expect_exit 0 "${RUN[@]}" -np 4 "$REFIT" run --model tiny --trainer fsdp=2 --rollout tp=2 \
    --transport ipc --mode unfused,grouped,fused --copy $copy --verify full
  expect_rows 3
done

# Mixture of experts on the GPU: DeepSeek-style (MLA, shared experts, fp32 router bias among
# bf16) with trainer ep and pp into rollout ep over ipc, both orders, and colocated nccl.
DS="$REFIT_SOURCE_DIR/tests/data/tiny-deepseek.json"
MIX="$REFIT_SOURCE_DIR/tests/data/tiny-mixtral.json"
expect_exit 0 "${RUN[@]}" -np 6 "$REFIT" run --model "$DS" --trainer ep=2,pp=2 --rollout tp=2,ep \
  --transport ipc --mode unfused,grouped,fused --bucket-size 16KiB --verify full
expect_rows 3
expect_exit 0 "${RUN[@]}" -np 4 "$REFIT" run --model "$MIX" --trainer ep=2 --rollout tp=2,ep \
  --transport ipc --mode unfused,grouped,fused --trainer-order jax --verify full
expect_rows 3
expect_exit 0 "${RUN[@]}" -np 4 "$REFIT" run --model "$DS" --trainer fsdp=2,ep=2 --placement colocated \
  --rollout tp=4,ep --transport mpi --memory device --mode unfused,grouped,fused --verify full
expect_rows 3
expect_exit 0 "${RUN[@]}" -np 1 "$REFIT" run --model "$DS" --trainer fsdp=1 --rollout tp=1 \
  --placement colocated --transport nccl --mode unfused,grouped,fused --verify full
expect_rows 3
# Fanout over ipc: two replicas on the GPU forward to each other (pull in HF order, push in
# JAX order), and a byte flipped before forwarding is caught on the replica it reached; with
# the forward steps after the transfer (auto, on one GPU) and in rounds (--mapped-rounds on).
for rounds in auto on; do
  expect_exit 0 "${RUN[@]}" -np 4 "$REFIT" run --model tiny --trainer fsdp=2 --rollout tp=1,dp=2 \
    --transport ipc --plan fanout --mode unfused,grouped,fused --bucket-size 64KiB \
    --mapped-rounds $rounds
  expect_rows 3
  expect_exit 0 "${RUN[@]}" -np 4 "$REFIT" run --model tiny --trainer fsdp=2 --rollout tp=1,dp=2 \
    --transport ipc --plan fanout --mode grouped,fused --trainer-order jax --bucket-size 64KiB \
    --mapped-rounds $rounds
  expect_rows 2
  expect_exit 1 "${RUN[@]}" -np 4 "$REFIT" run --model tiny --trainer fsdp=2 --rollout tp=1,dp=2 \
    --transport ipc --plan fanout --mode fused --inject corrupt --iters 1 --bucket-size 64KiB \
    --mapped-rounds $rounds
  expect_grep "on rollout rank 1: element 0 (row 0, col 0)" "$TMP/err"
  expect_grep "(received from rollout rank 0 via forwarding)" "$TMP/err"
done

# A flipped byte is caught; a silent trainer ends every rank within the timeout.
expect_exit 1 "${RUN[@]}" -np 2 "$REFIT" run --model tiny --trainer fsdp=1 --rollout tp=1 \
  --transport ipc --inject corrupt --iters 1
expect_grep "# FAIL: verification failed in mode grouped" "$TMP/out"
start=$(date +%s)
expect_exit 3 timeout 60 "${RUN[@]}" -np 2 "$REFIT" run --model tiny --trainer fsdp=1 \
  --rollout tp=1 --transport ipc --inject stall --timeout 2 --iters 1
elapsed=$(($(date +%s) - start))
[ "$elapsed" -lt 30 ] || fail "the stalled ipc run took ${elapsed}s to end"
expect_grep "timed out after 2.0 s waiting for the sources' ready notes" "$TMP/err"
expect_exit 3 timeout 60 "${RUN[@]}" -np 2 "$REFIT" run --model tiny --trainer fsdp=1 \
  --rollout tp=1 --transport ipc --inject stall --timeout 2 --iters 1 --trainer-order jax
expect_grep "timed out after 2.0 s waiting for the sources' written notes" "$TMP/err"

# fp8 rollouts on the GPU: the kernels quantize (fp8_cuda.cu) and every fp8 byte and scale is
# checked against the CPU reference. ipc in HF order quantizes each source's whole blocks out of
# its mapped memory; JAX order lands the trainer's bf16 and quantizes at the destination; star
# and fanout (a replica forwards fp8 and scales); a MoE from trainer ep and pp; colocated nccl.
small="$REFIT_SOURCE_DIR/tests/data/fp8-small.json"
fp8_rows() {
  expect_grep "# PASS" "$TMP/out"
  [ "$(grep -c "  full            0        ok" "$TMP/out")" -eq "$1" ] ||
    fail "fp8: not $1 verified rows: $(cat "$TMP/out")"
}
for order in hf jax; do
  expect_exit 0 "${RUN[@]}" -np 4 "$REFIT" run --model "$small" --trainer fsdp=2 --rollout tp=2 \
    --trainer-order $order --rollout-dtype fp8 --transport ipc --mode unfused,grouped,fused \
    --iters 2 --verify full --output "$TMP/fp8-ipc-$order.h5"
  expect_grep "transport ipc (weights in device memory)" "$TMP/out"
  fp8_rows 3
done
expect_exit 0 "${RUN[@]}" -np 4 "$REFIT" run --model "$small" --trainer fsdp=2 --rollout tp=2 \
  --plan star --rollout-dtype fp8 --transport ipc --mode grouped,fused --verify full
fp8_rows 2
expect_exit 0 "${RUN[@]}" -np 4 "$REFIT" run --model "$small" --trainer fsdp=2 --rollout tp=1,dp=2 \
  --plan fanout --rollout-dtype fp8 --transport ipc --mode unfused,grouped,fused --verify full
fp8_rows 3
expect_exit 0 "${RUN[@]}" -np 6 "$REFIT" run --model "$REFIT_SOURCE_DIR/tests/data/fp8-moe.json" \
  --trainer fsdp=1,ep=2,pp=2 --rollout tp=2,ep --rollout-dtype fp8 --transport ipc \
  --mode unfused,grouped,fused --verify full
fp8_rows 3
expect_exit 0 "${RUN[@]}" -np 1 "$REFIT" run --model "$small" --trainer fsdp=1 --rollout tp=1 \
  --placement colocated --rollout-dtype fp8 --transport nccl --mode unfused,grouped,fused \
  --verify full --output "$TMP/fp8-nccl.h5"
fp8_rows 3
# The GPU's bytes are the block-FP8 checkpoint's (the CPU reference's) and the host run's.
expect_exit 0 "$REFIT" checkpoint --model "$small" --dtype fp8 --checkpoint "$TMP/small-fp8.safetensors"
for run in fp8-ipc-hf fp8-ipc-jax fp8-nccl; do
  expect_exit 0 "$REFIT" verify "$TMP/$run.h5" --checkpoint "$TMP/small-fp8.safetensors"
  expect_grep "against $TMP/small-fp8.safetensors: 0 of 12 tensors differ" "$TMP/out"
done
# fp8-ue8m0 (power-of-two scales) through the same kernels over ipc (JAX order: quantized at the
# destination) and colocated nccl; its bytes and scales are its checkpoint's (the CPU reference).
expect_exit 0 "${RUN[@]}" -np 4 "$REFIT" run --model "$small" --trainer fsdp=2 --rollout tp=2 \
  --trainer-order jax --rollout-dtype fp8-ue8m0 --transport ipc --mode grouped,fused \
  --verify full --output "$TMP/ue8m0-ipc.h5"
fp8_rows 2
expect_exit 0 "${RUN[@]}" -np 1 "$REFIT" run --model "$small" --trainer fsdp=1 --rollout tp=1 \
  --placement colocated --rollout-dtype fp8-ue8m0 --transport nccl --mode fused \
  --verify full --output "$TMP/ue8m0-nccl.h5"
fp8_rows 1
expect_exit 0 "$REFIT" checkpoint --model "$small" --dtype fp8-ue8m0 --checkpoint "$TMP/small-ue8m0.safetensors"
for run in ue8m0-ipc ue8m0-nccl; do
  expect_exit 0 "$REFIT" verify "$TMP/$run.h5" --checkpoint "$TMP/small-ue8m0.safetensors"
  expect_grep "against $TMP/small-ue8m0.safetensors: 0 of 12 tensors differ" "$TMP/out"
done
# mxfp8 (1x32 blocks, E8M0 scales) through the 1-D kernel: ipc in both orders (quantized at the
# source, and at the destination), fanout, colocated nccl, and mxfp8-floor; every run's bytes
# and scales are its checkpoint's.
expect_exit 0 "$REFIT" checkpoint --model "$small" --dtype mxfp8 --checkpoint "$TMP/small-mxfp8.safetensors"
for order in hf jax; do
  expect_exit 0 "${RUN[@]}" -np 4 "$REFIT" run --model "$small" --trainer fsdp=2 --rollout tp=2 \
    --trainer-order $order --rollout-dtype mxfp8 --transport ipc --mode unfused,grouped,fused \
    --verify full --output "$TMP/mxfp8-ipc-$order.h5"
  fp8_rows 3
done
expect_exit 0 "${RUN[@]}" -np 4 "$REFIT" run --model "$small" --trainer fsdp=2 --rollout tp=1,dp=2 \
  --plan fanout --rollout-dtype mxfp8 --transport ipc --mode grouped,fused --verify full \
  --output "$TMP/mxfp8-fanout.h5"
fp8_rows 2
expect_exit 0 "${RUN[@]}" -np 1 "$REFIT" run --model "$small" --trainer fsdp=1 --rollout tp=1 \
  --placement colocated --rollout-dtype mxfp8 --transport nccl --mode grouped,fused \
  --verify full --output "$TMP/mxfp8-nccl.h5"
fp8_rows 2
for run in mxfp8-ipc-hf mxfp8-ipc-jax mxfp8-fanout mxfp8-nccl; do
  expect_exit 0 "$REFIT" verify "$TMP/$run.h5" --checkpoint "$TMP/small-mxfp8.safetensors"
  expect_grep "against $TMP/small-mxfp8.safetensors: 0 of 12 tensors differ" "$TMP/out"
done
expect_exit 0 "$REFIT" checkpoint --model "$small" --dtype mxfp8-floor --checkpoint "$TMP/small-mxfp8-floor.safetensors"
expect_exit 0 "${RUN[@]}" -np 2 "$REFIT" run --model "$small" --trainer fsdp=1 --rollout tp=1 \
  --rollout-dtype mxfp8-floor --transport ipc --mode fused --verify full --output "$TMP/floor.h5"
fp8_rows 1
expect_exit 0 "$REFIT" verify "$TMP/floor.h5" --checkpoint "$TMP/small-mxfp8-floor.safetensors"
expect_grep "0 of 12 tensors differ" "$TMP/out"
# The 4-bit formats on the GPU (mxfp4, mxfp4-floor, nvfp4): packed e2m1 bytes from the 1-D
# kernel, nvfp4's scales written into their 128x4 tiles (and copied tile to tile by fanout's
# forwards), its globals from the shards' device maxima and one allreduce; ipc in HF order
# (quantized at the source) and JAX order (at the destination), fanout, colocated nccl, each
# checked in full on the GPU and against the format's checkpoint.
for f in mxfp4 nvfp4; do
  expect_exit 0 "$REFIT" checkpoint --model "$small" --dtype $f --checkpoint "$TMP/small-$f.safetensors"
  for order in hf jax; do
    expect_exit 0 "${RUN[@]}" -np 4 "$REFIT" run --model "$small" --trainer fsdp=2 --rollout tp=2 \
      --trainer-order $order --rollout-dtype $f --transport ipc --mode unfused,grouped,fused \
      --iters 2 --verify full --output "$TMP/$f-ipc-$order.h5"
    expect_grep "transport ipc (weights in device memory)" "$TMP/out"
    fp8_rows 3
  done
  expect_exit 0 "${RUN[@]}" -np 4 "$REFIT" run --model "$small" --trainer fsdp=2 --rollout tp=1,dp=2 \
    --plan fanout --rollout-dtype $f --transport ipc --mode grouped,fused --verify full \
    --output "$TMP/$f-fanout.h5"
  fp8_rows 2
  expect_exit 0 "${RUN[@]}" -np 1 "$REFIT" run --model "$small" --trainer fsdp=1 --rollout tp=1 \
    --placement colocated --rollout-dtype $f --transport nccl --mode grouped,fused \
    --verify full --output "$TMP/$f-nccl.h5"
  fp8_rows 2
  for run in $f-ipc-hf $f-ipc-jax $f-fanout $f-nccl; do
    expect_exit 0 "$REFIT" verify "$TMP/$run.h5" --checkpoint "$TMP/small-$f.safetensors"
    expect_grep "against $TMP/small-$f.safetensors: 0 of 12 tensors differ" "$TMP/out"
  done
done
# The GPU's 4-bit runs agree with the host's, checksum for checksum.
expect_exit 0 "${RUN[@]}" -np 4 "$REFIT" run --model "$small" --trainer fsdp=2 --rollout tp=2 \
  --rollout-dtype nvfp4 --transport mpi --memory host --iters 1 --output "$TMP/nvfp4-host.h5"
expect_exit 0 "$REFIT" verify "$TMP/nvfp4-ipc-hf.h5" --reference "$TMP/nvfp4-host.h5"
# A MoE with MLA in nvfp4 on the GPU: one global per expert, tiles per expert.
expect_exit 0 "$REFIT" checkpoint --model tiny-deepseek --dtype nvfp4 --checkpoint "$TMP/ds-nvfp4.safetensors"
expect_exit 0 "${RUN[@]}" -np 4 "$REFIT" run --model tiny-deepseek --trainer fsdp=1,ep=2 --rollout tp=2,ep \
  --rollout-dtype nvfp4 --transport ipc --mode grouped,fused --iters 1 --verify full \
  --output "$TMP/ds-nvfp4-ipc.h5"
fp8_rows 2
expect_exit 0 "$REFIT" verify "$TMP/ds-nvfp4-ipc.h5" --checkpoint "$TMP/ds-nvfp4.safetensors"
expect_grep "against $TMP/ds-nvfp4.safetensors: 0 of 67 tensors differ" "$TMP/out"
expect_exit 0 "$REFIT" checkpoint --model "$small" --dtype mxfp4-floor --checkpoint "$TMP/small-mxfp4-floor.safetensors"
expect_exit 0 "${RUN[@]}" -np 2 "$REFIT" run --model "$small" --trainer fsdp=1 --rollout tp=1 \
  --rollout-dtype mxfp4-floor --transport ipc --mode fused --verify full --output "$TMP/fp4-floor.h5"
fp8_rows 1
expect_exit 0 "$REFIT" verify "$TMP/fp4-floor.h5" --checkpoint "$TMP/small-mxfp4-floor.safetensors"
expect_grep "0 of 12 tensors differ" "$TMP/out"
# A block-FP8 checkpoint as the trainer's weights on the GPU: shards that cut blocks (fp8-cut,
# fsdp=4) over ipc in both orders, and colocated nccl; every byte and scale is the file's.
cut="$REFIT_SOURCE_DIR/tests/data/fp8-cut.json"
expect_exit 0 "$REFIT" checkpoint --model "$cut" --dtype fp8 --seed 5 --checkpoint "$TMP/cut-fp8.safetensors"
for order in hf jax; do
  expect_exit 0 "${RUN[@]}" -np 6 "$REFIT" run --model "$cut" --trainer fsdp=4 --rollout tp=2 \
    --trainer-order $order --rollout-dtype fp8 --checkpoint "$TMP/cut-fp8.safetensors" \
    --transport ipc --mode unfused,grouped,fused --verify full
  fp8_rows 3
done
expect_exit 0 "${RUN[@]}" -np 1 "$REFIT" run --model "$cut" --trainer fsdp=1 --rollout tp=1 \
  --placement colocated --rollout-dtype fp8 --checkpoint "$TMP/cut-fp8.safetensors" \
  --transport nccl --mode grouped,fused --verify full
fp8_rows 2
expect_exit 0 "${RUN[@]}" -np 4 "$REFIT" run --model "$small" --trainer fsdp=2 --rollout tp=2 \
  --rollout-dtype fp8 --transport mpi --memory host --iters 1 --output "$TMP/fp8-host.h5"
expect_exit 0 "$REFIT" verify "$TMP/fp8-ipc-hf.h5" --reference "$TMP/fp8-host.h5"
expect_grep "# PASS" "$TMP/out"

# mpi with the weights on the GPU stages through pinned host memory, in every mode.
expect_exit 0 "${RUN[@]}" -np 4 "$REFIT" run --model tiny --trainer fsdp=2 --rollout tp=2 \
  --transport mpi --memory device --mode unfused,grouped,fused --bucket-size 64KiB
expect_rows 3
expect_grep "transport mpi (weights in device memory)" "$TMP/out"

# NCCL: a single-rank communicator always; two ranks need two GPUs (NCCL refuses two ranks
# on one GPU), and then a silent peer must end the job through the watchdog.
expect_exit 0 "${RUN[@]}" -np 1 "$REFIT" run --model tiny --trainer fsdp=1 --rollout tp=1 \
  --placement colocated --transport nccl --mode unfused,grouped,fused
expect_rows 3
# --calibrate beside an nccl run measures the plain NCCL send/recv of the same bytes too.
expect_exit 0 "${RUN[@]}" -np 1 "$REFIT" run --model tiny --trainer fsdp=1 --rollout tp=1 \
  --placement colocated --transport nccl --mode grouped --calibrate --iters 2
grep -q '^limits: memcpy .*, device copy .*, mpi .*, nccl .*; grouped at .* of nccl$' "$TMP/out" ||
  fail "the nccl run's limits line: $(grep '^limits' "$TMP/out")"
if [ "$gpus" -ge 2 ]; then
  start=$(date +%s)
  expect_exit 3 timeout 90 "${RUN[@]}" -np 2 "$REFIT" run --model tiny --trainer fsdp=1 \
    --rollout tp=1 --transport nccl --inject stall --timeout 3 --iters 1
  elapsed=$(($(date +%s) - start))
  [ "$elapsed" -lt 45 ] || fail "the stalled nccl run took ${elapsed}s to end"
else
  expect_exit 2 "${RUN[@]}" -np 2 "$REFIT" run --model tiny --trainer fsdp=1 --rollout tp=1 \
    --transport nccl
  expect_grep "error: nccl needs a GPU per rank, but the node has $gpus GPU for 2 ranks" "$TMP/err"
fi
finish
