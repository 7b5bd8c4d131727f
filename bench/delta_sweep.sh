#!/usr/bin/env bash
# Delta refits against the changed fraction on this machine: for each fraction F one job of
# `refit run --update sparse:F --delta off,auto` (the dense refit and the delta beside it, over
# the same data), all appended to one results file; then `refit report` of it, and the measured
# rows of results/delta.md printed from the report's delta.csv.
#
#   bench/delta_sweep.sh [OUT.h5]        (default delta-sweep.h5; its report in OUT-report/)
#
# The job is results/delta.md's (Llama-3.2-1B fsdp=2 -> tp=2 over mpi, 5 timed iterations);
# MODEL, TRAINER, ROLLOUT, NP, ITERS, FRACTIONS and REFIT change it, e.g. MODEL=tiny for a
# check of the script that takes seconds. An existing OUT.h5 is refused rather than appended
# to, so that the rows come from one sweep.
set -euo pipefail

out=${1:-delta-sweep.h5}
MODEL=${MODEL:-llama-3.2-1b}
TRAINER=${TRAINER:-fsdp=2}
ROLLOUT=${ROLLOUT:-tp=2}
NP=${NP:-4}
ITERS=${ITERS:-5}
FRACTIONS=${FRACTIONS:-1e-6 0.001 0.01 0.5 1}
REFIT=${REFIT:-build/refit}

[ -e "$out" ] && { echo "delta_sweep: $out exists; remove it or name another file" >&2; exit 2; }
for f in $FRACTIONS; do
  mpirun --oversubscribe -np "$NP" "$REFIT" run --model "$MODEL" --trainer "$TRAINER" \
    --rollout "$ROLLOUT" --transport mpi --update "sparse:$f" --delta off,auto \
    --iters "$ITERS" --output "$out" | grep -E '^# (delta|update|PASS|FAIL)' || true
done
report=${out%.h5}-report
"$REFIT" report "$out" -o "$report" >/dev/null

# One row per F: the dense refit, the delta refit beside it (its phases, each its own slowest
# rank's median, and its wire bytes), and their ratios. Times in ms.
python3 - "$report/delta.csv" "$MODEL" "$TRAINER" "$ROLLOUT" <<'EOF'
import csv, sys

rows = list(csv.DictReader(open(sys.argv[1])))
runs = {r["run"]: r for r in rows}
print(f"| job | --update | changed | dense ms | delta ms (encode, transfer, apply) | "
      f"dense wire bytes | delta wire bytes | wire % of dense | time / dense |")
print("|---|---|---:|---:|---|---:|---:|---:|---:|")
job = f"{sys.argv[2]} {sys.argv[3]} -> {sys.argv[4]}, mpi"
for r in rows:
    if r["delta"] == "off" or not r["dense_run"]:
        continue
    d = runs[r["dense_run"]]
    ms = lambda v: f"{float(v):.4g}"
    print(f"| {job} | {r['update']} | {100 * float(r['changed_fraction']):.4g} % | "
          f"{ms(d['time_median_ms'])} | {ms(r['time_median_ms'])} ({ms(r['encode_ms'])}, "
          f"{ms(r['transfer_ms'])}, {ms(r['apply_ms'])}) | {int(d['wire_bytes']):,} | "
          f"{int(r['wire_bytes']):,} | {float(r['wire_pct']):.4g} | "
          f"{float(r['time_ratio']):.3g} |")
EOF
