# refit report: from results files made here (two jobs, two bucket sizes, three modes) it writes
# report.html, report.md and one CSV per table; the CSV rows hold exactly what the results file
# holds (checked against h5dump), a second file is compared run by run with the first, the
# output is the same every time, and bad inputs are refused with one line and exit 2.
. "$(dirname "$0")/lib.sh"

command -v h5dump >/dev/null || { echo "skipped: h5dump is not installed"; exit 77; }
A="$TMP/a.h5"
B="$TMP/b.h5"
# A named transport, so that the rows and their keys are the same on a machine with a GPU.
JOB=(run --model tiny --trainer fsdp=2 --rollout tp=2 --iters 3 --transport mpi)
for bucket in 64KiB 1MiB; do
  expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" "${JOB[@]}" --mode unfused,grouped,fused \
    --bucket-size "$bucket" --output "$A"
  expect_rows 3
done
expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" "${JOB[@]}" --mode grouped,fused --bucket-size 64KiB \
  --output "$B"
expect_rows 2

# attr FILE RUN NAME: a numeric attribute of /runs/RUN as h5dump prints it at full precision.
attr() {
  h5dump -m %.17g -a "/runs/$2/$3" "$1" | awk '/\(0\):/ { print $2 }'
}
# ms SECONDS: the value in milliseconds as the report computes and prints it.
ms() {
  /usr/bin/python3 -c 'import sys; print("%.17g" % (float(sys.argv[1]) * 1e3))' "$1"
}
# field CSV ROW COLUMN: one field of a CSV file (row 1 is the header); the tiny job's trainer
# layout "fsdp=2,tp=1" is the only quoted field, so it is read as one.
field() {
  /usr/bin/python3 -c 'import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
print(rows[int(sys.argv[2]) - 1][rows[0].index(sys.argv[3])])' "$1" "$2" "$3"
}
expect_eq() {
  [ "$2" = "$3" ] || fail "$1: got '$2', expected '$3'"
}

# ---- one file ------------------------------------------------------------------------------
R="$TMP/rep"
expect_exit 0 "$REFIT" report "$A" -o "$R"
expect_eq "summary line" "$(cat "$TMP/out")" \
  "report: $R/report.html, report.md and CSV tables from 6 run(s) in 1 file(s)"
for f in report.html report.md runs.csv status.csv modes_buckets.csv layouts.csv phases.csv \
  spread.csv limits.csv; do
  [ -s "$R/$f" ] || fail "report did not write $f"
done
[ -e "$R/compare.csv" ] && fail "one file made a compare.csv"
[ -e "$R/simulated.csv" ] && fail "a file of measured runs made a simulated.csv"
grep -q "^## Simulated runs" "$R/report.md" && fail "a file of measured runs has a Simulated runs section"

expect_eq "runs.csv header" "$(head -n 1 "$R/runs.csv")" \
  "file,run,model,trainer,rollout,placement,plan,mode,transport,bucket_size_bytes,iterations,ranks,time_median_ms,time_p99_ms,algbw_GBps,status,slurm_job_id"
expect_eq "status.csv header" "$(head -n 1 "$R/status.csv")" \
  "file,run,mode,bucket_size_bytes,status,wrong,checksum_bad,verdict,skip_reason"
expect_eq "modes_buckets.csv header" "$(head -n 1 "$R/modes_buckets.csv")" \
  "file,trainer,rollout,placement,plan,mode,bucket_size_bytes,run,time_median_ms,time_p99_ms,algbw_GBps"
expect_eq "phases.csv header" "$(head -n 1 "$R/phases.csv")" \
  "file,run,mode,bucket_size_bytes,setup_ms,reshape_ms,encode_ms,pack_ms,transfer_ms,unpack_ms,apply_ms,total_ms"
expect_eq "spread.csv header" "$(head -n 1 "$R/spread.csv")" \
  "file,run,mode,bucket_size_bytes,samples,min_ms,median_ms,p99_ms,max_ms,fastest_rank_median_ms,slowest_rank_median_ms"
expect_eq "limits.csv header" "$(head -n 1 "$R/limits.csv")" \
  "file,run,mode,bucket_size_bytes,time_median_ms,limit_memcpy_ms,memcpy_pct,limit_device_copy_ms,device_copy_pct,limit_mpi_ms,mpi_pct,limit_nccl_ms,nccl_pct,calibration"
expect_eq "layouts.csv header" "$(head -n 1 "$R/layouts.csv")" \
  "file,trainer,rollout,placement,plan,runs,best_time_ms,best_mode,best_bucket_size_bytes,best_algbw_GBps,trainer_send_bytes"
for t in runs:7 status:7 modes_buckets:7 phases:7 spread:7 limits:7 layouts:2; do
  expect_eq "${t%%:*}.csv lines" "$(wc -l <"$R/${t%%:*}.csv")" "${t##*:}"
done

