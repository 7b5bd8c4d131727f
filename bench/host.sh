#!/usr/bin/env bash
# Host benchmark: refit's three modes over the host transports (mpi: messages; shm: shared
# memory mapped between the ranks), for a sweep of bucket sizes, next to the limits measured
# in the same run between the same ranks for the same bytes: a plain MPI exchange of every
# pair's bytes (refit-limits), OSU's osu_bw when installed, and memcpy. Each job runs REPS
# times; prints each mode's median time over the jobs, their spread (slowest / fastest), the
# aggregate GB/s of the median and its ratio to the plain MPI exchange and to memcpy (limit
# time / refit time: 1.00 is as fast as the limit).
#
#   bench/host.sh [refit run options...]      (default: the demo job, Llama-3.2-1B 2 -> 2)
# Environment: BUILD (build dir, default build), NP (ranks), BUCKETS (sizes to sweep),
# TRANSPORTS (default "mpi shm"), REPS (jobs per point, default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
NP=${NP:-4}
BUCKETS=${BUCKETS:-"64MiB 256MiB 1GiB 0"}
TRANSPORTS=${TRANSPORTS:-"mpi shm"}
REPS=${REPS:-3}
JOB=("$@")
[ ${#JOB[@]} -gt 0 ] || JOB=(--model llama-3.2-1b --trainer fsdp=2 --rollout tp=2)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(mpirun --oversubscribe -np "$NP")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "# refit host benchmark: ${JOB[*]} on $NP ranks, $(nproc) cores, $(hostname)"
"${MPIRUN[@]}" "$BUILD/refit-limits" run "${JOB[@]}" --warmup 1 --iters 5 >"$out/limits"
mpi_ms=$(awk '$2 == "mpi" { print $6 }' "$out/limits")
memcpy_ms=$(awk '$2 == "memcpy" { print $6 }' "$out/limits")
sed 's/^/# /' "$out/limits"
if command -v osu_bw >/dev/null 2>&1; then
  osu=$(mpirun --oversubscribe -np 2 osu_bw -m 268435456:268435456 | awk '!/^#/ { print $2 / 1000 }')
  echo "# limit osu_bw (2 ranks, 256 MiB messages) GB/s $osu"
fi
printf '%-9s %-8s %8s %10s %8s %9s %8s %10s\n' transport mode bucket median_ms spread aggGB/s vs_mpi vs_memcpy
for transport in $TRANSPORTS; do
  for bucket in $BUCKETS; do
    : >"$out/rows"
    for rep in $(seq "$REPS"); do
      "${MPIRUN[@]}" "$BUILD/refit" run "${JOB[@]}" --transport "$transport" \
        --mode unfused,grouped,fused --warmup 1 --iters 5 --bucket-size "$bucket" \
        --verify checksum >"$out/run"
      grep -v '^#' "$out/run" | awk '{ print $1, $4, $9 }' >>"$out/rows"
    done
    # Per mode: the median of the jobs' medians, and slowest / fastest.
    for mode in unfused grouped fused; do
      awk -v m="$mode" '$1 == m { print $2, $3 }' "$out/rows" | sort -k2,2g | awk \
        -v m="$mode" -v b="$bucket" -v tr="$transport" -v l="$mpi_ms" -v c="$memcpy_ms" '
        { bytes = $1; t[NR] = $2 }
        END {
          med = NR % 2 ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2
          g = bytes / med / 1e6
          printf "%-9s %-8s %8s %10.1f %8.2f %9.2f %8.2f %10.2f\n", tr, m, b, med, t[NR] / t[1], g, l / med, c / med
        }'
    done
  done
done
