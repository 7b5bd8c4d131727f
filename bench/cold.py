#!/usr/bin/env python3
"""Cold start beside the steady state: for every run of a results file, the job's own setup
(setup_<step>_s: plan, communicators, CUDA context, transport handles and mappings, arena
allocation, registration and filling; the slowest rank's, in files that record it), the
mode's engine setup, the first timed iteration and the median of the others, with the run's device-copy limit
when it was calibrated. Meant for jobs run with --warmup 0 (bench/copy_gpu.sh), whose first
timed iteration is the cold one.

    bench/cold.py RESULTS.h5
"""
import json
import sys

import h5py
import numpy as np


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def main(path):
    print(f"# {path}: times in ms; setup and iterations are the slowest rank's")
    print(f"{'run':>5} {'transport':>9} {'order':>5} {'placement':>13} {'mode':>7} {'copy':>6} "
          f"{'job setup':>10} {'setup':>9} {'first':>9} {'steady':>9} {'copy lim':>9} {'steady/lim':>10}")
    with h5py.File(path, "r") as f:
        for name in sorted(f["runs"]):
            g = f["runs"][name]
            a = g.attrs
            cfg = json.loads(text(a["config_json"]))
            t = g["timings"]
            phases = [text(p) for p in t.attrs["phases"]]
            data = t[()]
            if data.shape[0] == 0:
                continue
            setup = data[0, :, phases.index("setup")].max()
            totals = data[:, :, phases.index("total")].max(axis=1)
            steady = float(np.median(totals[1:])) if len(totals) > 1 else float(totals[0])
            steps = [k for k in a if k.startswith("setup_") and k.endswith("_s")]
            job = sum(float(a[k]) for k in steps) * 1e3 if steps else float("nan")
            lim = float(a["limit_device_copy_s"]) if "limit_device_copy_s" in a else float("nan")
            print(f"{name:>5} {text(a['transport']):>9} {text(a['trainer_order']):>5} "
                  f"{text(a['placement']):>13} {text(a['mode']):>7} {cfg.get('copy', '-'):>6} "
                  f"{job:10.1f} {setup * 1e3:9.2f} {totals[0] * 1e3:9.3f} {steady * 1e3:9.3f} "
                  f"{lim * 1e3:9.3f} {lim / steady:10.3f}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: bench/cold.py RESULTS.h5")
    main(sys.argv[1])
