#!/usr/bin/env bash
# The published refits side by side with refit's predictions of the same work: simulates every
# row of configs/published/refits.json for each plan, bucket size and mode, appends the
# predictions (with each row's published time and label) to OUTDIR/published.h5 and writes
# results/published.md (bench/published.py says how the best is picked).
#
#   bench/published.sh [OUTDIR]        default OUTDIR: build/published
# Environment: BUILD (build dir, default build), MD (the table, default results/published.md),
# TABLE (the rows, default configs/published/refits.json). About an hour on the
# 2-core VM (measured while a sanitizer build and the tests shared its cores), most of it the
# DeepSeek-V3 and Kimi-K2 rows, whose fused buckets' flows the simulation carries from one
# unit to the next; the rows whose every plan and bucket size would take longer simulate fewer,
# as their "bench" entries say.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
REFIT="$BUILD/refit" exec python3 bench/published.py "${1:-$BUILD/published}"
