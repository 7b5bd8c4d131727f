#!/usr/bin/python3
"""Checks a refit results file against the schema of results/README.md with h5py: every group,
dataset and attribute the schema promises is there, with the right type and shape, and the
numbers agree with each other (summary vs timings, bandwidth vs its formula).

usage: results_h5py.py FILE [--runs N] [--ok]
  --runs N  the file must hold exactly N runs, numbered 0000 .. N-1
  --ok      every tensor of every run must have ok == 1 (checksums all match)
Exits 0 when the file conforms, 1 with one line per problem otherwise, 77 without h5py.
Run it with Debian's /usr/bin/python3 (python3-h5py)."""
import json
import math
import re
import sys

try:
    import h5py
    import numpy as np
except ImportError as e:
    print(f"results_h5py: skipped, h5py is not importable: {e}")
    sys.exit(77)

PHASES = ["setup", "reshape", "encode", "pack", "transfer", "unpack", "apply", "total", "verify"]
ROOT_STRINGS = ["refit_format", "refit_version", "git_commit", "created", "command_line",
                "hosts", "mpi_version", "hdf5_version", "hwloc_version"]
RUN_STRINGS = ["model", "model_type", "dtype", "trainer", "trainer_style", "trainer_order",
               "rollout", "placement", "plan", "mode", "transport", "verify", "config_json",
               "command_line", "hosts", "gpu_versions", "written", "status", "formula_algbw",
               "formula_aggbw", "units"]
RUN_INTS = ["bucket_size", "seed", "exit_code", "iterations", "ranks", "replicas",
            "model_bytes", "replica_bytes", "transfer_bytes", "pieces", "messages", "wrong",
            "checksum_bad", "peak_staging_bytes", "peak_rss_bytes"]
RUN_FLOATS = ["time_median_s", "time_p99_s", "algbw_GBps", "aggbw_GBps"]
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")

problems = []


def fail(where, what):
    problems.append(f"{where}: {what}")


def want_attrs(obj, where, names, kind):
    for name in names:
        if name not in obj.attrs:
            fail(where, f"attribute {name} is missing")
            continue
        value = obj.attrs[name]
        ok = {"str": lambda v: isinstance(v, str),
              "int": lambda v: isinstance(v, (int, np.integer)),
              "float": lambda v: isinstance(v, (float, np.floating))}[kind](value)
        if not ok:
            fail(where, f"attribute {name} is {type(value).__name__}, expected {kind}")


def want_fields(dset, where, fields):
    names = dset.dtype.names or ()
    for f in fields:
        if f not in names:
            fail(where, f"field {f} is missing (fields: {', '.join(names)})")


def near(a, b):
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def check_root(f):
    want_attrs(f, "/", ROOT_STRINGS, "str")
    if f.attrs.get("refit_format") != "refit-results/2":
        fail("/", f"refit_format is {f.attrs.get('refit_format')!r}")
    if not ISO_UTC.match(str(f.attrs.get("created", ""))):
        fail("/", f"created {f.attrs.get('created')!r} is not UTC ISO-8601")
    if "gpu_versions" in f.attrs and not f.attrs["gpu_versions"]:
        fail("/", "gpu_versions is present but empty")
    if not isinstance(f.get("runs"), h5py.Group):
        fail("/", "group /runs is missing")
        return []
    names = sorted(f["runs"].keys())
    for n in names:
        if not re.fullmatch(r"\d{4,}", n):
            fail("/runs", f"member {n} is not a run number")
    return names


def check_timings(g, where, iterations, ranks):
    t = g.get("timings")
    if not isinstance(t, h5py.Dataset):
        return fail(where, "dataset timings is missing")
    if t.shape != (iterations, ranks, len(PHASES)) or t.dtype != np.float64:
        fail(where, f"timings is {t.shape} {t.dtype}, expected ({iterations}, {ranks}, "
             f"{len(PHASES)}) float64")
    if list(t.attrs.get("phases", [])) != PHASES:
        fail(where, f"timings phases are {list(t.attrs.get('phases', []))}")
    want_attrs(t, where + "/timings", ["units", "description"], "str")
    if t.attrs.get("units") != "s":
        fail(where, "timings units is not 's'")
    if t.attrs.get("order") != "iteration, rank, phase":
        fail(where, f"timings order is {t.attrs.get('order')!r}, not 'iteration, rank, phase'")
    # setup and verify are one value per rank, repeated in every iteration: in [iteration, rank,
    # phase] order each rank's column holds it unchanged (rank by rank it would not).
    a = t[()]
    if a.shape[0] > 1 and a.shape[1] > 1:
        for p in ("setup", "verify"):
            col = a[:, :, PHASES.index(p)]
            if not (col == col[0]).all():
                fail(where, f"timings {p} differs between the iterations of one rank")


