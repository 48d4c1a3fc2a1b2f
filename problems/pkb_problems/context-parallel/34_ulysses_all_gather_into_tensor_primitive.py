"""Ulysses all-gather primitive: concatenate every rank's tensor along dim 0.

Arguments ``(x, group)`` = ``(x, None)`` (group None means WORLD). Each rank r
holds x_r of shape (M, N) in the working dtype. Every rank returns a NEW
tensor of shape (W*M, N) with rows [s*M, (s+1)*M) equal to x_s (source-rank
order). Pure data movement: compared bit for bit. ``x`` must not be modified.
"""
import torch
import torch.distributed as dist

ID = 34
NAME = "ulysses_all_gather_into_tensor_primitive"
CATEGORY = "context-parallel"
ORIGIN = "verl / VeOmni Ulysses utilities"
WORLD_SIZE = "any W >= 2"
SIZES = {
    "tiny": {"m": 16, "n": 8},
    "default": {"m": 1024, "n": 1024},
    "large": {"m": 16384, "n": 8192},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("x", "group"),
    "args": ("bf16[1024, 1024]", "None"),
    "out": "bf16[2048, 1024]",
}

# Pure data movement: every element arrives as it left, so nothing is allowed off it.
TOLERANCE = {"rtol": 0.0, "atol": 0.0}


def inputs(ctx):
    p = ctx.params
    return (ctx.randn(p["m"], p["n"]), None)


def reference(x, group=None):
    world_size = dist.get_world_size(group)
    x = x.contiguous()
    out = torch.empty((world_size * x.shape[0], *x.shape[1:]), dtype=x.dtype, device=x.device)
    dist.all_gather_into_tensor(out, x, group=group)
    return out


def traffic(params, world_size, itemsize):
    """Each rank's block reaches W-1 peers (W-1 blocks sent per rank on a
    ring); HBM: read one block, write W."""
    nbytes = params["m"] * params["n"] * itemsize
    return {"link_bytes": (world_size - 1) * nbytes, "hbm_bytes": (world_size + 1) * nbytes, "flops": 0}
