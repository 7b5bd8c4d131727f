#!/usr/bin/env bash
# The planner and the simulation at the scale of the published refits: Kimi-K2 (1.03T
# parameters, 69,975 tensors) from 256 trainer ranks (ep and pp) to 128 rollout ranks
# (tp=16, dp=8), on HGX H200 nodes. Prints each command's wall time and peak resident memory
# (the aim: seconds, and under 2 GB), then the simulation's own lines.
#
#   bench/sim_scale.sh [refit simulate options...]
# Environment: BUILD (build dir, default build), CLUSTER (default h200-hgx), MODEL (default
# kimi-k2), PLAN (default: refit's), TRAINER (default fsdp=2,ep=32,pp=4), ROLLOUT (default
# tp=16,dp=8), MODES (default grouped). bench/sim_scale_star.sh times the star of DeepSeek-V3
# at 256 ranks with these.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
CLUSTER=${CLUSTER:-h200-hgx}
TRAINER=${TRAINER:-fsdp=2,ep=32,pp=4}
ROLLOUT=${ROLLOUT:-tp=16,dp=8}
MODES=${MODES:-grouped}
MODEL=${MODEL:-kimi-k2}
job=(--model "$MODEL" --trainer "$TRAINER" --rollout "$ROLLOUT")
[ -z "${PLAN:-}" ] || job+=(--plan "$PLAN")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "# $MODEL ${PLAN:-} $TRAINER -> $ROLLOUT on $CLUSTER, $(nproc) cores, $(hostname)"
printf '%-10s %10s %14s\n' command seconds peak_rss_MiB
/usr/bin/time -f '%e %M' -o "$out/plan.time" "$BUILD/refit" plan --cluster "$CLUSTER" "${job[@]}" >"$out/plan"
read -r s kb <"$out/plan.time"
printf '%-10s %10s %14d\n' plan "$s" $((kb / 1024))
/usr/bin/time -f '%e %M' -o "$out/sim.time" "$BUILD/refit" simulate --cluster "$CLUSTER" \
  "${job[@]}" --mode "$MODES" "$@" >"$out/sim"
read -r s kb <"$out/sim.time"
printf '%-10s %10s %14d\n' simulate "$s" $((kb / 1024))
grep -E '^(pieces|blocks)' "$out/plan"
cat "$out/sim"