def check_summary(g, where, iterations):
    s = g.get("summary")
    if not isinstance(s, h5py.Dataset):
        return fail(where, "dataset summary is missing")
    want_fields(s, where + "/summary", ["phase", "min", "median", "p99", "max", "mean"])
    want_attrs(s, where + "/summary", ["units", "description", "formula_algbw",
                                       "formula_aggbw"], "str")
    if s.shape != (len(PHASES),):
        return fail(where, f"summary shape is {s.shape}, expected ({len(PHASES)},)")
    rows = s[()]
    if [p.decode() for p in rows["phase"]] != PHASES:
        fail(where, "summary phases are out of order")
    t = g["timings"][()] if "timings" in g else None
    for i, p in enumerate(PHASES):
        r = rows[i]
        if iterations and not (r["min"] <= r["median"] <= r["p99"] <= r["max"]):
            fail(where, f"summary {p}: min <= median <= p99 <= max does not hold")
        if t is not None and iterations and t.shape[0] == iterations:
            slowest = t[:, :, i].max(axis=1)
            if not (near(r["min"], slowest.min()) and near(r["max"], slowest.max())
                    and near(r["median"], float(np.median(slowest)))):
                fail(where, f"summary {p} disagrees with max over ranks of timings")
    total = rows[PHASES.index("total")]
    a = g.attrs
    if iterations and not near(float(total["median"]), float(a.get("time_median_s", -1))):
        fail(where, "time_median_s differs from summary total median")
    if iterations and total["median"] > 0:
        algbw = a.get("replica_bytes", 0) / total["median"] / 1e9
        aggbw = a.get("transfer_bytes", 0) / total["median"] / 1e9
        if not near(algbw, float(a.get("algbw_GBps", -1))):
            fail(where, f"algbw_GBps {a.get('algbw_GBps')} != formula {algbw}")
        if not near(aggbw, float(a.get("aggbw_GBps", -1))):
            fail(where, f"aggbw_GBps {a.get('aggbw_GBps')} != formula {aggbw}")


def check_tensors(g, where, replicas, want_ok):
    t = g.get("tensors")
    if not isinstance(t, h5py.Dataset):
        return fail(where, "dataset tensors is missing"), 0
    want_fields(t, where + "/tensors", ["name", "dtype", "ndim", "shape", "bytes",
                                        "trainer_checksum", "rollout_checksum",
                                        "reference_checksum", "ok"])
    for name in ["replicas", "has_trainer_checksum", "has_rollout_checksum", "has_reference"]:
        want_attrs(t, where + "/tensors", [name], "int")
    want_attrs(t, where + "/tensors", ["units_bytes", "checksum", "ok_values"], "str")
    if len(t.shape) != 1 or t.shape[0] == 0:
        return fail(where, f"tensors shape is {t.shape}"), 0
    rows = t[()]
    if rows["shape"].shape != (t.shape[0], 2):
        fail(where, f"tensors shape field is {rows['shape'].shape}")
    if rows["rollout_checksum"].shape != (t.shape[0], max(replicas, 1)):
        fail(where, f"rollout_checksum is {rows['rollout_checksum'].shape}, replicas {replicas}")
    if any(not n for n in rows["name"]):
        fail(where, "a tensor has no name")
    if not set(rows["ndim"]) <= {1, 2} or any(rows["shape"][rows["ndim"] == 1][:, 1] != 1):
        fail(where, "ndim/shape disagree")
    if not set(rows["ok"]) <= {-1, 0, 1}:
        fail(where, f"ok holds {set(rows['ok'])}")
    # An fp8 run's quantized tensors (their rollout checksum is of fp8 bytes, unlike the
    # trainer's) were compared with nothing when one replica had no checkpoint to meet: -1.
    dtype = g.attrs.get("rollout_dtype", "model")
    lone_fp8 = (dtype.decode() if isinstance(dtype, bytes) else str(dtype)) == "fp8" and replicas <= 1
    unchecked = (rows["ok"] == -1) & (rows["rollout_checksum"][:, 0] != rows["trainer_checksum"])
    wrong = (rows["ok"] != 1) & ~(unchecked & lone_fp8)
    if want_ok and any(wrong):
        bad = [n.decode() for n, w in zip(rows["name"], wrong) if w]
        fail(where, f"tensors not ok: {', '.join(bad[:5])}")
    return None, t.shape[0]


