#!/usr/bin/env bash
# Where a host refit spends its cycles: one `refit run` job with `perf record` on every rank
# (after DELAY ms: set-up and the warm-up iteration, whose first touch of the rollout arenas
# would swamp the rest, are left out), then, per rank, the share of its samples spent inside
# (children included) each copy a refit can make, and the symbols with the most samples:
#   refit_copies  rf_region_copy: refit's own box copies (packing strided boxes into staging,
#                 unpacking them, local copies, shm's single copy straight into place);
#   mpi_pack      opal_generic_simple_pack: Open MPI's datatype engine copying a message into its
#                 shared-memory fragments (a strided message, or any one below the single-copy
#                 size), on the sender;
#   mpi_unpack    opal_generic_simple_unpack: the same out of the fragments, on the receiver;
#   kernel_cma    process_vm_readv: Open MPI's single copy of a contiguous message straight
#                 between the processes, the copy the plain MPI exchange makes;
#   yield         sched_yield: waiting for the peer (four ranks on two cores take turns).
# A message path copies each strided byte twice (pack and unpack, by refit or by MPI), a
# contiguous one once (kernel_cma): results/host.md reads these.
#
#   bench/host_profile.sh OUTDIR [refit run options...]
#     default: the demo job over mpi, fused, 64 MiB buckets, 15 timed iterations
# Environment: BUILD (build dir, default build), NP (ranks, default 4), FREQ (samples a second,
# default 199), DELAY (ms before recording, default 8000: past the set-up and warm-up of the
# demo job on the 2-core VM), PROGRAM (default refit; refit-limits profiles the plain exchange).
# Needs perf (Debian: linux-perf) with kernel.perf_event_paranoid <= 1, or root.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bench/host_profile.sh OUTDIR [refit run options...]}
shift
BUILD=${BUILD:-build}
NP=${NP:-4}
JOB=("$@")
[ ${#JOB[@]} -gt 0 ] || JOB=(--model llama-3.2-1b --trainer fsdp=2 --rollout tp=2 --transport mpi
  --mode fused --bucket-size 64MiB --warmup 1 --iters 15 --verify none)
command -v perf >/dev/null || { echo "bench/host_profile.sh: perf is not installed (apt-get install linux-perf)" >&2; exit 2; }
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Each rank records itself; the rank number comes from Open MPI's environment.
# DWARF call chains: libc's memcpy and Open MPI keep no frame pointers, and a copy must be
# charged to whoever called it (refit's box copies, or MPI's datatype engine).
mpirun --oversubscribe -np "$NP" bash -c 'exec perf record -q -D "$0" --call-graph dwarf,16384 -F "$1" -o "$2/perf.$OMPI_COMM_WORLD_RANK.data" -- "$3" run "${@:4}"' \
  "${DELAY:-8000}" "${FREQ:-199}" "$OUT" "$BUILD/${PROGRAM:-refit}" "${JOB[@]}" >"$OUT/run.txt" 2>&1
grep -v '^refit\[' "$OUT/run.txt" | grep -E '^ +(unfused|grouped|fused) |^limit' | tee "$OUT/rows.txt"
# "#  rank 0 host H pid P trainer T rollout R ...": a rank's roles, "-" where it has none.
roles=$(awk '/^#  rank/ && !seen[$3]++ { role = ($9 != "-") ? "trainer" : "";
  if ($11 != "-") role = role (role ? "+" : "") "rollout"; print $3, role }' "$OUT/run.txt")
# share FILE PATTERN: the inclusive share of the first line of a children report naming a symbol.
share() {
  awk -v pat="$2" '$0 ~ /^ +[0-9.]+%/ && $0 ~ pat { print $1; found = 1; exit }
    END { if (!found) print "0%" }' "$1"
}
printf '%-5s %-16s %8s %13s %9s %11s %11s %7s\n' rank role samples refit_copies mpi_pack mpi_unpack kernel_cma yield
for rank in $(seq 0 $((NP - 1))); do
  data="$OUT/perf.$rank.data"
  perf report -i "$data" --stdio --children --sort symbol -g none 2>/dev/null >"$OUT/children.$rank.txt"
  perf report -i "$data" --stdio --no-children --sort dso,symbol 2>/dev/null |
    awk '/^ +[0-9.]+%/ && n++ < 12' >"$OUT/self.$rank.txt"
  children="$OUT/children.$rank.txt"
  samples=$(awk '/^# Samples: / { print $3; exit }' "$children")
  role=$(echo "$roles" | awk -v r="$rank" '$1 == r { print $2 }')
  printf '%-5s %-16s %8s %13s %9s %11s %11s %7s\n' "$rank" "${role:--}" "$samples" \
    "$(share "$children" '] rf_region_copy ')" "$(share "$children" '] opal_generic_simple_pack ')" \
    "$(share "$children" '] opal_generic_simple_unpack ')" \
    "$(share "$children" '] __x64_sys_process_vm_readv ')" "$(share "$children" '] __x64_sys_sched_yield ')"
done
for rank in $(seq 0 $((NP - 1))); do
  echo "# rank $rank: the symbols with the most samples of their own"
  cat "$OUT/self.$rank.txt"
done
