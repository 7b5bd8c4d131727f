#!/usr/bin/env python3
"""The published refits beside refit's predictions (bench/published.sh is the entry point).

Every row of configs/published/refits.json is simulated with `refit simulate --json` for each
plan that applies (p2p; star unless the rollout spreads experts with ep, which star refuses;
fanout and hierarchical where the rollout has replicas; and auto, the plan refit picks by
itself, at the first bucket size), each bucket size and the three modes, appending every
prediction to OUTDIR/published.h5 with the row's published time and label. refit's best
prediction per row, among those whose memory fits the cluster (or among all, marked, when none
does), goes into results/published.md with the plan-independent lower bound, the published
time, its source and both ratios.
Nothing here is timed for pass/fail: the wall times go to stdout only, so the committed table
changes only when a prediction does.
"""
import json
import os
import subprocess
import sys
import time

MODES = "unfused,grouped,fused"
BUCKETS = ["256MiB", "1GiB", "0"]  # the default bucket, a larger one, the whole stage


def plans_for(row):
    if "bench" in row:
        return row["bench"]["plans"]
    rollout = row["refit"]["rollout"].split(",")
    plans = ["p2p"]
    if "ep" not in rollout:
        plans.append("star")
    if any(p.startswith("dp=") and p != "dp=1" for p in rollout):
        plans += ["fanout", "hierarchical"]
    return plans + ["auto"]


def simulate(refit, row, plan, bucket, h5):
    r = row["refit"]
    cmd = [refit, "simulate", "--model", r["model"], "--trainer", r["trainer"],
           "--rollout", r["rollout"], "--placement", r["placement"], "--cluster", r["cluster"],
           # mpi, as results/published.md was predicted before --transport auto (which
           # takes nccl or ipc on these GPU clusters), so that a rerun compares like with like.
           "--transport", "mpi",
           "--plan", plan, "--bucket-size", bucket, "--mode", MODES, "--json",
           "--published-s", repr(row["published_s"]), "--published-label", row["label"],
           "--output", h5]
    if "rollout_dtype" in r:
        cmd += ["--rollout-dtype", r["rollout_dtype"]]
    start = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.monotonic() - start
    if p.returncode != 0:
        # A plan that cannot serve the layouts is a finding of the table, not a failure.
        why = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"
        return None, why.removeprefix("refit: error: "), seconds
    return json.loads(p.stdout), None, seconds


def command_line(row):
    r = row["refit"]
    extra = "" if r["placement"] == "disaggregated" else f" --placement {r['placement']}"
    if "rollout_dtype" in r:
        extra += f" --rollout-dtype {r['rollout_dtype']}"
    return (f"refit simulate --model {r['model']} --trainer {r['trainer']} --rollout "
            f"{r['rollout']}{extra} --cluster {r['cluster']} --transport mpi")


def fmt_s(s):
    return f"{s:.4f} s" if s < 1 else f"{s:.3f} s" if s < 10 else f"{s:.1f} s"


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "build", "published")
    refit = os.environ.get("REFIT", os.path.join(root, "build", "refit"))
    table = os.environ.get("TABLE", os.path.join(root, "configs", "published", "refits.json"))
    md_path = os.environ.get("MD", os.path.join(root, "results", "published.md"))
    os.makedirs(outdir, exist_ok=True)
    h5 = os.path.join(outdir, "published.h5")
    if os.path.exists(h5):
        os.remove(h5)  # the script's own output: a second run must not count its runs twice
    rows = json.load(open(table))["rows"]
    results = []
    for row in rows:
        preds, refused = [], []
        bound = None
        for plan in plans_for(row):
            buckets = row.get("bench", {}).get("buckets", BUCKETS)
            for bucket in buckets[:1] if plan == "auto" else buckets:
                out, why, seconds = simulate(refit, row, plan, bucket, h5)
                print(f"{row['id']:32s} {plan:7s} bucket {bucket:7s} {seconds:7.1f} s wall"
                      + (f"  refused: {why}" if why else ""), flush=True)
                if why:
                    refused.append((plan, why))
                    continue
                bound = out["lower_bound_s"]
                if plan == "auto":
                    plan = "auto: " + out["plan"]
                for run in out["runs"]:
                    preds.append({"plan": plan, "bucket": bucket, "mode": run["mode"],
                                  "s": run["predicted_s"]["total"],
                                  "bottleneck": run["bottleneck"]["link"],
                                  "fits": run["memory"]["fits"]})
        fitting = [p for p in preds if p["fits"]]
        best = min(fitting or preds, key=lambda p: p["s"]) if preds else None
        results.append((row, preds, refused, best, bool(fitting), bound))
    write_md(md_path, rows, results, refit)
    print(f"wrote {md_path} and {h5}; refit report {h5} shows the same predictions")


