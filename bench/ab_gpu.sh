#!/usr/bin/env bash
# Two or more versions of refit on the same GPU in one call, their jobs alternated, so that a
# change between calls (another host under the VM, a slower CPU for the notes) is not taken
# for a change in refit. Each version is a source tree: the working tree (`.`) or an older
# commit unpacked beside it (the device gets no .git), e.g.
#
#   git archive 1cd726f | tar -x -C carry/old --exclude='results/*'
#   bench/ab_gpu.sh OUTDIR old=carry/old new=.
#
# Every version's refit is built (Release), then each round runs the same job (JOB, default:
# Llama-3.1-8B over ipc in two processes, unfused, grouped and fused, checksum verification)
# once per version, ROUNDS times (default 2), then one calibrated job for the device copy of
# the same bytes (OUTDIR/limit.h5). Each version's runs go to OUTDIR/ab-NAME.h5; bench/ab.py
# prints each configuration's median per round and over the rounds, against that limit.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bench/ab_gpu.sh OUTDIR NAME=SOURCE_DIR...}
shift
[ $# -ge 2 ] || { echo "ab_gpu: name two versions or more (NAME=SOURCE_DIR)" >&2; exit 2; }
. bench/gpu_env.sh
log "build $*"
for v in "$@"; do
  name=${v%%=*} src=${v#*=}
  (cmake -S "$src" -B "build-ab-$name" -DCMAKE_BUILD_TYPE=Release >"$OUT/build-$name.txt" 2>&1 &&
    cmake --build "build-ab-$name" -j4 --target refit >>"$OUT/build-$name.txt" 2>&1 ||
    tail -20 "$OUT/build-$name.txt") &
done
wait
for v in "$@"; do
  [ -x "build-ab-${v%%=*}/refit" ] || { log "build of ${v%%=*} failed"; exit 1; }
done
log "built"
read -r -a JOB_ARGS <<<"${JOB:---model llama-3.1-8b --trainer fsdp=1 --rollout tp=1 --transport ipc --mode unfused,grouped,fused --verify checksum}"
JOB_TAIL=6 JOB_TIMEOUT=${JOB_TIMEOUT:-120}
for round in $(seq "${ROUNDS:-2}"); do
  for v in "$@"; do
    name=${v%%=*}
    job "$name-$round" "${MPI[@]}" -np "${NP:-2}" "build-ab-$name/refit" run "${JOB_ARGS[@]}" \
      --warmup 0 --iters 10 --output "$OUT/ab-$name.h5"
  done
done
# The limit every median is read against, measured in the same call: refit's device copy of
# the same bytes (--calibrate), once, by the last version, in its own file.
last=${*: -1}
job limit "${MPI[@]}" -np "${NP:-2}" "build-ab-${last%%=*}/refit" run "${JOB_ARGS[@]}" \
  --mode fused --warmup 0 --iters 5 --calibrate --output "$OUT/limit.h5"
# In the order named, so that the first version is the baseline.
files=()
for v in "$@"; do files+=("$OUT/ab-${v%%=*}.h5"); done
"${PY:-python3}" bench/ab.py --limit "$OUT/limit.h5" "${files[@]}" | tee "$OUT/ab.txt" |
  tee -a "$OUT/summary.txt"
log "done"
