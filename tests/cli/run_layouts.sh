# `refit run` over the mpi transport: every mode and both plan kinds on the layouts users
# meet, each verified element by element and by checksum.
. "$(dirname "$0")/lib.sh"
DATA="$REFIT_SOURCE_DIR/tests/data"

# run NP PLAN ARGS...: all three modes in one job.
run() {
  local np=$1 plan=$2
  shift 2
  expect_exit 0 "${MPIRUN[@]}" -np "$np" "$REFIT" run --mode unfused,grouped,fused \
    --plan "$plan" --warmup 1 --iters 2 --bucket-size 16KiB "$@"
  expect_rows 3
}

for plan in p2p star; do
  run 4 $plan --model tiny --trainer fsdp=2 --rollout tp=2                     # fsdp -> tp
  run 6 $plan --model tiny --trainer fsdp=2,tp=2 --rollout tp=2                # fsdp x tp -> tp
  run 6 $plan --model tiny --trainer fsdp=2,tp=2 --rollout tp=2 --trainer-style fsdp2
  run 5 $plan --model tiny --trainer fsdp=1 --rollout tp=4                     # kv heads replicated
  run 6 $plan --model tiny --trainer fsdp=2 --rollout tp=2,dp=2                # two engines
  run 2 $plan --model tiny --trainer fsdp=2 --rollout tp=2 --placement colocated
  run 4 $plan --model tiny --trainer fsdp=2 --rollout tp=2 --trainer-order jax
  run 4 $plan --model "$DATA/tiny-gemma3.json" --trainer fsdp=2 --rollout tp=2 # tied, 1 kv head
  run 6 $plan --model "$DATA/tiny-gemma3.json" --trainer fsdp=2 --rollout tp=4
  run 3 $plan --model "$DATA/tiny-qwen2.json" --trainer fsdp=1 --rollout tp=2  # biases, fp32
  run 6 $plan --model "$DATA/tiny-qwen3.json" --trainer fsdp=2,tp=2 --rollout tp=2 # head norms
done
run 3 p2p --model tiny --trainer fsdp=1,tp=1,dp=2 --rollout tp=1               # trainer replicas
run 4 p2p --model tiny --trainer fsdp=2 --rollout tp=2 --trainer-style fsdp2 --dtype fp16

# One real-sized model: Llama-3.2-1B (2.47 GB), every element checked.
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --model llama-3.2-1b --trainer fsdp=2 --rollout tp=2 \
  --mode fused --warmup 0 --iters 1
expect_rows 1

# The shipped job configs parse and run (the demo's on the tiny model).
expect_exit 0 "${MPIRUN[@]}" -np 6 "$REFIT" run --config "$REFIT_SOURCE_DIR/configs/star-fan-in.json"
expect_rows 1
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --config "$REFIT_SOURCE_DIR/configs/demo.json" \
  --model tiny --output "$TMP/demo.h5"
expect_rows 3

# A bucket smaller than most pieces, and the whole model in one bucket.
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --model tiny --trainer fsdp=2 --rollout tp=2 \
  --mode unfused,grouped,fused --bucket-size 4KiB --iters 1
expect_rows 3
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --model tiny --trainer fsdp=2 --rollout tp=2 \
  --mode fused --bucket-size 0 --iters 1
expect_rows 1
finish