# Every run's numbers are the file's, and the summary's total is the run's headline median.
row=2
for run in 0000 0001 0002 0003 0004 0005; do
  expect_eq "run $run number" "$(field "$R/runs.csv" $row run)" "$((10#$run))"
  expect_eq "run $run algbw" "$(field "$R/runs.csv" $row algbw_GBps)" "$(attr "$A" $run algbw_GBps)"
  median=$(ms "$(attr "$A" $run time_median_s)")
  expect_eq "run $run median" "$(field "$R/runs.csv" $row time_median_ms)" "$median"
  expect_eq "run $run p99" "$(field "$R/runs.csv" $row time_p99_ms)" \
    "$(ms "$(attr "$A" $run time_p99_s)")"
  expect_eq "run $run summary total" "$(field "$R/phases.csv" $row total_ms)" "$median"
  expect_eq "run $run samples" "$(field "$R/spread.csv" $row samples)" 12
  expect_eq "run $run verdict" "$(sed -n "${row}p" "$R/status.csv" | cut -d, -f5-)" \
    "RF_OK,0,0,PASS,"
  expect_eq "run $run calibration" "$(field "$R/limits.csv" $row calibration)" \
    "not calibrated (run with --calibrate)"
  row=$((row + 1))
done
expect_eq "modes and buckets" "$(cut -d, -f7,8 "$R/modes_buckets.csv" | tail -n +2 | tr '\n' ' ')" \
  "unfused,65536 grouped,65536 fused,65536 unfused,1048576 grouped,1048576 fused,1048576 "
expect_eq "layout row" "$(sed -n 2p "$R/layouts.csv" | cut -d, -f1-7)" \
  "1,\"fsdp=2,tp=1\",tp=2,disaggregated,p2p,6"
best=$(tail -n +2 "$R/runs.csv" | /usr/bin/python3 -c 'import csv, sys
print(min((r for r in csv.reader(sys.stdin)), key=lambda r: float(r[12]))[12])')
expect_eq "fastest layout time" "$(field "$R/layouts.csv" 2 best_time_ms)" "$best"
# tiny's 279,168 bytes plus the norms' second copy on the other tp rank (5 norms of 64 bf16).
expect_eq "trainer send bytes" "$(field "$R/layouts.csv" 2 trainer_send_bytes)" 279808

# The spread is over every iteration and rank of total (phase 7 of the 9 of timings).
h5dump -m %.17g -y -w 0 -d /runs/0002/timings "$A" |
  awk '/DATA \{/ { on = 1; next } on && /}/ { exit } on' | tr ',' '\n' | grep -v '^ *$' \
  >"$TMP/timings"
read -r tmin tmax <<<"$(/usr/bin/python3 -c 'import sys
v = [float(x) for x in open(sys.argv[1])]
t = v[7::9]
assert len(t) == 12, len(t)
print("%.17g %.17g" % (min(t) * 1e3, max(t) * 1e3))' "$TMP/timings")"
expect_eq "spread min" "$(field "$R/spread.csv" 4 min_ms)" "$tmin"
expect_eq "spread max" "$(field "$R/spread.csv" 4 max_ms)" "$tmax"

expect_grep "| file | run | model | trainer | rollout | placement | plan | mode | transport | bucket_size_bytes | iterations | ranks | time_median_ms | time_p99_ms | algbw_GBps | status | slurm_job_id |" "$R/report.md"
expect_eq "markdown runs rows" "$(grep -c '^| 1 | [0-9] | tiny |' "$R/report.md")" 6
expect_grep "File 1: not calibrated (run with --calibrate)" "$R/report.html"
expect_eq "charts" "$(grep -o '<svg class="chart" data-chart="[a-z_]*"' "$R/report.html" |
  cut -d'"' -f4 | tr '\n' ' ')" "modes_buckets bandwidth layouts phases spread "
grep -qiE '<script|<link|<img|src=' "$R/report.html" && fail "report.html refers to other files"

# The same inputs give the same bytes.
expect_exit 0 "$REFIT" report "$A" -o "$TMP/again"
diff -r "$R" "$TMP/again" >/dev/null || fail "a second report of the same file differs"

# A file written before timings were gathered in order (2026-12-05) holds each rank's
# iterations together under the same shape, without the timings' order attribute, and its
# headline was taken over rows that mixed iterations. report puts its timings in order and takes
# the medians again: every figure is the one of the same runs written in order.
/usr/bin/python3 - "$A" "$TMP/legacy.h5" <<'PY'
import shutil, sys, h5py
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as f:
    for run in f["runs"].values():
        t = run["timings"]
        a = t[()]
        t[...] = a.transpose(1, 0, 2).reshape(a.shape)
        del t.attrs["order"]
        run.attrs["algbw_GBps"] *= run.attrs["time_median_s"] / 99.0
        for name in ("time_median_s", "time_p99_s"):
            run.attrs[name] = 99.0
PY
expect_exit 0 "$REFIT" report "$TMP/legacy.h5" -o "$TMP/legacy"
for f in runs phases spread modes_buckets layouts; do
  diff "$R/$f.csv" "$TMP/legacy/$f.csv" >"$TMP/diff" || fail "legacy timings, $f.csv: $(head -c 400 "$TMP/diff")"
done

