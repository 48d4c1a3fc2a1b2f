"""Sequence-parallel MLP: all-gather, GEMM, SiLU, GEMM, reduce-scatter.

Sizes are rounded up to multiples of W: M = ceil(m / W) * W rows,
H = ceil(h / W) * W hidden features, F = f. Rank r holds ``x_local`` (M, H/W),
column block r of the activation x (M, H) (rank-distinct), and the replicated
weights ``W1`` (H, F) and ``W2`` (F, H) (the same on every rank), all in the
working dtype.

Reference: all-gather the column blocks into x = concat(x_0, ..., x_{W-1})
along dim 1; a = SiLU(x @ W1) (M, F) in the working dtype; put
a[r*M/W:(r+1)*M/W] @ W2 into row block r of an otherwise zero (M, H) buffer and
reduce-scatter the buffers over row blocks. Return on rank r the new
(M/W, H) tensor

    y_r = SiLU(x[r*M/W:(r+1)*M/W] @ W1) @ W2.

Because every other rank contributes zeros to block r, the reduce-scatter only
moves zeros: a solution needs from each peer just the rows of block r of its
column slice (an all-to-all of (M/W, H/W) tiles) and may skip the RS.

pkb fix: W1 and W2 are shared (the original drew them per rank, so the ranks
computed with different weights), and scaled by 1/sqrt(fan-in) so activations
stay O(1). Compared with the dtype tolerance.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F

ID = 15
NAME = "combined_sharded_gemms"
CATEGORY = "tensor-parallel"
ORIGIN = "Megatron sequence-parallel MLP (AG -> GEMM -> act -> GEMM -> RS)"
WORLD_SIZE = "any W >= 2 (M and H are rounded up to multiples of W)"
SIZES = {
    "tiny": {"m": 16, "h": 16, "f": 32},
    "default": {"m": 1024, "h": 256, "f": 512},
    "large": {"m": 8192, "h": 4096, "f": 16384},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("x_local", "W1", "W2"),
    "args": ("bf16[1024, 128]", "bf16[256, 512]", "bf16[512, 256]"),
    "out": "bf16[512, 256]",
}


def _dims(params, world_size):
    m = -(-params["m"] // world_size) * world_size
    h = -(-params["h"] // world_size) * world_size
    return m, h, params["f"]


def inputs(ctx):
    m, h, f = _dims(ctx.params, ctx.world_size)
    x_local = ctx.randn(m, h // ctx.world_size)
    w1 = ctx.randn(h, f, shared=True, scale=h ** -0.5)
    w2 = ctx.randn(f, h, shared=True, scale=f ** -0.5)
    return (x_local, w1, w2)


def reference(x_local, W1, W2):
    rank = dist.get_rank()
    world_size = dist.get_world_size()
    m = x_local.shape[0]
    m_local = m // world_size
    parts = [torch.empty_like(x_local) for _ in range(world_size)]
    dist.all_gather(parts, x_local.contiguous())
    x_full = torch.cat(parts, dim=1)
    a = F.silu(torch.matmul(x_full, W1))
    block = torch.matmul(a[rank * m_local:(rank + 1) * m_local], W2)
    buf = block.new_zeros((m, block.shape[1]))
    buf[rank * m_local:(rank + 1) * m_local] = block
    out = block.new_empty((m_local, block.shape[1]))
    dist.reduce_scatter_tensor(out, buf)
    return out


def traffic(params, world_size, itemsize):
    """Counted for the minimal algorithm: each rank sends peer t the
    (M/W, H/W) tile of its slice in row block t (W-1 tiles); the zero-only
    reduce-scatter is not counted. HBM: x tiles, W1, W2 read, the (M/W, F)
    activation written and read, y written. FLOPs: two GEMMs on M/W rows."""
    m, h, f = _dims(params, world_size)
    ml = m // world_size
    tile = ml * (h // world_size)
    return {
        "link_bytes": (world_size - 1) * tile * itemsize,
        "hbm_bytes": (ml * h + 2 * h * f + 2 * ml * f + ml * h) * itemsize,
        "flops": 4 * ml * h * f + 4 * ml * f,
    }
