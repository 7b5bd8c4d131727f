#!/usr/bin/env python3
"""The REFIT_TIMELINE lines of a refit job's output (engine_mapped.c), summarised per mode:
the medians over the iterations after the first of the copying rank's steps (the GPU sync
before the first notes, the first notes, the copy launches, the copies' GPU time by CUDA
events, the host's wait for them, the second notes, the stage), the other rank's stage, and
how long after the copying rank's end the other rank's stage ended (the last note's way).
Times in ms.

    bench/timeline.py JOB.txt...
"""
import re
import statistics as st
import sys

LINE = re.compile(
    r"timeline rank (\d+) (\w+) stage (\d+) call (\d+): start ([\d.]+) s; sync ([\d.]+) "
    r"notes1 ([\d.]+) copies ([\d.]+) \(launch ([\d.]+) wait ([\d.]+) gpu ([\d.]+), (\d+) "
    r"launches\) notes2 ([\d.]+) total ([\d.]+) ms")
KEYS = ["start", "sync", "notes1", "copies", "launch", "wait", "gpu", "launches", "notes2", "total"]


def main(paths):
    print(f"{'job':22} {'mode':7} {'copier':>6} {'sync':>6} {'notes1':>6} {'launch':>6} "
          f"{'gpu':>7} {'wait':>7} {'#':>3} {'notes2':>6} {'stage':>7} {'other':>7} {'note':>6}")
    for path in paths:
        runs = {}
        for line in open(path):
            m = LINE.match(line)
            if not m:
                continue
            v = dict(zip(KEYS, [float(m[5]) * 1e3] + [float(x) for x in m.groups()[5:]]))
            runs.setdefault(m[2], {}).setdefault(int(m[1]), []).append(v)
        for mode, ranks in runs.items():
            def med(rank, key):
                return st.median(x[key] for x in ranks[rank][1:])
            copier = max(ranks, key=lambda r: med(r, "gpu"))
            row = (f"{path.rsplit('/', 1)[-1].removesuffix('.txt'):22} {mode:7} {copier:6d} "
                   + " ".join(f"{med(copier, k):{w}.3f}" for k, w in
                              [("sync", 6), ("notes1", 6), ("launch", 6), ("gpu", 7), ("wait", 7)])
                   + f" {int(ranks[copier][-1]['launches']):3d} {med(copier, 'notes2'):6.3f} "
                   f"{med(copier, 'total'):7.3f}")
            others = [r for r in ranks if r != copier]
            if others:
                o, n = others[0], min(len(ranks[copier]), len(ranks[others[0]]))
                end = [ranks[o][i]["start"] + ranks[o][i]["total"] - ranks[copier][i]["start"]
                       - ranks[copier][i]["total"] for i in range(1, n)]
                row += f" {med(o, 'total'):7.3f} {st.median(end):6.3f}"
            print(row)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: bench/timeline.py JOB.txt...")
    main(sys.argv[1:])
