"""The Python binding (python/refit) under mpirun -np 2: the tiny model from trainer fsdp=2 to
rollout tp=2, colocated, over mpi. Errors raise refit.RefitError with refit's line; the job's
tensors match `refit plan --json`'s manifest; numpy arrays (or, with --torch, torch tensors) are
registered on both sides, moved, checked and recorded to argv[1], which tests/api/api_test.sh
compares with refit run's checksums. Exit 77 (skipped) without numpy, or with --torch without
torch."""

import ctypes
import sys

try:
    import numpy as np
except ImportError:
    print("SKIP: numpy is not installed")
    sys.exit(77)
use_torch = "--torch" in sys.argv  # else --python: numpy arrays
if use_torch:
    try:
        import torch
    except ImportError:
        print("SKIP: torch is not installed")
        sys.exit(77)

import refit  # noqa: E402

results = sys.argv[1]
EMBED = "model.embed_tokens.weight"


def expect_error(status, line, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except refit.RefitError as e:
        assert e.status == status, (e.status, str(e))
        assert str(e) == line, str(e)
        return
    raise AssertionError("no RefitError: %s" % line)


expect_error(1, "refit_job_create: option iters is refit run's, not the library's; leave it out "
             "(include/refit.h says why)", refit.Job, "tiny", "fsdp=2", "tp=2",
             options={"iters": 3})

# Host memory named, so that a machine with a GPU (where mpi would take device weights) runs
# the same job.
OPTIONS = {"placement": "colocated", "transport": "mpi", "mode": "fused", "memory": "host"}
job = refit.Job("tiny", "fsdp=2", "tp=2", options=OPTIONS)
rank = job.rank("trainer")
assert job.rank("rollout") == rank
assert job.roles == ["trainer", "rollout"], job.roles
assert (job.transport, job.memory) == ("mpi", "host")
plan = job.plan
assert plan["plan"] == "p2p" and plan["model"] == "tiny", plan
rollout = job.tensors("rollout")
manifest = plan["rollout_manifest"]
assert [(t["name"], list(t["shape"]), t["dtype"], t["bytes"]) for t in rollout] == [
    (m["name"], m["shape"], m["dtype"], m["bytes"]) for m in manifest]
trainer = job.tensors("trainer")
assert trainer[0] == {"name": EMBED, "dtype": "bf16", "shape": (512, 32), "bytes": 32768}, trainer[0]


def library_bytes(name):
    """A copy of the library's generated trainer shard."""
    addr, size = job.buffer("trainer", name)
    return bytes((ctypes.c_uint8 * size).from_address(addr))


if use_torch:
    sources = {t["name"]: torch.frombuffer(bytearray(library_bytes(t["name"])),
                                           dtype=torch.bfloat16).reshape(t["shape"]).clone()
               for t in trainer}
    outs = {t["name"]: torch.zeros(t["shape"], dtype=torch.bfloat16) for t in rollout}
    job.register("trainer", sources)
    expect_error(1, "refit_register: rollout tensor %s has strides [1, 256] (elements), which are "
                 "not contiguous; pass a contiguous copy (numpy.ascontiguousarray, torch's "
                 ".contiguous())" % EMBED, job.register, "rollout",
                 {EMBED: torch.zeros((64, 256), dtype=torch.bfloat16).t()})
    job.register("rollout", outs)
else:
    # bf16 arrays as numpy holds them without ml_dtypes: uint16, with the dtype named.
    sources = {t["name"]: np.frombuffer(library_bytes(t["name"]), dtype=np.uint16)
               .reshape(t["shape"]).copy() for t in trainer}
    outs = {t["name"]: np.zeros(t["shape"], dtype=np.uint16) for t in rollout}
    expect_error(1, "refit_register: trainer tensor %s is bf16, not uint16" % EMBED,
                 job.register, "trainer", sources)
    expect_error(1, "refit_register: rollout tensor %s has strides [128, 2] (elements), which "
                 "are not contiguous; pass a contiguous copy (numpy.ascontiguousarray, torch's "
                 ".contiguous())" % EMBED, job.register, "rollout",
                 {EMBED: np.zeros((256, 128), dtype=np.uint16)[:, ::2]}, dtype="bf16")
    expect_error(1, "refit_register: rollout tensor %s has shape [256, 64], not [64, 256]" % EMBED,
                 job.register, "rollout", {EMBED: np.zeros((64, 256), dtype=np.uint16)},
                 dtype="bf16")
    expect_error(1, "refit_register: this rank holds no rollout tensor named nope (15 rollout "
                 "tensors; refit_tensor_get lists them)", job.register, "rollout",
                 {"nope": np.zeros(4, dtype=np.float32)})
    job.register("trainer", sources, dtype="bf16")
    job.register("rollout", outs, dtype="bf16")
assert job.buffer("rollout", EMBED)[0] == (outs[EMBED].data_ptr() if use_torch
                                           else outs[EMBED].ctypes.data)

expect_error(1, "refit_verify: nothing was transferred yet; call refit_transfer first", job.verify)
job.transfer()
assert job.verify() == (-1, 0)  # the caller's trainer weights: checksums only
for name, out in outs.items():  # every rollout tensor was written
    assert bool((out != 0).any()), name
times = job.timings()
assert list(times) == ["setup", "reshape", "encode", "pack", "transfer", "unpack", "apply",
                       "total", "verify"], list(times)
assert times["total"] > 0 and times["transfer"] > 0
job.record(results)
expect_error(1, "refit_record: no transfer since the job began or its last record; call "
             "refit_transfer first", job.record, results)
job.close()

if use_torch and torch.cuda.is_available():
    # The same weights as CUDA tensors in a job of device memory (mpi stages them through
    # pinned host memory): the rollout tensors equal the host job's, byte for byte.
    torch.cuda.set_device(0)
    gpu = refit.Job("tiny", "fsdp=2", "tp=2", options=dict(OPTIONS, memory="device"))
    assert gpu.memory == "device", gpu.memory
    gpu.register("trainer", {n: t.cuda() for n, t in sources.items()})
    gouts = {n: torch.zeros_like(t, device="cuda") for n, t in outs.items()}
    gpu.register("rollout", gouts)
    gpu.transfer()
    assert gpu.verify() == (-1, 0)
    for name, out in outs.items():
        assert torch.equal(gouts[name].cpu().view(torch.int16), out.view(torch.int16)), name
    gpu.close()
    # Over ipc the peers map the caller's CUDA tensors themselves: small tensors share the
    # caching allocator's blocks, so each is offered as its block and an offset into it.
    ipc = refit.Job("tiny", "fsdp=2", "tp=2", options=dict(OPTIONS, transport="ipc",
                                                           memory="device"))
    assert (ipc.transport, ipc.memory) == ("ipc", "device")
    ipc.register("trainer", {n: t.cuda() for n, t in sources.items()})
    iouts = {n: torch.zeros_like(t, device="cuda") for n, t in outs.items()}
    ipc.register("rollout", iouts)
    torch.cuda.synchronize()
    ipc.transfer()
    assert ipc.verify() == (-1, 0)
    for name, out in outs.items():
        assert torch.equal(iouts[name].cpu().view(torch.int16), out.view(torch.int16)), name
    ipc.close()
    print("rank %d: CUDA tensors ok (mpi and ipc)" % rank)
print("rank %d: ok (%s)" % (rank, refit.version()))
