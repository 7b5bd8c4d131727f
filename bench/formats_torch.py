#!/usr/bin/env python3
"""Every quantized format's bytes as PyTorch makes them on a GPU, against refit's files.

    formats_torch.py BF16.safetensors PREFIX FORMAT...

Reads the bf16 checkpoint `refit checkpoint` wrote and, for each FORMAT, refit's checkpoint of
the same weights in that format (PREFIX-FORMAT.safetensors, `refit checkpoint --dtype FORMAT`,
the CPU reference of src/format/format_ref.c). Quantizes every linear weight on the GPU by the
format's rule written below in torch operations (fp32 tensor arithmetic, float8_e4m3fn
conversion, an e2m1 rounding of its own) and counts the element and scale bytes that differ
from refit's file, per format; exits 1 if any do. Needs torch with CUDA; no numpy, no
safetensors package. docs/architecture.md, "Quantized formats", states each rule.
"""
import json
import re
import struct
import sys

import torch

DEV = "cuda"
F32 = torch.float32


def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    head.pop("__metadata__", None)
    return head, memoryview(raw)[8 + n:]


def raw_bytes(head, data, name, dtype, shape):
    e = head[name]
    assert e["dtype"] == dtype and e["shape"] == shape, (name, e["dtype"], e["shape"], dtype, shape)
    a, b = e["data_offsets"]
    return torch.frombuffer(bytearray(data[a:b]), dtype=torch.uint8)


def fp32_const(v):
    # A constant rounded to fp32 on the host, as refit's C and CUDA code round 1/448 and 1/6.
    return torch.tensor([v], dtype=torch.float64).to(F32).to(DEV)


def e4m3(p):
    # Nearest even, saturating at 448 (clamp first: torch's own cast gives NaN above 464), the
    # sign of zero kept.
    code = p.abs().clamp(max=448.0).to(torch.float8_e4m3fn).view(torch.uint8)
    return code | (torch.signbit(p).to(torch.uint8) << 7)


E2M1 = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=F32, device=DEV)
MIDS = (E2M1[:-1] + E2M1[1:]) / 2


def e2m1(p):
    a = p.abs()
    code = torch.bucketize(a, MIDS)  # MIDS[i-1] < a <= MIDS[i]
    tie = (code < len(MIDS)) & (MIDS[code.clamp(max=len(MIDS) - 1)] == a)
    code = torch.where(tie & (code % 2 == 1), code + 1, code)
    return code.to(torch.uint8) | (torch.signbit(p).to(torch.uint8) << 3)


def pow2(e):
    # 2^e for -127 <= e <= 127 from its bits (2^-127 is the subnormal 0x00400000).
    bits = torch.where(e >= -126, (e + 127) << 23, torch.full_like(e, 0x00400000))
    return bits.to(torch.int32).view(F32)


def ceil_exp(sf):
    m, e = torch.frexp(sf)  # sf = m 2^e, m in [0.5, 1)
    e = torch.where(m == 0.5, e - 1, e)
    return torch.where(sf > 0, e, torch.full_like(e, -127)).clamp(-127, 127)


def floor_exp(a):
    m, e = torch.frexp(a)
    return torch.where(a > 0, e - 1, torch.full_like(e, -127))


def global_group(name, names):
    """The tensors that share nvfp4's global scale, as one vLLM parameter's weight_scale_2:
    q/k/v (qkv_proj); gate/up (gate_up_proj, the shared experts' too, and each expert's w13:
    Mixtral's w1/w3); q_a/kv_a where q_a_proj exists (fused_qkv_a_proj)."""
    g = re.sub(r"\.(q_proj|k_proj|v_proj)\.weight$", ".qkv", name)
    g = re.sub(r"\.(gate_proj|up_proj|w1|w3)\.weight$", ".gate_up", g)
    if any(".q_a_proj." in n for n in names):
        g = re.sub(r"\.(q_a_proj|kv_a_proj_with_mqa)\.weight$", ".fused_qkv_a", g)
    return g


