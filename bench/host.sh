#!/usr/bin/env bash
# Host benchmark: refit's three modes over the host transports (mpi: messages; shm: shared
# memory mapped between the ranks; rma: MPI one-sided puts, and rma:get its gets), for a sweep
# of bucket sizes, next to the limits measured
# in the same run between the same ranks for the same bytes: a plain MPI exchange of every
# pair's bytes and memcpy, measured by refit-limits once at the start and again by each job
# right after each of its runs (--calibrate), and OSU's osu_bw when installed. Each job runs
# REPS times; prints each mode's median time over the jobs, their spread (slowest / fastest),
# the aggregate GB/s of the median, the median over the jobs of its ratio to the plain MPI
# exchange and to memcpy measured in the same job (limit time / refit time: 1.00 is as fast as
# the limit), the median of those plain exchanges, and the median of the jobs' register setup
# step (rma's window creation, shm's handle exchange; 0 for mpi), timed apart from the runs.
#
#   bench/host.sh [refit run options...]      (default: the demo job, Llama-3.2-1B 2 -> 2)
# Environment: BUILD (build dir, default build), NP (ranks), BUCKETS (sizes to sweep),
# TRANSPORTS (default "mpi shm rma rma:get"; NAME:DIR passes --rma DIR), REPS (jobs per point, default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
NP=${NP:-4}
BUCKETS=${BUCKETS:-"64MiB 256MiB 1GiB 0"}
TRANSPORTS=${TRANSPORTS:-"mpi shm rma rma:get"}
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
printf '%-9s %-8s %8s %10s %8s %9s %8s %10s %8s %12s\n' transport mode bucket median_ms spread aggGB/s vs_mpi \
  vs_memcpy mpi_ms register_ms
for transport in $TRANSPORTS; do
  for bucket in $BUCKETS; do
    : >"$out/rows"
    for rep in $(seq "$REPS"); do
      # --calibrate measures the plain MPI exchange and the memcpy again right after each run,
      # in the same job: the VM's speed drifts over minutes (the limit above moved between
      # 105 and 165 ms from one session to the next), so each run is compared with its own.
      dir=()
      [ "${transport#*:}" != "$transport" ] && dir=(--rma "${transport#*:}")
      "${MPIRUN[@]}" "$BUILD/refit" run "${JOB[@]}" --transport "${transport%%:*}" "${dir[@]}" \
        --mode unfused,grouped,fused --warmup 1 --iters 5 --bucket-size "$bucket" \
        --verify checksum --calibrate >"$out/run"
      # One line per run: mode, bytes, median ms, then its limits' ms (memcpy, mpi).
      awk '/^# setup / { for (i = 1; i < NF; i++) if ($i == "register") reg = $(i + 1) }
           !/^#/ && !/^limits:/ { mode = $1; bytes = $4; ms = $9 }
           /^limits:/ { for (i = 2; i < NF; i++) {
                          if ($i == "memcpy") c = $(i + 1) * 1e3
                          if ($i == "mpi") m = $(i + 1) * 1e3 }
                        print mode, bytes, ms, c, m, reg + 0 }' "$out/run" >>"$out/rows"
    done
    # Per mode: the median of the jobs' medians and slowest / fastest; the ratios are the
    # median over the jobs of each job's limit over its own time.
    for mode in unfused grouped fused; do
      awk -v m="$mode" '$1 == m' "$out/rows" | awk \
        -v m="$mode" -v b="$bucket" -v tr="$transport" '
        function median(v, n,   i, j, x) {
          for (i = 2; i <= n; i++) { x = v[i]; for (j = i - 1; j >= 1 && v[j] > x; j--) v[j + 1] = v[j]; v[j + 1] = x }
          return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
        }
        { bytes = $2; t[NR] = $3; rm[NR] = $5 / $3; rc[NR] = $4 / $3; lm[NR] = $5; rg[NR] = $6 }
        END {
          med = median(t, NR)
          printf "%-9s %-8s %8s %10.1f %8.2f %9.2f %8.2f %10.2f %8.1f %12.1f\n", tr, m, b, med,
            t[NR] / t[1], bytes / med / 1e6, median(rm, NR), median(rc, NR), median(lm, NR),
            median(rg, NR)
        }'
    done
  done
done
