"""Ulysses all-to-all primitive: scatter one dimension, gather another.

Arguments ``(x, scatter_dim, gather_dim, group)`` = ``(x, 0, 1, None)`` (group
None means WORLD). Each rank r holds x_r of shape (M, N) in the working dtype.
x_r is cut into W equal chunks along ``scatter_dim`` (chunk t = rows
[t*M/W, (t+1)*M/W) for scatter_dim 0) and chunk t is sent to rank t. Rank r
returns a NEW contiguous tensor: the W chunks it received, concatenated along
``gather_dim`` in source-rank order, i.e. for (0, 1)

    out[:, s*N:(s+1)*N] = x_s[r*M/W:(r+1)*M/W, :]      shape (M/W, N*W).

Pure data movement: compared bit for bit. ``x`` must not be modified.
M must be divisible by W.
"""
import torch
import torch.distributed as dist

ID = 33
NAME = "ulysses_all_to_all_tensor_primitive"
CATEGORY = "context-parallel"
ORIGIN = "verl / VeOmni Ulysses utilities"
WORLD_SIZE = "M % W == 0 (1024 % W == 0 at default)"
SIZES = {
    "tiny": {"m": 16, "n": 8},
    "default": {"m": 1024, "n": 1024},
    "large": {"m": 16384, "n": 8192},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("x", "scatter_dim", "gather_dim", "group"),
    "args": ("bf16[1024, 1024]", "0", "1", "None"),
    "out": "bf16[512, 2048]",
}


def world_size_error(world_size, params):
    if params["m"] % world_size:
        return f"M = {params['m']} rows do not split into {world_size} equal chunks"
    return None

# Pure data movement: every element arrives as it left, so nothing is allowed off it.
TOLERANCE = {"rtol": 0.0, "atol": 0.0}


def inputs(ctx):
    p = ctx.params
    return (ctx.randn(p["m"], p["n"]), 0, 1, None)


def reference(x, scatter_dim, gather_dim, group=None):
    world_size = dist.get_world_size(group)
    send = [c.contiguous() for c in torch.tensor_split(x, world_size, scatter_dim)]
    recv = [torch.empty_like(send[0]) for _ in range(world_size)]
    dist.all_to_all(recv, send, group=group)
    return torch.cat(recv, dim=gather_dim).contiguous()


def traffic(params, world_size, itemsize):
    """Each rank sends W-1 of its W chunks (M*N/W elements each) and receives
    as many; HBM: read x, write the received chunks, read and write them again
    for the concatenation."""
    nbytes = params["m"] * params["n"] * itemsize
    return {
        "link_bytes": (world_size - 1) / world_size * nbytes,
        "hbm_bytes": 4 * nbytes,
        "flops": 0,
    }