SKIPPED_STRINGS = ["model", "trainer", "rollout", "placement", "plan", "mode", "transport",
                   "config_json", "command_line", "written", "status", "skip_reason"]
LIMITS = ["memcpy", "device_copy", "mpi", "nccl"]
SETUP_STEPS = ["plan", "control", "gpu", "transport", "arenas", "register"]


def check_sweep_and_limits(g, where):
    a = g.attrs
    if ("sweep_index" in a) != ("sweep_size" in a):
        fail(where, "sweep_index and sweep_size come together")
    elif "sweep_index" in a:
        want_attrs(g, where, ["sweep_index", "sweep_size"], "int")
        if not 1 <= int(a["sweep_index"]) <= int(a["sweep_size"]):
            fail(where, f"sweep_index {a['sweep_index']} is not in 1..{a['sweep_size']}")
    for limit in LIMITS:
        if f"limit_{limit}_s" in a:
            want_attrs(g, where, [f"limit_{limit}_s", f"limit_{limit}_ratio"], "float")
            if not a[f"limit_{limit}_s"] > 0:
                fail(where, f"limit_{limit}_s is not positive")


def check_skipped(g, where):
    """A skipped sweep combination: its configuration and reason, no datasets."""
    want_attrs(g, where, SKIPPED_STRINGS, "str")
    want_attrs(g, where, ["bucket_size", "exit_code"], "int")
    if g.attrs.get("exit_code") != 0 or not g.attrs.get("skip_reason"):
        fail(where, "a skipped run needs exit_code 0 and a skip_reason")
    for member in ["timings", "summary", "tensors"]:
        if member in g:
            fail(where, f"a skipped run holds {member}")


