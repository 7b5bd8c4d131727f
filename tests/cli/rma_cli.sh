# `refit run --transport rma`: MPI-3 one-sided puts (--rma put) or gets (--rma get) between
# the ranks' windows. Every mode on p2p and fanout in both directions, star and hierarchical,
# a JAX-order trainer
# (transposed boxes as derived datatypes on one end), each verified element by element; the
# same per-tensor checksums as the mpi transport's run of the same job; each one-sided
# component of the local Open MPI (pt2pt, rdma, ucx, sm); a silent peer ends
# the job with the timeout line, a flipped byte on a forwarding rank is caught downstream.
. "$(dirname "$0")/lib.sh"

# The one-sided components this Open MPI has carry a job each below (the default choice where
# one is missing). What each can do here comes from a plain MPI program (osc_probe): a component
# that cannot make windows between these ranks (osc rdma and ucx where processes may not read
# each other's memory, as on the lent GPU machines) must have its job refused in one line.
oscs=" $(ompi_info 2>/dev/null | awk '/MCA osc:/ { print $3 }' | tr '\n' ' ') "
osc() {
  case "$oscs" in *" $1 "*) echo --mca osc "$1" ;; esac
}
# probe [MPIRUN OPTIONS]: "allocate ok|failed create ok|failed" under those options.
probe() {
  timeout 60 "${MPIRUN[@]}" "$@" -np 2 "$REFIT_OSC_PROBE" 2>/dev/null | tail -n 1
}
default_can=$(probe)
echo "osc probe, MPI's choice: $default_can"
[ "$default_can" = "allocate ok create ok" ] || [ "$default_can" = "allocate ok create failed" ] ||
  fail "the MPI library's own one-sided component cannot make windows here ($default_can)"
refused_line="refit: error: rma: this MPI's one-sided component cannot make a window between these ranks (MPI_Win_allocate: MPI_ERR_WIN: invalid window); choose another (Open MPI: --mca osc sm, pt2pt, rdma or ucx) or use --transport shm or mpi"

