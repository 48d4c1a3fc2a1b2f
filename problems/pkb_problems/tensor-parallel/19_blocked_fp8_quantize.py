"""Block-wise FP8 (e4m3fn) activation quantisation, then all-gather.

Rank r holds ``local_tensor`` x_r (R, C) in the working dtype and
``block_size`` (int, 128); C % block_size == 0. Each row is cut into
C/block_size blocks of block_size consecutive elements. For every block b, in
fp32:

    s_b = max |x| over the block / 448.0          (fp32 division)
    q   = float8_e4m3fn(x / s_b)   (x / 1 instead where s_b == 0)

with the usual round-to-nearest-even cast (the block maximum maps to 448); s_b
is stored as computed (0 for an all-zero block). Then the codes (moved as
uint8) and the scales are all-gathered along dim 0 in rank order. Return on
every rank the tuple

    (q, s) = (float8_e4m3fn (W*R, C), float32 (W*R, C/block_size)),

rows [r*R, (r+1)*R) coming from rank r. The original quantised with a Triton
kernel; this reference is pure torch.

Checking (pkb fix): dtypes are checked, the codes compare exactly and the
scales with rtol 1e-6. So that exact codes are fair to any correct kernel
(true division or multiplication by 1/s, a scale off by an ulp), the inputs
keep every element at least 1/64 of a code step away from a rounding tie of
x / s (elements that land closer are moved to a quarter step above the lower
code); values otherwise are normal with a random magnitude per block, and each
rank has one all-zero block.
"""
import torch
import torch.distributed as dist

ID = 19
NAME = "blocked_fp8_quantize"
CATEGORY = "tensor-parallel"
ORIGIN = "DeepSeek-V3 inference act_quant kernel + all-gather"
WORLD_SIZE = "any W >= 2"
SIZES = {
    "tiny": {"rows": 8, "cols": 256},
    "default": {"rows": 1024, "cols": 1024},
    "large": {"rows": 16384, "cols": 8192},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("local_tensor", "block_size"),
    "args": ("bf16[1024, 1024]", "128"),
    "out": ("fp8e4m3[2048, 1024]", "fp32[2048, 8]"),
}
# Codes exact, scales within 1e-6 relative (an ulp of fp32 either way).
TOLERANCE = {"rtol": 1e-6, "atol": 0.0}

_FP8_MAX = 448.0
_BLOCK = 128


def _tie_free(x, block_size):
    """Move elements whose x / s sits within 1/64 code step of a rounding tie."""
    rows, cols = x.shape
    xf = x.to(torch.float32).view(rows, cols // block_size, block_size)
    s = xf.abs().amax(dim=-1, keepdim=True) / _FP8_MAX
    s = torch.where(s == 0, torch.ones_like(s), s)
    t = (xf / s).abs()
    exponent = torch.frexp(t).exponent - 1          # t in [2^e, 2^(e+1))
    step = torch.exp2((exponent.clamp_min(-6) - 3).to(torch.float32))  # e4m3fn spacing (subnormal below 2^-6)
    frac = t / step
    near_tie = (frac - torch.floor(frac) - 0.5).abs() < 1.0 / 64
    moved = torch.sign(xf) * (torch.floor(frac) + 0.25) * step * s
    return torch.where(near_tie, moved, xf).view(rows, cols).to(x.dtype)


def inputs(ctx):
    p = ctx.params
    rows, cols = p["rows"], p["cols"]
    nblk = cols // _BLOCK
    x = ctx.randn(rows, nblk, _BLOCK, dtype=torch.float32)
    x = x * torch.exp(ctx.randn(rows, nblk, 1, dtype=torch.float32))
    zero = torch.zeros(rows * nblk, dtype=torch.bool, device=ctx.device)
    zero[ctx.randint(0, rows * nblk, 1)] = True
    x = torch.where(zero.view(rows, nblk, 1), torch.zeros_like(x), x)
    x = x.view(rows, cols).to(ctx.dtype)
    return (_tie_free(x, _BLOCK), _BLOCK)


def reference(local_tensor, block_size=128):
    assert local_tensor.shape[-1] % block_size == 0, "last dim must be divisible by block_size"
    world_size = dist.get_world_size()
    rows, cols = local_tensor.shape
    xf = local_tensor.to(torch.float32).view(rows, cols // block_size, block_size)
    s = xf.abs().amax(dim=-1) / _FP8_MAX
    s_safe = torch.where(s == 0, torch.ones_like(s), s)
    q = (xf / s_safe.unsqueeze(-1)).to(torch.float8_e4m3fn).view(rows, cols)
    q_all = torch.empty((world_size * rows, cols), dtype=torch.uint8, device=q.device)
    dist.all_gather_into_tensor(q_all, q.view(torch.uint8).contiguous())
    s_all = torch.empty((world_size * rows, s.shape[1]), dtype=torch.float32, device=s.device)
    dist.all_gather_into_tensor(s_all, s.contiguous())
    return q_all.view(torch.float8_e4m3fn), s_all


def traffic(params, world_size, itemsize):
    """All-gather of R*C one-byte codes and R*C/128 fp32 scales (W-1 blocks
    sent). HBM: read x, write the local codes and the W gathered blocks.
    About 3 FLOPs per element (abs/max, divide)."""
    r, c = params["rows"], params["cols"]
    local = r * c + 4 * r * c // _BLOCK
    return {
        "link_bytes": (world_size - 1) * local,
        "hbm_bytes": r * c * itemsize + (world_size + 1) * local,
        "flops": 3 * r * c,
    }
