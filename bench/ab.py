#!/usr/bin/env python3
"""The versions of an A/B call side by side (bench/ab_gpu.sh): for each results file (one per
version) and each run configuration in it (transport, order, placement, mode, copy path,
bucket size, rollout dtype), the median over the iterations of the slowest rank of every
round, and the median of those rounds.
Files without the timings' `order` attribute (written before 2026-12-05) hold the gather's
rank-major order, which is put right here as refit report does.

    bench/ab.py ab-old.h5 ab-new.h5 ...
"""
import json
import sys

import h5py
import numpy as np


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def rounds(path):
    """{(transport, order, placement, mode, copy, bucket, dtype): [median of each run]}."""
    out = {}
    with h5py.File(path, "r") as f:
        for name in sorted(f["runs"]):
            g = f["runs"][name]
            t = g["timings"]
            data = t[()]
            if "order" not in t.attrs:
                iters, ranks, phases = data.shape
                data = data.reshape(ranks, iters, phases).transpose(1, 0, 2)
            total = [text(p) for p in t.attrs["phases"]].index("total")
            slowest = data[:, :, total].max(axis=1)
            a = g.attrs
            cfg = json.loads(text(a["config_json"]))
            key = tuple(text(a[k]) for k in ("transport", "trainer_order", "placement", "mode"))
            key += (str(cfg.get("copy", "-")), str(int(a["bucket_size"])),
                    text(a.get("rollout_dtype", "model")))
            out.setdefault(key, []).append(float(np.median(slowest)) * 1e3)
    return out


def main(paths):
    files = [(p, rounds(p)) for p in paths]
    keys = sorted({k for _, r in files for k in r})
    print("# median over iterations of the slowest rank, per round (ms); then their median")
    for key in keys:
        for path, r in files:
            if key in r:
                each = " ".join(f"{v:8.3f}" for v in r[key])
                print(f"{' '.join(key):52} {path:28} {np.median(r[key]):8.3f}   rounds {each}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: bench/ab.py FILE.h5...")
    main(sys.argv[1:])
