"""Reduce-scatter (sum) of a row-blocked matrix.

Each rank s holds ``tensor`` x_s of shape (W*M, N), viewed as W row blocks of
(M, N). Return on rank r a new (M, N) tensor: the sum over all ranks s of row
block r of x_s. Inputs are integers in [-16, 16]: bit-exact comparison.
"""
import torch
import torch.distributed as dist

from pkb_core import matrix_for_bytes

ID = 7
NAME = "reducescatter"
CATEGORY = "collective"
ORIGIN = "generic NCCL primitive"
WORLD_SIZE = "any W >= 2"
EXACT = True
SIZES = {
    "tiny": {"m": 8, "n": 16},
    "default": {"m": 1024, "n": 1024},
    "large": {"m": 4096, "n": 8192},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("tensor",),
    "args": ("bf16[2048, 1024]",),
    "out": "bf16[1024, 1024]",
}


def inputs(ctx):
    p = ctx.params
    return (ctx.exact(ctx.world_size * p["m"], p["n"]),)


def reference(tensor):
    world_size = dist.get_world_size()
    out = torch.empty((tensor.shape[0] // world_size, *tensor.shape[1:]), dtype=tensor.dtype, device=tensor.device)
    dist.reduce_scatter_tensor(out, tensor.contiguous())
    return out


def traffic(params, world_size, itemsize):
    """Each rank sends W-1 of its W blocks; reads W blocks, writes one."""
    block = params["m"] * params["n"] * itemsize
    return {
        "link_bytes": (world_size - 1) * block,
        "hbm_bytes": (world_size + 1) * block,
        "flops": (world_size - 1) * params["m"] * params["n"],
    }


def sweep(nbytes, world_size, itemsize):
    """Sizes for a sweep where ``nbytes`` is each rank's whole input (W blocks)."""
    return matrix_for_bytes(nbytes, itemsize, world_size)


def busbw(params, world_size, itemsize):
    """nccl-tests' (S, factor): busbw = S / t * factor."""
    return world_size * params["m"] * params["n"] * itemsize, (world_size - 1) / world_size