# run NP DIRECTION PLAN [MPIRUN OPTIONS --] ARGS...: all three modes in one job, no message sent.
run() {
  local np=$1 dir=$2 plan=$3 mpi=()
  shift 3
  while [ $# -gt 0 ] && [ "$1" != -- ] && [ "${1#--mca}" != "$1" ]; do
    mpi+=("$1" "$2" "$3")
    shift 3
  done
  if [ ${#mpi[@]} -gt 0 ] && [ "$(probe "${mpi[@]}")" = "allocate failed create failed" ]; then
    echo "${mpi[*]} makes no windows here: the job must be refused"
    expect_error_ranks 2 "$refused_line" "${MPIRUN[@]}" "${mpi[@]}" -np "$np" "$REFIT" run \
      --transport rma --rma "$dir" --plan "$plan" --warmup 0 --iters 2 "$@"
    return
  fi
  expect_exit 0 "${MPIRUN[@]}" "${mpi[@]}" -np "$np" "$REFIT" run --transport rma --rma "$dir" \
    --mode unfused,grouped,fused --plan "$plan" --warmup 0 --iters 2 --bucket-size 16KiB "$@"
  expect_rows 3
  grep -v '^#' "$TMP/out" | awk -v p="$plan" '$2 != p || $3 != "rma" || $6 != "0" { exit 1 }' ||
    fail "rma rows should name the plan and transport and send no messages: $(grep -v '^#' "$TMP/out")"
  grep -Eq '^# setup \(slowest rank, once per job\): .*, register [0-9]+\.[0-9] ms$' "$TMP/out" ||
    fail "no window creation in the setup line: $(grep '^# setup' "$TMP/out")"
}

# Puts of HF-order shards, recorded beside the mpi transport's run of the same job: the same
# per-tensor checksums. Gets of JAX-order shards (each box transposed on the trainer's end: an
# element-wise datatype there, rows on the rollout's; fast under osc pt2pt, which packs it),
# and puts of them (transposed into scratch first, then rows), here over fanout.
run 4 put p2p --model tiny --trainer fsdp=2 --rollout tp=2 --output "$TMP/rma.h5"
if command -v h5dump >/dev/null; then
  [ "$(attr "$TMP/rma.h5" 0000 transport)" = rma ] || fail "the rma run is not recorded as rma"
  [ -n "$(attr "$TMP/rma.h5" 0000 setup_register_s)" ] || fail "the rma run has no setup_register_s"
fi
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --transport mpi --model tiny --trainer fsdp=2 \
  --rollout tp=2 --mode unfused,grouped,fused --warmup 0 --iters 2 --bucket-size 16KiB \
  --output "$TMP/mpi.h5"
expect_rows 3
expect_exit 0 "$REFIT" verify "$TMP/rma.h5" --reference "$TMP/mpi.h5"
run 4 get p2p $(osc pt2pt) --model tiny --trainer fsdp=2 --rollout tp=2 --trainer-order jax
run 6 put fanout $(osc rdma) --model tiny --trainer fsdp=2 --rollout tp=2,dp=2 --mapped-rounds on \
  --trainer-order jax
run 6 get fanout $(osc ucx) --model tiny --trainer fsdp=2 --rollout tp=2,dp=2
# The other two plans: star (its reshape puts between trainer ranks, its transfer from the
# coupling buffers) and hierarchical (two domains on this host, each reached once, then
# forwarded inside it), every element checked.
run 4 put star --model tiny --trainer fsdp=2 --rollout tp=2
run 6 get hierarchical --model tiny --trainer fsdp=2 --rollout tp=1,dp=4 --domain-ranks 4 \
  --verify full
# osc sm makes windows only over memory it allocates: the arenas' windows are MPI's own.
case "$oscs" in
*" sm "*) run 4 put p2p $(osc sm) --model tiny --trainer fsdp=2 --rollout tp=2 ;;
esac
# osc rdma without a single-copy path between processes (Open MPI's shared-memory transport
# told not to use one; the lent GPU machines have none) makes no windows: refused in one line.
case "$oscs" in
*" rdma "*)
  [ "$(probe --mca osc rdma --mca btl_vader_single_copy_mechanism none)" = "allocate failed create failed" ] ||
    fail "osc rdma made windows without a single-copy path"
  run 4 put p2p --mca osc rdma --mca btl_vader_single_copy_mechanism none --model tiny \
    --trainer fsdp=2 --rollout tp=2
  ;;
esac

# --register tensor: a window per tensor of each arena (what registering tensor by tensor
# costs, in the setup step register), the same weights as the mpi transport's; no other
# transport registers memory, and says so.
# They need a component that makes windows over memory refit allocated (not osc sm): MPI's
# choice where it can, else the first of the others that can; where none can, the job is refused.
tensor_osc=()
if [ "$default_can" != "allocate ok create ok" ]; then
  for c in pt2pt rdma ucx; do
    if [ -n "$(osc "$c")" ] && [ "$(probe --mca osc "$c")" = "allocate ok create ok" ]; then
      tensor_osc=(--mca osc "$c")
      break
    fi
  done
fi
if [ "$default_can" = "allocate ok create ok" ] || [ ${#tensor_osc[@]} -gt 0 ]; then
  run 4 get p2p "${tensor_osc[@]}" --model tiny --trainer fsdp=2 --rollout tp=2 --register tensor \
    --output "$TMP/tensor.h5"
  expect_exit 0 "$REFIT" verify "$TMP/tensor.h5" --reference "$TMP/mpi.h5"
else
  expect_exit 3 "${MPIRUN[@]}" -np 4 "$REFIT" run --transport rma --model tiny --trainer fsdp=2 \
    --rollout tp=2 --register tensor --iters 1
  expect_grep "rma: MPI_Win_create failed" "$TMP/err"
fi
expect_error_mpi 2 "refit: error: option --register tensor: the shm transport registers no memory; use --transport rma, or leave --register out" \
  "${MPIRUN[@]}" -np 2 "$REFIT" run --transport shm --register tensor --model tiny \
  --trainer fsdp=1 --rollout tp=1 --iters 1

# A rank that never takes part: the others give up after --timeout (exit 3), no hang.
expect_exit 3 timeout 60 "${MPIRUN[@]}" -np 2 "$REFIT" run --transport rma --model tiny \
  --trainer fsdp=1 --rollout tp=1 --iters 1 --inject stall --timeout 1
grep '^refit' "$TMP/err" | sed 's/^refit\[[^]]*\]/refit/' | grep -v '^refit: warning: inject stall' >"$TMP/lines"
[ "$(cat "$TMP/lines")" = "refit: error: timed out after 1.0 s waiting for the sources' written notes; a peer rank is dead or stalled (raise --timeout if the job is just slow)" ] ||
  fail "the stalled job printed: $(cat "$TMP/lines")"

# A byte flipped on a forwarding rank reaches the replica it forwards to, as over mpi.
expect_exit 1 "${MPIRUN[@]}" -np 6 "$REFIT" run --transport rma --model tiny --trainer fsdp=2 \
  --rollout tp=2,dp=2 --plan fanout --mode fused --iters 1 --inject corrupt
grep '^refit' "$TMP/err" | sed 's/^refit\[[^]]*\]/refit/' | sort -u >"$TMP/lines"
cat >"$TMP/want" <<'EOF'
refit: error: verify: checksum of model.embed_tokens.weight differs: trainer 01a4d8de647adec3, rollout 01a4d8ad2350b25d
refit: error: verify: model.embed_tokens.weight on rollout rank 1: element 16384 (row 256, col 0) is 0xbcb1, expected 0xbceb
refit: error: verify: model.embed_tokens.weight on rollout rank 3: element 16384 (row 256, col 0) is 0xbcb1, expected 0xbceb (received from rollout rank 1 via forwarding)
refit: warning: inject corrupt: flipped bits of model.embed_tokens.weight element (256, 0) on rollout rank 1, before forwarding it
EOF
diff "$TMP/want" "$TMP/lines" >"$TMP/diff" || fail "corrupt forward over rma: $(cat "$TMP/diff")"

# Delta refits are not sent one-sided yet: one line.
expect_exit 2 "${MPIRUN[@]}" -np 4 "$REFIT" run --transport rma --model tiny --trainer fsdp=2 \
  --rollout tp=2 --delta auto --iters 1
expect_grep "error: --delta auto: --transport rma is not supported with delta refits yet; use --transport mpi or shm, or --delta off" "$TMP/err"
finish
