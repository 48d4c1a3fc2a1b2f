"""Reduce (sum) of one matrix onto a destination rank.

Each rank r holds ``tensor`` x_r of shape (M, N); ``dst`` defaults to 0.
Return a new (M, N) tensor: on rank dst the sum over all ranks of x_r; on every
other rank an unchanged copy of its own x_r (what the original PKB returned).
Inputs are integers in [-16, 16], so the sum is exact: bit-exact comparison.
"""
import torch
import torch.distributed as dist

from pkb_core import matrix_for_bytes

ID = 4
NAME = "reduce"
CATEGORY = "collective"
ORIGIN = "generic NCCL primitive"
WORLD_SIZE = "any W >= 2"
EXACT = True
SIZES = {
    "tiny": {"m": 8, "n": 16},
    "default": {"m": 1024, "n": 1024},
    "large": {"m": 8192, "n": 8192},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("tensor", "dst"),
    "args": ("bf16[1024, 1024]", "0"),
    "out": "bf16[1024, 1024]",
}


def inputs(ctx):
    p = ctx.params
    return (ctx.exact(p["m"], p["n"]), 0)


def reference(tensor, dst=0):
    out = tensor.clone()
    dist.reduce(out, dst=dst)
    if dist.get_rank() != dst:
        # Non-root buffers are undefined after reduce; the contract is the input.
        out.copy_(tensor)
    return out


def traffic(params, world_size, itemsize):
    """Every non-root block reaches the root once; the root reads W blocks."""
    nbytes = params["m"] * params["n"] * itemsize
    return {
        "link_bytes": nbytes,
        "hbm_bytes": (world_size + 1) * nbytes,
        "flops": (world_size - 1) * params["m"] * params["n"],
    }


def sweep(nbytes, world_size, itemsize):
    """Sizes for a sweep where ``nbytes`` is the reduced buffer."""
    return matrix_for_bytes(nbytes, itemsize, 1)


def busbw(params, world_size, itemsize):
    """nccl-tests' (S, factor): busbw = S / t * factor."""
    return params["m"] * params["n"] * itemsize, 1.0
