#!/usr/bin/env bash
# Host benchmark: refit's three modes over the mpi transport, for a sweep of bucket sizes,
# next to the limits measured in the same run between the same ranks for the same bytes:
# a plain MPI exchange of every pair's bytes (refit-limits), OSU's osu_bw when installed, and
# memcpy. Prints each mode's aggregate GB/s and its ratio to the plain MPI transfer.
#
#   bench/host.sh [refit run options...]      (default: the demo job, Llama-3.2-1B 2 -> 2)
# Environment: BUILD (build dir, default build), NP (ranks), BUCKETS (sizes to sweep).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
NP=${NP:-4}
BUCKETS=${BUCKETS:-"64MiB 256MiB 1GiB 0"}
JOB=("$@")
[ ${#JOB[@]} -gt 0 ] || JOB=(--model llama-3.2-1b --trainer fsdp=2 --rollout tp=2)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(mpirun --oversubscribe -np "$NP")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "# refit host benchmark: ${JOB[*]} on $NP ranks, $(nproc) cores, $(hostname)"
"${MPIRUN[@]}" "$BUILD/refit-limits" run "${JOB[@]}" --warmup 1 --iters 5 >"$out/limits"
mpi_gbs=$(awk '$2 == "mpi" { print $8 }' "$out/limits")
memcpy_gbs=$(awk '$2 == "memcpy" { print $8 }' "$out/limits")
sed 's/^/# /' "$out/limits"
if command -v osu_bw >/dev/null 2>&1; then
  osu=$(mpirun --oversubscribe -np 2 osu_bw -m 268435456:268435456 | awk '!/^#/ { print $2 / 1000 }')
  echo "# limit osu_bw (2 ranks, 256 MiB messages) GB/s $osu"
fi
printf '%-8s %10s %12s %10s %10s %12s\n' mode bucket median_ms aggGB/s vs_mpi vs_memcpy
for bucket in $BUCKETS; do
  "${MPIRUN[@]}" "$BUILD/refit" run "${JOB[@]}" --mode unfused,grouped,fused --warmup 1 --iters 5 \
    --bucket-size "$bucket" --verify checksum >"$out/run"
  grep -v '^#' "$out/run" | while read -r mode plan transport bytes pieces msgs bkt iters med p99 \
    algbw aggbw rest; do
    awk -v m="$mode" -v b="$bucket" -v t="$med" -v g="$aggbw" -v l="$mpi_gbs" -v c="$memcpy_gbs" \
      'BEGIN { printf "%-8s %10s %12s %10s %10.2f %12.2f\n", m, b, t, g, g / l, g / c }'
  done
done
