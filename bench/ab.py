#!/usr/bin/env python3
"""The versions of an A/B call side by side (bench/ab_gpu.sh): for each results file (one per
version) and each run configuration in it (transport, order, placement, mode, copy path,
bucket size, rollout dtype), the median over the iterations of the slowest rank of every
round, the median of those rounds, its ratio to the first file's (the baseline) and, with
--limit FILE (a job run with --calibrate in the same call), the device copy of the same bytes
over that median. Files without the timings' `order` attribute (written before 2026-12-05)
hold the gather's rank-major order, which is put right here as refit report does.

    bench/ab.py [--limit LIMIT.h5] ab-old.h5 ab-new.h5 ...
"""
import json
import sys

import h5py
import numpy as np


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def rounds(path):
    """{(transport, order, placement, mode, copy, bucket, dtype): [median of each run]} and the
    file's device-copy limit in ms (the last calibrated run's), or None."""
    out, limit = {}, None
    with h5py.File(path, "r") as f:
        for name in sorted(f["runs"]):
            g = f["runs"][name]
            a = g.attrs
            if "limit_device_copy_s" in a:
                limit = float(a["limit_device_copy_s"]) * 1e3
            t = g["timings"]
            data = t[()]
            if "order" not in t.attrs:
                iters, ranks, phases = data.shape
                data = data.reshape(ranks, iters, phases).transpose(1, 0, 2)
            total = [text(p) for p in t.attrs["phases"]].index("total")
            slowest = data[:, :, total].max(axis=1)
            cfg = json.loads(text(a["config_json"]))
            key = tuple(text(a[k]) for k in ("transport", "trainer_order", "placement", "mode"))
            key += (str(cfg.get("copy", "-")), str(int(a["bucket_size"])),
                    text(a.get("rollout_dtype", "model")))
            out.setdefault(key, []).append(float(np.median(slowest)) * 1e3)
    return out, limit


def main(args):
    limit = None
    if args[:1] == ["--limit"]:
        _, limit = rounds(args[1])
        args = args[2:]
    files = [(p, rounds(p)[0]) for p in args]
    keys = sorted({k for _, r in files for k in r})
    lim = f"{limit:.3f} ms" if limit else "not measured (no --limit)"
    print(f"# median over iterations of the slowest rank, per round (ms); their median; its ratio "
          f"to {files[0][0]}'s; device copy of the same bytes ({lim}) over the median")
    for key in keys:
        base = np.median(files[0][1][key]) if key in files[0][1] else None
        for path, r in files:
            if key not in r:
                continue
            med = np.median(r[key])
            vs = f"{base / med:6.3f}" if base else "     -"
            vl = f"{limit / med:6.3f}" if limit else "     -"
            each = " ".join(f"{v:8.3f}" for v in r[key])
            print(f"{' '.join(key):52} {path:28} {med:8.3f} base {vs} limit {vl}   rounds {each}")


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1:2] == ["--limit"] and len(sys.argv) < 4:
        sys.exit("usage: bench/ab.py [--limit LIMIT.h5] FILE.h5...")
    main(sys.argv[1:])