def check_run(f, name, want_ok):
    where = f"/runs/{name}"
    g = f["runs"][name]
    check_sweep_and_limits(g, where)
    if g.attrs.get("status") == "skipped":
        return check_skipped(g, where)
    want_attrs(g, where, RUN_STRINGS, "str")
    want_attrs(g, where, RUN_INTS, "int")
    want_attrs(g, where, RUN_FLOATS, "float")
    for key in ["config_json", "units"]:
        try:
            json.loads(g.attrs.get(key, ""))
        except ValueError:
            fail(where, f"{key} is not JSON")
    if not ISO_UTC.match(str(g.attrs.get("written", ""))):
        fail(where, "written is not UTC ISO-8601")
    # The job's own setup, the slowest rank's seconds per step: every measured run has it.
    setup = [f"setup_{step}_s" for step in SETUP_STEPS]
    want_attrs(g, where, setup, "float")
    if any(not float(g.attrs.get(k, -1)) >= 0 for k in setup):
        fail(where, "a setup_<step>_s attribute is negative")
    iterations, ranks = int(g.attrs.get("iterations", -1)), int(g.attrs.get("ranks", -1))
    check_timings(g, where, iterations, ranks)
    check_summary(g, where, iterations)
    _, tensors = check_tensors(g, where, int(g.attrs.get("replicas", 0)), want_ok)

    s = g.get("shards")
    if not isinstance(s, h5py.Dataset) or len(s.shape) != 1:
        fail(where, "dataset shards is missing or not 1-D")
    else:
        want_fields(s, where + "/shards", ["rank", "tensor", "role", "xxh3"])
        want_attrs(s, where + "/shards", ["description", "role_values"], "str")
        rows = s[()]
        if s.shape[0] and (rows["rank"].min() < 0 or rows["rank"].max() >= ranks or
                           rows["tensor"].min() < 0 or rows["tensor"].max() >= tensors or
                           not set(rows["role"]) <= {0, 1}):
            fail(where, "shards hold a rank, tensor or role out of range")

    p = g.get("plan")
    if not isinstance(p, h5py.Group):
        fail(where, "group plan is missing")
    else:
        want_attrs(p, where + "/plan", ["pieces", "messages", "transfer_bytes",
                                        "reshape_bytes"], "int")
        want_attrs(p, where + "/plan", ["units"], "str")
        # Fanout's forward stage has totals of its own; no other plan writes them.
        fanout = g.attrs.get("plan") == "fanout"
        forward = ["forward_send_bytes", "forward_recv_bytes"]
        if fanout:
            want_attrs(p, where + "/plan", ["forward_bytes", "forward_depth"], "int")
        for d in ["send_bytes", "recv_bytes"] + (forward if fanout else []):
            ds = p.get(d)
            if not isinstance(ds, h5py.Dataset) or len(ds.shape) != 1 or ds.dtype != np.int64:
                fail(where, f"plan/{d} is missing or not 1-D int64")
            elif ds.attrs.get("units") != "bytes":
                fail(where, f"plan/{d} units is not 'bytes'")
        if fanout and all(isinstance(p.get(d), h5py.Dataset) for d in forward):
            if int(p["forward_send_bytes"][()].sum()) != int(p.attrs["forward_bytes"]) or \
                    int(p["forward_recv_bytes"][()].sum()) != int(p.attrs["forward_bytes"]):
                fail(where, "plan/forward_send_bytes and forward_recv_bytes do not add up to "
                            "forward_bytes")
        if not fanout and any(d in p for d in forward):
            fail(where, "a plan that forwards nothing has forward datasets")

    pl = g.get("placement")
    if not isinstance(pl, h5py.Dataset):
        fail(where, "dataset placement is missing")
    else:
        want_fields(pl, where + "/placement", ["rank", "host", "pid", "trainer_rank",
                                               "rollout_rank", "gpu", "bus_id", "cpus", "numa",
                                               "nic"])
        if pl.shape != (ranks,):
            fail(where, f"placement shape is {pl.shape}, expected ({ranks},)")
        elif list(pl[()]["rank"]) != list(range(ranks)):
            fail(where, "placement ranks are not 0 .. ranks-1")
        elif set(pl.dtype.names or ()) >= {"gpu", "bus_id", "cpus", "numa", "nic"}:
            for row in pl[()]:
                if (row["gpu"] < 0) != (row["bus_id"] == b"-") or row["numa"] < -1:
                    fail(where, f"placement of rank {row['rank']}: gpu {row['gpu']}, bus_id "
                         f"{row['bus_id']!r}, numa {row['numa']} disagree")
                if not re.fullmatch(rb"-|\d+(-\d+)?(,\d+(-\d+)?)*", row["cpus"]):
                    fail(where, f"placement cpus {row['cpus']!r} is not a CPU list or '-'")
                if not row["nic"]:
                    fail(where, f"placement of rank {row['rank']} has an empty nic")

    ln = g.get("links")
    if not isinstance(ln, h5py.Dataset) or len(ln.shape) != 1:
        fail(where, "dataset links is missing or not 1-D")
    else:
        want_fields(ln, where + "/links", ["src", "dst", "bytes", "distance"])
        want_attrs(ln, where + "/links", ["units", "description"], "str")
        classes = {b"process", b"gpu", b"switch", b"numa", b"node", b"network"}
        for row in (ln[()] if set(ln.dtype.names or ()) >= {"src", "dst", "bytes", "distance"}
                    else []):
            if not (0 <= row["src"] < ranks and 0 <= row["dst"] < ranks and row["bytes"] > 0
                    and row["distance"] in classes):
                fail(where, f"link {row['src']} -> {row['dst']} ({row['bytes']} bytes, "
                     f"{row['distance']!r}) is out of range")
            if (row["src"] == row["dst"]) != (row["distance"] == b"process"):
                fail(where, f"link {row['src']} -> {row['dst']} is {row['distance']!r}")

    e = g.get("env")
    if not isinstance(e, h5py.Dataset) or len(e.shape) != 1:
        fail(where, "dataset env is missing or not 1-D")
    else:
        for line in e.asstr()[()]:
            if "=" not in line or not line.startswith(("NCCL_", "OMPI_", "UCX_", "HWLOC_")):
                fail(where, f"env line {line!r} is not NAME=value of a tuning variable")


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    path, want_runs, want_ok = argv[1], None, False
    args = argv[2:]
    while args:
        if args[0] == "--runs" and len(args) > 1:
            want_runs, args = int(args[1]), args[2:]
        elif args[0] == "--ok":
            want_ok, args = True, args[1:]
        else:
            print(f"results_h5py: unknown argument {args[0]}")
            return 2
    with h5py.File(path, "r") as f:
        names = check_root(f)
        if want_runs is not None and names != [f"{i:04d}" for i in range(want_runs)]:
            fail("/runs", f"holds {names}, expected 0000 .. {want_runs - 1:04d}")
        for name in names:
            check_run(f, name, want_ok)
    for p in problems:
        print(f"results_h5py: {path}: {p}")
    if problems:
        return 1
    print(f"results_h5py: {path}: {len(names)} run(s) conform to the schema")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