def quantize(x, fmt, t=None):
    """(element bytes [rows, cols or cols/2], scale bytes, global bytes or None); t: the
    maximum |x| over x's global-scale group (nvfp4)."""
    rows, cols = x.shape
    if fmt in ("fp8", "fp8-ue8m0"):
        b = x.view(rows // 128, 128, cols // 128, 128).permute(0, 2, 1, 3)
        amax = b.abs().amax(dim=(2, 3)).clamp(min=fp32_const(1e-4))
        if fmt == "fp8":
            factor = amax.reciprocal() * 448.0
            scale = amax * fp32_const(1 / 448)
        else:
            e = ceil_exp(amax * fp32_const(1 / 448))
            scale, factor = pow2(e), pow2(-e)
        q = e4m3(b * factor[:, :, None, None]).permute(0, 2, 1, 3).reshape(rows, cols)
        return q, scale.contiguous().view(torch.uint8).flatten(), None
    n = 16 if fmt == "nvfp4" else 32
    b = x.view(rows, cols // n, n)
    amax = b.abs().amax(dim=2)
    four = "fp4" in fmt
    enc = e2m1 if four else e4m3
    extra = None
    if fmt == "nvfp4":
        g = t / 2688.0 if t > 0 else torch.ones((), dtype=F32, device=DEV)
        s = e4m3(amax / (6.0 * g))
        s = torch.where(amax == 0, 0x38, torch.where(s & 0x7F == 0, 1, s)).to(torch.uint8)
        div = s.view(torch.float8_e4m3fn).to(F32) * g
        q = enc(b / div[:, :, None])
        scale, extra = s.flatten(), g.reshape(1).view(torch.uint8)
    else:
        emax, top = (2, 6.0) if four else (8, 448.0)
        if fmt.endswith("-floor"):
            e = (floor_exp(amax) - emax).clamp(-127, 127)
        else:
            e = ceil_exp(amax * fp32_const(1 / top))
        q = enc(b * pow2(-e)[:, :, None])
        scale = (e + 127).to(torch.uint8).flatten()
    q = q.reshape(rows, cols)
    if four:
        q = q[:, 0::2] | (q[:, 1::2] << 4)
    return q, scale, extra


NAMES = {  # weight suffix and dtype, scale suffix and dtype, global suffix
    "fp8": (".weight", "F8_E4M3", ".weight_scale_inv", "F32", None),
    "fp8-ue8m0": (".weight", "F8_E4M3", ".weight_scale_inv", "F32", None),
    "mxfp8": (".weight", "F8_E4M3", ".weight_scale", "U8", None),
    "mxfp8-floor": (".weight", "F8_E4M3", ".weight_scale", "U8", None),
    "mxfp4": ("_blocks", "U8", "_scales", "U8", None),
    "mxfp4-floor": ("_blocks", "U8", "_scales", "U8", None),
    "nvfp4": (".weight", "U8", ".weight_scale", "F8_E4M3", ".weight_scale_2"),
}


def main():
    bf16_path, prefix, formats = sys.argv[1], sys.argv[2], sys.argv[3:]
    head, data = load(bf16_path)
    linear = [k for k in head if k.endswith("proj.weight") and len(head[k]["shape"]) == 2]
    bad_total = 0

    def weights(name):
        e = head[name]
        rows, cols = e["shape"]
        a, b = e["data_offsets"]
        x16 = torch.frombuffer(bytearray(data[a:b]), dtype=torch.int16).to(DEV)
        return (x16.to(torch.int32) << 16).view(F32).view(rows, cols)

    group_amax = {}
    for name in linear:
        g = global_group(name, linear)
        a = weights(name).abs().amax()
        group_amax[g] = torch.maximum(group_amax[g], a) if g in group_amax else a
    for fmt in formats:
        wsuf, wdt, ssuf, sdt, gsuf = NAMES[fmt]
        qh, qd = load("%s-%s.safetensors" % (prefix, fmt))
        elems = scales = bad_e = bad_s = 0
        for name in linear:
            e = head[name]
            rows, cols = e["shape"]
            x = weights(name)
            q, s, g = quantize(x, fmt, group_amax[global_group(name, linear)])
            p = name[: -len(".weight")]
            width = cols // 2 if "fp4" in fmt else cols
            block = (128, 128) if fmt.startswith("fp8") else (1, 16 if fmt == "nvfp4" else 32)
            want_q = raw_bytes(qh, qd, p + wsuf, wdt, [rows, width]).to(DEV)
            want_s = raw_bytes(qh, qd, p + ssuf, sdt, [rows // block[0], cols // block[1]]).to(DEV)
            bad_e += int((want_q != q.flatten()).sum())
            bad_s += int((want_s != s).sum())
            if g is not None:
                bad_s += int((raw_bytes(qh, qd, p + gsuf, "F32", []).to(DEV) != g).sum())
            elems += q.numel()
            scales += s.numel()
        print("%-12s %4d weights: %d element bytes, %d differ; %d scales, %d bytes differ" %
              (fmt, len(linear), elems, bad_e, scales, bad_s))
        bad_total += bad_e + bad_s
    print("torch and refit: %d bytes differ" % bad_total)
    sys.exit(1 if bad_total else 0)


if __name__ == "__main__":
    main()
