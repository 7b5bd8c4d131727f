#!/usr/bin/env python3
"""Predicted against measured: for each results file, `refit simulate --calibration FILE`
rebuilds every measured run of the file (and its --calibrate limits) on the cluster, fits the
cluster's rates to them per mode and predicts each again (docs/architecture.md,
"Calibration"); this prints, as a Markdown table, every run's measured median beside its
calibrated prediction and the error.

    bench/predicted.py CLUSTER RESULTS.h5 [RESULTS.h5 ...]
Environment: REFIT (the binary, default build/refit).
"""
import json
import os
import subprocess
import sys


def samples(refit, cluster, path):
    # The job named here only decides what the command prints beside the calibration; the
    # samples are the file's own runs, each rebuilt from its attributes.
    cmd = [refit, "simulate", "--model", "tiny", "--trainer", "fsdp=1", "--rollout", "tp=1",
           "--cluster", cluster, "--memory", "device", "--calibration", path, "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: {p.stderr.strip().splitlines()[-1]}")
    return json.loads(p.stdout)["calibration"]


def main(argv):
    if len(argv) < 3:
        sys.exit("usage: bench/predicted.py CLUSTER RESULTS.h5 [RESULTS.h5 ...]")
    refit = os.environ.get("REFIT", "build/refit")
    cluster = argv[1]
    print(f"Cluster `{cluster}`; each file calibrates its own predictions.\n")
    print("| file | run | measured | predicted | error |")
    print("|---|---|---:|---:|---:|")
    worst = 0.0
    for path in argv[2:]:
        cal = samples(refit, cluster, path)
        for s in cal["samples"]:
            m, p = s["measured_s"], s["predicted_s"]
            err = p / m - 1
            worst = max(worst, abs(err))
            print(f"| `{os.path.basename(path)}` | {s['label']} | {m * 1e3:.3f} ms | "
                  f"{p * 1e3:.3f} ms | {err * 100:+.1f}% |")
    print(f"\nWorst error: {worst * 100:.1f}%.")


if __name__ == "__main__":
    main(sys.argv)
