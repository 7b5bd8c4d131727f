#!/usr/bin/env bash
# Where a host refit spends its cycles: one `refit run` job with `perf record` on every rank,
# then, per rank, the share of its samples spent inside (children included) each copy a refit
# can make, and the symbols that take the most samples themselves:
#   refit's own copies    rf_region_copy: packing strided boxes into staging, unpacking them,
#                         local copies, and shm's single copy straight into place;
#   MPI's datatype copies opal_convertor_pack / opal_convertor_unpack: a derived datatype (or a
#                         non-contiguous message) copied in and out of shared-memory fragments;
#   the kernel's copy     process_vm_readv: Open MPI's single copy of a contiguous message
#                         between processes (CMA), the copy the plain MPI exchange makes;
#   polling               opal_progress: waiting for the peer inside MPI.
# A rank's refit copies each byte once where the shares are one copy's worth; a message path
# shows a second copy of the strided bytes beside the kernel's (results/host.md).
#
#   bench/host_profile.sh OUTDIR [refit run options...]
#     default: the demo job over mpi, fused, 64 MiB buckets, 3 iterations after 1 warm-up
# Environment: BUILD (build dir, default build), NP (ranks, default 4), FREQ (samples a second,
# default 499). Needs perf (Debian: linux-perf) and kernel.perf_event_paranoid <= 1 or root.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bench/host_profile.sh OUTDIR [refit run options...]}
shift
BUILD=${BUILD:-build}
NP=${NP:-4}
JOB=("$@")
[ ${#JOB[@]} -gt 0 ] || JOB=(--model llama-3.2-1b --trainer fsdp=2 --rollout tp=2 --transport mpi
  --mode fused --bucket-size 64MiB --warmup 1 --iters 3 --verify none)
command -v perf >/dev/null || { echo "bench/host_profile.sh: perf is not installed (apt-get install linux-perf)" >&2; exit 2; }
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Each rank records itself; the rank number comes from Open MPI's environment.
mpirun --oversubscribe -np "$NP" bash -c 'exec perf record -q -g -F "$0" -o "$1/perf.$OMPI_COMM_WORLD_RANK.data" -- "$2" run "${@:3}"' \
  "${FREQ:-499}" "$OUT" "$BUILD/refit" "${JOB[@]}" >"$OUT/run.txt" 2>&1
grep -v '^refit\[' "$OUT/run.txt" | grep -E '^ +(unfused|grouped|fused) ' | tee "$OUT/rows.txt"
# "#  rank 0 host H pid P trainer T rollout R ...": a rank's roles, "-" where it has none.
roles=$(awk '/^#  rank/ && !seen[$3]++ { role = ($9 != "-") ? "trainer" : "";
  if ($11 != "-") role = role (role ? "+" : "") "rollout"; print $3, role }' "$OUT/run.txt")
printf '%-5s %-8s %8s %14s %14s %14s %9s\n' rank role samples refit_copies mpi_datatype kernel_cma polling
for rank in $(seq 0 $((NP - 1))); do
  data="$OUT/perf.$rank.data"
  perf report -i "$data" --stdio --children --sort symbol 2>/dev/null >"$OUT/children.$rank.txt"
  perf report -i "$data" --stdio --no-children --sort dso,symbol 2>/dev/null |
    grep -E '^ +[0-9.]+%' | head -12 >"$OUT/self.$rank.txt"
  samples=$(grep -m1 -E "^# Samples: " "$OUT/children.$rank.txt" | awk '{ print $3 }')
  # The inclusive share of the first line naming each symbol.
  share() { awk -v pat="$1" '$0 ~ /^ +[0-9.]+%/ && $0 ~ pat { print $1; exit }' "$OUT/children.$rank.txt"; }
  role=$(echo "$roles" | awk -v r="$rank" '$1 == r { print $2 }')
  printf '%-5s %-8s %8s %14s %14s %14s %9s\n' "$rank" "$role" "$samples" \
    "$(share ' rf_region_copy$')" \
    "$(share ' opal_convertor_(pack|unpack)$')" \
    "$(share ' (__x64_sys_)?process_vm_readv$')" "$(share ' opal_progress$')"
done
for rank in $(seq 0 $((NP - 1))); do
  echo "# rank $rank: the symbols with the most samples of their own"
  cat "$OUT/self.$rank.txt"
done