# ---- two files: the first is the reference -------------------------------------------------
R2="$TMP/rep2/nested"
expect_exit 0 "$REFIT" report "$A" "$B" -o "$R2"
expect_eq "compare.csv header" "$(head -n 1 "$R2/compare.csv")" \
  "file_b,model,trainer,rollout,placement,plan,mode,transport,bucket_size_bytes,run_a,run_b,time_a_ms,time_b_ms,ratio_b_over_a"
expect_eq "compare.csv lines" "$(wc -l <"$R2/compare.csv")" 3
expect_eq "compare keys" "$(tail -n +2 "$R2/compare.csv" | cut -d, -f1,2,8,9,10,11,12 | tr '\n' ' ')" \
  "2,tiny,grouped,mpi,65536,1,0 2,tiny,fused,mpi,65536,2,1 "
for pair in 2:0001:0000 3:0002:0001; do
  IFS=: read -r row ra rb <<<"$pair"
  a=$(attr "$A" "$ra" time_median_s)
  b=$(attr "$B" "$rb" time_median_s)
  expect_eq "compare $ra time A" "$(field "$R2/compare.csv" "$row" time_a_ms)" "$(ms "$a")"
  expect_eq "compare $ra time B" "$(field "$R2/compare.csv" "$row" time_b_ms)" "$(ms "$b")"
  expect_eq "compare $ra ratio" "$(field "$R2/compare.csv" "$row" ratio_b_over_a)" \
    "$(/usr/bin/python3 -c 'import sys; print("%.17g" % (float(sys.argv[2]) / float(sys.argv[1])))' "$a" "$b")"
done
expect_eq "runs of both files" "$(wc -l <"$R2/runs.csv")" 9
expect_grep '<svg class="chart" data-chart="compare" data-file="2"' "$R2/report.html"

# ---- schema additions (calibration, sweeps, Slurm), added to a copy with h5py --------------
if /usr/bin/python3 -c 'import h5py' 2>/dev/null; then
  C="$TMP/c.h5"
  cp "$A" "$C"
  /usr/bin/python3 - "$C" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    run = f["runs/0000"]
    run.attrs["limit_memcpy_s"] = run.attrs["time_median_s"] / 4
    run.attrs["limit_mpi_s"] = run.attrs["time_median_s"] / 2
    run.attrs["slurm_job_id"] = "4242"
    skip = f.create_group("runs/0006")
    for k, v in dict(model="tiny", trainer="fsdp=2,tp=1", rollout="tp=3", placement="disaggregated",
                     plan="p2p", mode="fused", transport="mpi", status="skipped",
                     skip_reason="tp=3 does not divide 4 heads").items():
        skip.attrs[k] = v
    skip.attrs["bucket_size"] = 65536
    skip.attrs["sweep_index"] = 7
    skip.attrs["sweep_size"] = 7
EOF
  R3="$TMP/rep3"
  expect_exit 0 "$REFIT" report "$C" -o "$R3"
  expect_eq "calibrated percentages" "$(sed -n 2p "$R3/limits.csv" | cut -d, -f7,11,14)" \
    "25,50,calibrated"
  expect_eq "uncalibrated run" "$(field "$R3/limits.csv" 3 calibration)" \
    "not calibrated (run with --calibrate)"
  expect_eq "slurm job id" "$(field "$R3/runs.csv" 2 slurm_job_id)" 4242
  expect_eq "skipped status row" "$(tail -n 1 "$R3/status.csv")" \
    "1,6,fused,65536,skipped,-1,-1,skipped,tp=3 does not divide 4 heads"
  expect_eq "runs with the skipped one" "$(wc -l <"$R3/runs.csv")" 8
  expect_eq "modes without it" "$(wc -l <"$R3/modes_buckets.csv")" 7
  expect_eq "limits chart" "$(grep -c 'data-chart="limits"' "$R3/report.html")" 1
else
  echo "note: schema additions not checked: /usr/bin/python3 has no h5py"
fi

# ---- refusals: one line, exit 2 ------------------------------------------------------------
WANT="give a results file written by 'refit run --output'"
expect_error 2 "refit: error: results file '$TMP/none.h5' cannot be read: No such file or directory; $WANT" \
  "$REFIT" report "$TMP/none.h5" -o "$TMP/r4"
echo "not hdf5" >"$TMP/text.h5"
expect_error 2 "refit: error: results file '$TMP/text.h5' is not an HDF5 file or is damaged; $WANT" \
  "$REFIT" report "$A" "$TMP/text.h5" -o "$TMP/r4"
expect_exit 0 "$REFIT" checkpoint --model tiny --format hdf5 --checkpoint "$TMP/ck.h5"
expect_error 2 "refit: error: results file '$TMP/ck.h5' is an HDF5 file but not refit's results; $WANT" \
  "$REFIT" report "$TMP/ck.h5" -o "$TMP/r4"
expect_error 2 "refit: error: report directory '$TMP/text.h5/sub' cannot be created: '$TMP/text.h5' is not a directory; choose another -o" \
  "$REFIT" report "$A" -o "$TMP/text.h5/sub"
[ -e "$TMP/r4" ] && fail "a refused report created its directory"
finish
