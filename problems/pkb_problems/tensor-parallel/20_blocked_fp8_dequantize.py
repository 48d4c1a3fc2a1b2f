"""Block-wise FP8 dequantisation, then all-to-all over dim 0.

Rank r holds ``local_y`` (W, R, C): W chunks of FP8 codes stored in the
working dtype (every value is exactly an float8_e4m3fn value), ``local_s``
(W, R*C/block_size) positive scales in the working dtype, and ``block_size``
(int, 128); R*C % block_size == 0. Flattening chunk t row-major, its
consecutive groups of block_size elements use scales local_s[t, 0],
local_s[t, 1], ... (equivalently: flat element i of local_y uses flat scale
i // block_size). Dequantise in fp32, x = fp32(y) * fp32(s), then all-to-all
over dim 0: return on rank r the new float32 (W, R, C) tensor whose slot t is
rank t's dequantised chunk r.

In the working dtype bf16 every product is exact (in fp32 it is one correctly
rounded multiply), so the output compares bit for bit (TOLERANCE 0).

pkb fix: the codes are real fp8 values (random data with a random magnitude
per block, quantised as in problem 19) and the scales are that block's
max|x| / 448 (positive); the original drew both from randn. The original
dequantised with a Triton kernel; this reference is pure torch.
"""
import torch
import torch.distributed as dist

ID = 20
NAME = "blocked_fp8_dequantize"
CATEGORY = "tensor-parallel"
ORIGIN = "DeepSeek-V3 weight_dequant kernel + all-to-all"
WORLD_SIZE = "any W >= 2"
SIZES = {
    "tiny": {"rows": 8, "cols": 32},
    "default": {"rows": 1024, "cols": 1024},
    "large": {"rows": 4096, "cols": 8192},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("local_y", "local_s", "block_size"),
    "args": ("bf16[2, 1024, 1024]", "bf16[2, 8192]", "128"),
    "out": "fp32[2, 1024, 1024]",
}
# Exact: each output element is one fp32 multiply of exactly representable values.
TOLERANCE = {"rtol": 0.0, "atol": 0.0}

_BLOCK = 128


def inputs(ctx):
    p = ctx.params
    w = ctx.world_size
    nblk = p["rows"] * p["cols"] // _BLOCK
    x = ctx.randn(w, nblk, _BLOCK, dtype=torch.float32)
    x = x * torch.exp(ctx.randn(w, nblk, 1, dtype=torch.float32))
    s = (x.abs().amax(dim=-1, keepdim=True) / 448.0).to(ctx.dtype).to(torch.float32)
    y = (x / s).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    local_y = y.to(ctx.dtype).view(w, p["rows"], p["cols"])
    local_s = s.view(w, nblk).to(ctx.dtype)
    return (local_y, local_s, _BLOCK)


def reference(local_y, local_s, block_size=128):
    world_size = dist.get_world_size()
    chunk_numel = local_y.numel() // world_size
    assert chunk_numel % block_size == 0, "chunk numel must be divisible by block_size"
    y = local_y.to(torch.float32).reshape(-1, block_size)
    s = local_s.to(torch.float32).reshape(-1, 1)
    x = (y * s).view(local_y.shape)
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x)
    return out


def traffic(params, world_size, itemsize):
    """All-to-all of fp32 chunks (W-1 of W sent). HBM: read codes and scales,
    write the dequantised W chunks, then write the received W chunks. One
    multiply per element."""
    chunk = params["rows"] * params["cols"]
    w = world_size
    return {
        "link_bytes": (w - 1) * chunk * 4,
        "hbm_bytes": w * chunk * itemsize + w * chunk // _BLOCK * itemsize + 2 * w * chunk * 4,
        "flops": w * chunk,
    }
