"""Reduce-scatter (mean over ranks) fused with RMSNorm.

Rank r holds ``rs_input_1d`` (W*R*Hd,), a flat buffer viewed as W chunks of
R*Hd elements (chunk t meant for rank t; rank-distinct), ``gamma`` (Hd,), the
replicated RMSNorm weight (the same on every rank), both in the working dtype,
and ``eps`` (float, 1e-5). Reduce-scatter with SUM in the working dtype, divide
by W (in the working dtype), view the result as (R, Hd), then RMSNorm in fp32:
y = x * rsqrt(mean(x^2 over the row) + eps) * gamma. Return on rank r the new
(R, Hd) tensor y in the working dtype, built from chunk r of every rank.

R: ``default`` uses the original's R = max(2, rows_global // max(W, 4)) (256 for
W <= 4); ``tiny`` and ``large`` fix R per rank. Inputs: normal, each row of the
reduced result scaled (the same on every rank) by 10**u, u uniform in
[-3.5, 0], so that many rows' mean square lies near eps: RMSNorm is blind to a
row's scale where the mean square outweighs eps, and a sum taken for the mean
would pass there. Compared with the dtype tolerance.
"""
import torch
import torch.distributed as dist

ID = 45
NAME = "reducescatter_fused_rmsnorm"
CATEGORY = "sequence-parallel"
ORIGIN = "Megatron / Transformer Engine sequence-parallel RS + RMSNorm fusion"
WORLD_SIZE = "any W >= 2"
SIZES = {
    "tiny": {"rows": 4, "hidden": 32},
    "default": {"rows_global": 1024, "hidden": 128},
    "large": {"rows": 16384, "hidden": 8192},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("rs_input_1d", "gamma", "eps"),
    "args": ("bf16[65536]", "bf16[128]", "1e-05"),
    "out": "bf16[256, 128]",
}


def _rows(params, world_size):
    if "rows" in params:
        return params["rows"]
    return max(2, params["rows_global"] // max(world_size, 4))


def inputs(ctx):
    p = ctx.params
    r = _rows(p, ctx.world_size)
    # A scale per row of the flat buffer, shared by every rank, so the reduced row keeps it: rows
    # whose mean square is near eps tell a mean from a sum (and any other scale of the row).
    scale = 10.0 ** ctx.rand(ctx.world_size * r, 1, dtype=torch.float32, shared=True, low=-3.5, high=0.0)
    x = (ctx.randn(ctx.world_size * r, p["hidden"], dtype=torch.float32) * scale).to(ctx.dtype).reshape(-1)
    gamma = ctx.randn(p["hidden"], shared=True)
    return (x, gamma, 1e-5)


def reference(rs_input_1d, gamma, eps):
    world_size = dist.get_world_size()
    hidden = gamma.numel()
    chunk = rs_input_1d.numel() // world_size
    assert chunk % hidden == 0, "chunk must be a whole number of rows"
    out = torch.empty(chunk, dtype=rs_input_1d.dtype, device=rs_input_1d.device)
    dist.reduce_scatter_tensor(out, rs_input_1d.contiguous())
    out = out / world_size
    x = out.view(chunk // hidden, hidden).float()
    y = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * gamma.float()
    return y.to(rs_input_1d.dtype)


def traffic(params, world_size, itemsize):
    """Ring reduce-scatter: W-1 of the W chunks sent. HBM: W chunks read, one
    written (and re-read for the norm), output written. FLOPs: the reduction
    plus about 5 per output element."""
    chunk = _rows(params, world_size) * params["hidden"]
    return {
        "link_bytes": (world_size - 1) * chunk * itemsize,
        "hbm_bytes": (world_size + 3) * chunk * itemsize,
        "flops": (world_size - 1) * chunk + 5 * chunk,
    }
