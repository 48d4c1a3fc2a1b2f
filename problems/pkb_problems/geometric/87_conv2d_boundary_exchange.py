"""Patch-parallel 3x3 convolution: exchange halo rows between height-stacked ranks, then convolve locally.

Layout: an image is split along its height into W horizontal slabs stacked in
rank order (rank 0 on top). Each rank holds ``x`` (B, C, h_r, Wimg) in the
working dtype with h_r = max(3, height // max(1, W // 2)) rows (as in the
original: at W = 2 each rank holds a full ``height``-row slab, so the global
image has W h_r rows). ``weight`` (C, C, 3, 3) and ``bias`` (C,) are the same on
every rank (one model), weight scaled by 1/sqrt(9 C). ``stride`` = 1,
``padding`` = 1, ``group`` = None (WORLD).

Return on rank r the (B, C, h_r, Wimg) tensor equal to rank r's rows of
conv2d(global image, weight, bias, stride=1, padding=1), i.e. convolve the local
slab extended by ``padding`` halo rows above (the last rows of rank r-1; zeros on
rank 0) and below (the first rows of rank r+1; zeros on rank W-1), with zero
padding ``padding`` along the width only. (For stride 1; other strides apply the
same halo rule.) The reference all-gathers every rank's top and bottom rows, where
only the neighbours' are needed. Compared with the working dtype's tolerance.

Fixes relative to the original PKB: weights were unscaled (outputs around 100 in
bf16) and drawn per rank; pkb shares them across ranks and scales them by 1/sqrt(fan-in).
"""
import math

import torch
import torch.distributed as dist
import torch.nn.functional as F

ID = 87
NAME = "conv2d_boundary_exchange"
CATEGORY = "geometric"
ORIGIN = "DistriFusion patch-parallel UNet convolution (halo exchange)"
WORLD_SIZE = "any W >= 2"
SIZES = {
    "tiny": {"batch": 1, "channels": 8, "height": 8, "width": 8},
    "default": {"batch": 1, "channels": 1280, "height": 128, "width": 128},
    "large": {"batch": 2, "channels": 1280, "height": 256, "width": 256},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("x", "weight", "bias", "stride", "padding", "group"),
    "args": ("bf16[1, 1280, 128, 128]", "bf16[1280, 1280, 3, 3]", "bf16[1280]", "1", "1", "None"),
    "out": "bf16[1, 1280, 128, 128]",
}


def _local_rows(params, world_size):
    return max(3, params["height"] // max(1, world_size // 2))


def inputs(ctx):
    p = ctx.params
    c = p["channels"]
    x = ctx.randn(p["batch"], c, _local_rows(p, ctx.world_size), p["width"])
    weight = ctx.randn(c, c, 3, 3, shared=True, scale=1.0 / math.sqrt(9 * c))
    bias = ctx.randn(c, shared=True)
    return (x, weight, bias, 1, 1, None)


@torch.no_grad()
def reference(x, weight, bias, stride=1, padding=1, group=None):
    world_size = dist.get_world_size(group)
    rank = dist.get_rank(group)
    halo = int(padding)
    if halo == 0:
        return F.conv2d(x, weight, bias, stride=stride, padding=padding)
    edges = torch.stack([x[:, :, :halo], x[:, :, -halo:]]).contiguous()   # (2, B, C, halo, Wimg)
    gathered = edges.new_empty((world_size * 2,) + tuple(edges.shape[1:]))
    dist.all_gather_into_tensor(gathered, edges, group=group)
    gathered = gathered.view(world_size, 2, *edges.shape[1:])
    zeros = x.new_zeros(x.shape[0], x.shape[1], halo, x.shape[3])
    above = gathered[rank - 1, 1] if rank > 0 else zeros
    below = gathered[rank + 1, 0] if rank < world_size - 1 else zeros
    padded = torch.cat([above, x, below], dim=2)
    return F.conv2d(padded, weight, bias, stride=stride, padding=(0, padding))


def traffic(params, world_size, itemsize):
    """Halo rows: each rank sends its top and bottom row to its neighbours (2 rows
    of B C Wimg); HBM: read x and the weight, write the output; 2 * 9 C^2 FLOPs
    per output pixel."""
    b, c, w = params["batch"], params["channels"], params["width"]
    h = _local_rows(params, world_size)
    row = b * c * w * itemsize
    return {"link_bytes": 2 * row,
            "hbm_bytes": 2 * h * row + 9 * c * c * itemsize,
            "flops": 2 * 9 * c * c * b * h * w}
