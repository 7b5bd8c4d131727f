#!/usr/bin/env python3
"""The block-FP8 bytes PyTorch makes on a GPU, for refit's to be compared with.

    fp8_torch.py BF16.safetensors REFIT_FP8.safetensors OUT_FP8.safetensors

Reads the bf16 checkpoint `refit checkpoint` wrote, quantizes on the GPU every tensor that
refit's block-FP8 checkpoint of the same weights (`refit checkpoint --dtype fp8`, the CPU
reference) holds as F8_E4M3, by DeepGEMM's per_block_cast_to_fp8 as written below, and writes
the result in the same layout (X.weight F8_E4M3, X.weight_scale_inv F32, every other tensor as
it was). It prints, per tensor and in total, how many fp8 bytes and scales differ from refit's
file; `refit verify RUN.h5 --checkpoint OUT_FP8.safetensors` then compares a GPU run's
checksums with PyTorch's bytes. Needs torch with CUDA; no numpy, no safetensors package.
"""
import ctypes
import json
import struct
import sys

import torch


def ceil_div(a, b):
    return (a + b - 1) // b


def per_block_cast_to_fp8(x):
    # DeepGEMM's per_block_cast_to_fp8 (its tests' reference for block-FP8 weights), line by
    # line: zero padding to whole 128x128 blocks, fp32 amax per block clamped to 1e-4,
    # x * (448 / amax) in fp32 cast to float8_e4m3fn, and amax / 448 as the scale.
    m, n = x.shape
    padded = torch.zeros((ceil_div(m, 128) * 128, ceil_div(n, 128) * 128), dtype=x.dtype,
                         device=x.device)
    padded[:m, :n] = x
    view = padded.view(-1, 128, padded.size(1) // 128, 128)
    amax = view.abs().float().amax(dim=(1, 3), keepdim=True).clamp(1e-4)
    scaled = (view * (448.0 / amax)).to(torch.float8_e4m3fn)
    return (scaled.view_as(padded)[:m, :n].contiguous(),
            (amax / 448.0).view(view.size(0), view.size(2)))


def read_header(path):
    f = open(path, "rb")
    n = struct.unpack("<Q", f.read(8))[0]
    head = json.loads(f.read(n))
    head.pop("__metadata__", None)
    return f, head, 8 + n


def read_tensor(f, base, entry):
    a, b = entry["data_offsets"]
    f.seek(base + a)
    return f.read(b - a)


def as_u8(data):
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def raw(t):
    t = t.contiguous().cpu()
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())


def main():
    bf16_path, ref_path, out_path = sys.argv[1:4]
    fb, head_b, base_b = read_header(bf16_path)
    fr, head_r, base_r = read_header(ref_path)
    out = []  # (name, dtype, shape, bytes)
    tensors = differ_bytes = differ_scales = total_bytes = total_scales = 0
    for name, entry in head_b.items():
        data = read_tensor(fb, base_b, entry)
        if head_r.get(name, {}).get("dtype") != "F8_E4M3":
            out.append((name, entry["dtype"], entry["shape"], data))
            continue
        x = torch.frombuffer(bytearray(data), dtype=torch.bfloat16).view(*entry["shape"])
        q, s = per_block_cast_to_fp8(x.cuda())
        qb, sb = raw(q.view(torch.uint8)), raw(s.float())
        scale_name = name + "_scale_inv"
        rq = read_tensor(fr, base_r, head_r[name])
        rs = read_tensor(fr, base_r, head_r[scale_name])
        nq = int((q.view(torch.uint8).cpu().flatten() != as_u8(rq)).sum())
        ns = int((s.float().cpu().flatten().view(torch.int32) != as_u8(rs).view(torch.int32)).sum())
        tensors += 1
        differ_bytes += nq
        differ_scales += ns
        total_bytes += len(qb)
        total_scales += len(sb) // 4
        if nq or ns:
            print(f"{name}: {nq} of {len(qb)} fp8 bytes and {ns} of {len(sb) // 4} scales differ")
        out.append((name, "F8_E4M3", list(q.shape), qb))
        out.append((scale_name, "F32", list(s.shape), sb))
    header, offset = {}, 0
    for name, dtype, shape, data in out:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(out_path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for _, _, _, data in out:
            f.write(data)
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}: per_block_cast_to_fp8 of "
          f"{tensors} tensors, {total_bytes} fp8 bytes and {total_scales} scales; "
          f"{differ_bytes} bytes and {differ_scales} scales differ from refit's CPU reference")
    return 1 if differ_bytes or differ_scales else 0


if __name__ == "__main__":
    sys.exit(main())