def write_md(path, rows, results, refit):
    version = subprocess.run([refit, "--version"], capture_output=True, text=True).stdout.strip()
    L = []
    L.append("# The published refits beside refit's predictions")
    L.append("")
    L.append("Generated by `bench/published.sh` from `configs/published/refits.json` (the published")
    L.append("figures, their sources and the layouts refit simulates; schema in its README) with")
    L.append(f"`refit simulate` ({version or 'refit'}). refit's times are **predictions** of its link model")
    L.append("on the cluster files of `configs/clusters/` (docs/architecture.md, \"The simulation")
    L.append("model\"), not measurements; the published ones are the systems' own. refit's best is the")
    L.append("fastest prediction over the plans, bucket sizes (256 MiB, 1 GiB and the whole stage) and")
    L.append("modes whose memory fits the cluster's GPUs. The bound is the least time any plan could")
    L.append("take on that cluster (docs/architecture.md, \"The lower bound\"); / bound = refit")
    L.append("predicted / bound (1.5 is the aim); / published = refit predicted / published (below 1:")
    L.append("refit predicts itself faster). The same predictions, with the published time and label")
    L.append("on each run, are in the HDF5 file the script writes: `refit report OUTDIR/published.h5`.")
    L.append("In the tables of each row, ✗ marks a prediction whose memory does not fit the GPUs.")
    L.append("")
    L.append("| system | model | GPUs trainer+rollout | hardware | published layouts | published | refit layouts (cluster) | refit best: plan, mode, bucket | bound | predicted | bottleneck link | / bound | / published |")
    L.append("|---|---|---:|---|---|---:|---|---|---:|---:|---|---:|---:|")
    for row, preds, refused, best, fits, bound in results:
        g = row["gpus"]
        r = row["refit"]
        src = f"[{row['source']['name']}]({row['source']['url']})"
        layouts = f"`{r['trainer']}` → `{r['rollout']}`" + (
            f" {r['placement']}" if r["placement"] != "disaggregated" else "") + f" ({r['cluster']})"
        if best:
            bucket = "whole stage" if best["bucket"] == "0" else best["bucket"]
            how = f"{best['plan']}, {best['mode']}, {bucket}" + ("" if fits else " (does not fit)")
            pred, link = fmt_s(best["s"]), best["bottleneck"]
            ratio = f"{best['s'] / row['published_s']:.2f}"
            to_bound = f"{best['s'] / bound:.2f}"
        else:
            how, pred, link, ratio = "none: " + "; ".join(w for _, w in refused), "-", "-", "-"
            to_bound = "-"
        L.append(f"| {row['system']} | {row['model']} | {g['trainer']}+{g['rollout']} | "
                 f"{row['hardware']} | {row['published_layouts']} | {fmt_s(row['published_s'])} "
                 f"({src}) | {layouts} | {how} | {fmt_s(bound) if bound else '-'} | {pred} | "
                 f"{link} | {to_bound} | {ratio} |")
    L.append("")
    L.append("## Each row")
    L.append("")
    for row, preds, refused, best, fits, bound in results:
        L.append(f"### {row['system']}: {row['model']}")
        L.append("")
        L.append(f"- Published: {fmt_s(row['published_s'])}, {row['published_note']}; "
                 f"{row['source']['name']}, <{row['source']['url']}>.")
        L.append(f"- refit's choice: {row['refit_choice']}.")
        if row.get("not_expressible"):
            L.append(f"- Not expressed as published: {row['not_expressible']}.")
        if "bench" in row:
            L.append(f"- Simulated here: plans {', '.join(row['bench']['plans'])}, buckets "
                     f"{', '.join('whole stage' if b == '0' else b for b in row['bench']['buckets'])}"
                     f"; {row['bench']['why']}.")
        for plan, why in refused:
            L.append(f"- {plan}: refused by refit: {why}.")
        if not fits and preds:
            L.append("- No prediction fits the cluster's GPU memory; the best of all is shown.")
        L.append(f"- Command: `{command_line(row)}` with `--plan`, `--bucket-size` and "
                 f"`--mode {MODES}`.")
        L.append("")
        if preds:
            L.append("| plan | bucket | unfused | grouped | fused |")
            L.append("|---|---|---:|---:|---:|")
            keys = []
            for p in preds:
                if (p["plan"], p["bucket"]) not in keys:
                    keys.append((p["plan"], p["bucket"]))
            for plan, bucket in keys:
                cells = []
                for mode in ("unfused", "grouped", "fused"):
                    m = [p for p in preds if (p["plan"], p["bucket"], p["mode"]) == (plan, bucket, mode)]
                    cells.append(fmt_s(m[0]["s"]) + ("" if m[0]["fits"] else " ✗") if m else "-")
                L.append(f"| {plan} | {'whole stage' if bucket == '0' else bucket} | "
                         + " | ".join(cells) + " |")
            L.append("")
    with open(path, "w") as f:
        f.write("\n".join(L).rstrip("\n") + "\n")


if __name__ == "__main__":
    main()
