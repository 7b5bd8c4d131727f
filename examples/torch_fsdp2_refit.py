"""Refit a PyTorch FSDP2 trainer's weights into vLLM-shaped rollout tensors through librefit.

    mpirun -np 2 python3 examples/torch_fsdp2_refit.py --model llama-3.1-8b \\
        --trainer fsdp=1 --rollout tp=1 --transport ipc --iters 10 --output example.h5

Trainer processes build a Llama-shaped model under Hugging Face names on the meta device, shard
it with FSDP2 (`fully_shard` per decoder layer and at the root, over a process group of the
trainer ranks alone) and register each parameter's local shard (`DTensor.to_local()`, in place:
no copy) with refit. Rollout processes allocate their tensors under vLLM's names and shapes, as
the job's rollout manifest lists them, and register those. Each timed iteration stands in for
an optimizer step: the trainer writes weight version k into its shards in place, then refit
moves version k into the rollout tensors. After the last one:

  - every trainer rank checks that each FSDP2 parameter's `full_tensor()` is the reference
    version (so the shards refit read are what FSDP2 holds);
  - every rollout rank rebuilds the reference of each of its tensors with torch, the way vLLM
    loads a Hugging Face checkpoint (q, k, v into qkv_proj and gate, up into gate_up_proj,
    then its tensor-parallel slice: rows of column-parallel layers, columns of row-parallel
    ones, vocabulary rows padded to a multiple of 64), and compares it bit for bit;
  - refit_verify compares the checksums of every replica with the trainer's.

Weight version k of a tensor is seeded normal values (scaled by 0.02, rounded to bf16) from a
generator keyed by the seed, k and the tensor's name, so every process computes any version of
any tensor without the others. The weights live on the GPU (`--device cuda`, transports ipc,
nccl or mpi) or in host memory (`--device cpu`, transport mpi or the default, with a gloo group
for FSDP2). The trainer's group meets at MASTER_ADDR:MASTER_PORT (default 127.0.0.1:29533).

Prints, on each rank, the median over the timed iterations of refit's own phases (`total`, as
`refit run` reports it, after the iteration barrier) and of the wall time of the
`Job.transfer()` call; `--output` appends the timed iterations as one run to an HDF5 results
file, as `refit run --output` does, so `refit report` compares the two.
"""

import argparse
import json
import os
import statistics
import sys
import time
import zlib

try:
    import torch
    import torch.distributed as dist
    from torch import nn
except ImportError:
    print("SKIP: torch is not installed")
    sys.exit(77)

import refit

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="tiny",
                   help="a model of configs/models (llama architecture) or a config.json path")
    p.add_argument("--trainer", default="fsdp=1", help="fsdp=N (FSDP2 over N trainer ranks)")
    p.add_argument("--rollout", default="tp=1", help="vLLM's layout: tp=N[,dp=M]")
    p.add_argument("--placement", default="disaggregated", choices=["disaggregated", "colocated"])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--transport", default="auto")
    p.add_argument("--mode", default="fused", choices=["unfused", "grouped", "fused"])
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--output", help="HDF5 results file to append the timed run to")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="any other option of `refit run --help` by its long name (repeatable)")
    return p.parse_args()


def load_config(model):
    path = model if model.endswith(".json") else os.path.join(REPO, "configs", "models",
                                                              model + ".json")
    with open(path) as f:
        cfg = json.load(f)
    if cfg.get("model_type") != "llama":
        sys.exit("torch_fsdp2_refit: %s is a %s model; this example builds Llama-shaped models "
                 "(model_type llama)" % (model, cfg.get("model_type")))
    cfg.setdefault("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    return cfg


class Weight(nn.Module):
    def __init__(self, *shape):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(*shape, dtype=torch.bfloat16))


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, h = c["hidden_size"], c["head_dim"]
        q, kv = c["num_attention_heads"] * h, c["num_key_value_heads"] * h
        self.q_proj, self.k_proj, self.v_proj = Weight(q, d), Weight(kv, d), Weight(kv, d)
        self.o_proj = Weight(d, q)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, f = c["hidden_size"], c["intermediate_size"]
        self.gate_proj, self.up_proj, self.down_proj = Weight(f, d), Weight(f, d), Weight(d, f)


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn, self.mlp = Attention(c), MLP(c)
        self.input_layernorm = Weight(c["hidden_size"])
        self.post_attention_layernorm = Weight(c["hidden_size"])


class Decoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = Weight(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        self.norm = Weight(c["hidden_size"])


class LlamaShaped(nn.Module):
    """The parameters of LlamaForCausalLM under their Hugging Face names (no forward: the
    example refits weights, it does not train)."""

    def __init__(self, c):
        super().__init__()
        self.model = Decoder(c)
        if not c.get("tie_word_embeddings", False):
            self.lm_head = Weight(c["vocab_size"], c["hidden_size"])


def version_tensor(name, shape, version, seed, device):
    """Weight version `version` of tensor `name`, the same in every process."""
    g = torch.Generator(device=device)
    g.manual_seed((seed * 1000003 + version * 7919 + zlib.crc32(name.encode())) % (1 << 63))
    full = torch.randn(shape, generator=g, device=device, dtype=torch.float32)
    return (full * 0.02).to(torch.bfloat16)


def hf_shapes(c):
    """{Hugging Face name: shape} of the model's tensors."""
    with torch.device("meta"):
        model = LlamaShaped(c)
    return {n: tuple(p.shape) for n, p in model.named_parameters()}


def vllm_reference(name, c, tp, r, full, shapes):
    """Rollout tensor `name` of tp rank r as vLLM loads it from the Hugging Face tensors
    (full(hf_name)); returns (tensor, rows that hold weights: vocabulary padding excluded)."""
    h = c["head_dim"]
    nq, nkv = c["num_attention_heads"], c["num_key_value_heads"]

    def rows(t, parts, i):
        n = t.shape[0] // parts
        return t[i * n:(i + 1) * n]

    def cols(t, parts, i):
        n = t.shape[1] // parts
        return t[:, i * n:(i + 1) * n]

    if name.endswith("self_attn.qkv_proj.weight"):
        base = name[:-len("qkv_proj.weight")]
        q = rows(full(base + "q_proj.weight"), tp, r)
        # kv heads split over tp, or each replicated over tp / nkv ranks when fewer than tp.
        kv_part, kv_index = (tp, r) if nkv >= tp else (nkv, r // (tp // nkv))
        k = rows(full(base + "k_proj.weight"), kv_part, kv_index)
        v = rows(full(base + "v_proj.weight"), kv_part, kv_index)
        out = torch.cat([q, k, v])
        assert q.shape[0] == nq * h // tp
        return out, out.shape[0]
    if name.endswith("mlp.gate_up_proj.weight"):
        base = name[:-len("gate_up_proj.weight")]
        out = torch.cat([rows(full(base + "gate_proj.weight"), tp, r),
                         rows(full(base + "up_proj.weight"), tp, r)])
        return out, out.shape[0]
    if name.endswith("self_attn.o_proj.weight") or name.endswith("mlp.down_proj.weight"):
        out = cols(full(name), tp, r)
        return out, out.shape[0]
    if name in ("model.embed_tokens.weight", "lm_head.weight"):
        hf = name if name in shapes else "model.embed_tokens.weight"  # tied
        table = full(hf)
        vocab = table.shape[0]
        padded = (vocab + 63) // 64 * 64
        per = padded // tp
        lo, hi = r * per, min((r + 1) * per, vocab)
        return table[lo:hi], max(hi - lo, 0)
    return full(name), full(name).shape[0]  # norms: replicated


def trainer_side(job, args, c, device):
    """Builds the FSDP2 model of this trainer rank and registers its local shards."""
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch 2.4-2.5
        from torch.distributed._composable.fsdp import fully_shard
    from torch.distributed.device_mesh import init_device_mesh

    ranks = job.plan["trainer_ranks"]
    if not dist.is_initialized():
        addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
        port = os.environ.get("MASTER_PORT", "29533")
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                init_method="tcp://%s:%s" % (addr, port),
                                rank=job.rank("trainer"), world_size=ranks)
    mesh = init_device_mesh(device.type, (ranks,))
    with torch.device("meta"):
        model = LlamaShaped(c)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.to_empty(device=device)
    params = dict(model.named_parameters())
    held = {t["name"] for t in job.tensors("trainer")}
    missing = held - set(params)
    if missing:
        sys.exit("torch_fsdp2_refit: refit lists trainer tensors the model lacks: %s"
                 % sorted(missing)[:3])
    # Registered in place: refit reads FSDP2's own shard memory at every transfer.
    job.register("trainer", {n: params[n].to_local() for n in held})
    return model, params, mesh


@torch.no_grad()
def write_version(params, version, args, device, trainer_rank, ranks):
    """The stand-in for an optimizer step: version `version` into every local shard (FSDP2
    shards dim 0 in equal chunks, as the layouts refit accepts divide evenly)."""
    for name, p in params.items():
        full = version_tensor(name, tuple(p.shape), version, args.seed, device)
        local = p.to_local()
        local.copy_(full.chunk(ranks, dim=0)[trainer_rank])


def main():
    args = parse_args()
    c = load_config(args.model)
    if args.transport == "auto" and args.device == "cpu":
        args.transport = "mpi"  # auto would take shm, whose peers map only refit's own memory
    options = {"transport": args.transport, "mode": args.mode, "placement": args.placement,
               "trainer-style": "fsdp2", "memory": "device" if args.device == "cuda" else "host",
               "seed": args.seed}
    options.update(kv.split("=", 1) for kv in args.option)
    job = refit.Job(args.model, args.trainer, args.rollout, options=options)
    if "tp=1" not in job.plan["trainer"].split(","):
        sys.exit("torch_fsdp2_refit: the example's trainer is FSDP2 alone; give --trainer fsdp=N")
    # refit chose this process's GPU (if it set one); torch uses the same.
    if args.device == "cuda":
        torch.cuda.set_device(torch.cuda.current_device())
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    roles = job.roles
    trainer = rollout = None
    if "trainer" in roles:
        model, trainer, mesh = trainer_side(job, args, c, device)
    if "rollout" in roles:
        rollout = {t["name"]: torch.zeros(t["shape"], dtype=torch.bfloat16, device=device)
                   for t in job.tensors("rollout")}
        job.register("rollout", rollout)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    walls, totals, transfers = [], [], []
    version = 0
    for it in range(args.warmup + args.iters):
        version = it + 1
        if trainer is not None:
            write_version(trainer, version, args, device, job.rank("trainer"),
                          job.plan["trainer_ranks"])
        sync()  # what the trainer wrote has landed before refit reads it
        t0 = time.perf_counter()
        job.transfer()
        wall = time.perf_counter() - t0
        if it == args.warmup - 1 and args.output:
            job.record(args.output + ".warmup.h5")  # the warm-up's transfers, out of the run
        if it >= args.warmup:
            phases = job.timings()
            walls.append(wall)
            totals.append(phases["total"])
            transfers.append(phases["transfer"])
    wrong, bad = job.verify()  # checksums of every replica against the trainer's
    if args.output and args.iters:
        job.record(args.output)  # the timed iterations and the verdict of the checksums
        for scratch in (args.output + ".warmup.h5", args.output + ".warmup.h5.lock"):
            try:
                os.unlink(scratch)  # written by rank 0 alone
            except FileNotFoundError:
                pass

    who = "trainer %d" % job.rank("trainer") if trainer is not None else \
        "rollout %d" % job.rank("rollout")
    if trainer is not None:
        for name, p in trainer.items():
            ref = version_tensor(name, tuple(p.shape), version, args.seed, device)
            if not torch.equal(p.full_tensor(), ref):
                sys.exit("torch_fsdp2_refit: trainer %s: FSDP2's full_tensor() of %s is not "
                         "version %d" % (who, name, version))
        print("trainer rank %d: %d FSDP2 parameters' full_tensor() equal version %d"
              % (job.rank("trainer"), len(trainer), version))
    if rollout is not None:
        tp = int(dict(kv.split("=") for kv in job.plan["rollout"].split(","))["tp"])
        r = job.rank("rollout") % tp
        shapes = hf_shapes(c)
        cache = {}

        def full(hf):
            if hf not in cache:
                cache.clear()  # one reference tensor alive at a time
                cache[hf] = version_tensor(hf, shapes[hf], version, args.seed, device)
            return cache[hf]

        checked = 0
        for name, got in rollout.items():
            ref, real = vllm_reference(name, c, tp, r, full, shapes)
            if tuple(ref.shape[1:]) != tuple(got.shape[1:]) or ref.shape[0] > got.shape[0] or \
                    not torch.equal(got[:real].view(torch.int16), ref[:real].view(torch.int16)):
                sys.exit("torch_fsdp2_refit: rollout rank %d: %s differs from vLLM's load of "
                         "version %d" % (job.rank("rollout"), name, version))
            checked += real * (got[0].numel() if got.dim() > 1 else 1) * 2
        print("rollout rank %d: %d tensors equal vLLM's load of version %d bit for bit (%d bytes)"
              % (job.rank("rollout"), len(rollout), version, checked))
    med = statistics.median
    if totals:
        print("%s: %s over %s, %d iterations: refit total %.3f ms (transfer %.3f ms), "
              "Job.transfer() wall %.3f ms, checksums: %d tensors differ"
              % (who, args.model, job.transport, len(totals), 1e3 * med(totals),
                 1e3 * med(transfers), 1e3 * med(walls), bad))
    job.close()
    if trainer is not None and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
