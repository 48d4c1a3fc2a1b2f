"""All-reduce (sum) of one matrix across all ranks.

Each rank r holds ``tensor`` x_r of shape (M, N) in the working dtype. Return a
NEW tensor y of shape (M, N), same dtype, with y = sum over all ranks of x_r, on
every rank. ``tensor`` must not be modified.

Inputs are random integers in [-16, 16] stored in the working dtype, so the sum
is exact in any order: the output is compared bit for bit.
"""
import torch
import torch.distributed as dist

from pkb_core import matrix_for_bytes

ID = 1
NAME = "allreduce"
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
    "params": ("tensor",),
    "args": ("bf16[1024, 1024]",),
    "out": "bf16[1024, 1024]",
}


def inputs(ctx):
    p = ctx.params
    return (ctx.exact(p["m"], p["n"]),)


def reference(tensor):
    out = tensor.clone()
    dist.all_reduce(out)
    return out


def traffic(params, world_size, itemsize):
    """Ring all-reduce: each rank sends 2 (W-1)/W of the buffer; reads the
    input and writes the output (plus the partial sums it receives)."""
    nbytes = params["m"] * params["n"] * itemsize
    return {
        "link_bytes": 2 * (world_size - 1) / world_size * nbytes,
        "hbm_bytes": 2 * nbytes,
        "flops": (world_size - 1) * params["m"] * params["n"],
    }


def sweep(nbytes, world_size, itemsize):
    """Sizes for a sweep where ``nbytes`` is the all-reduced buffer."""
    return matrix_for_bytes(nbytes, itemsize, 1)


def busbw(params, world_size, itemsize):
    """nccl-tests' (S, factor): busbw = S / t * factor."""
    return params["m"] * params["n"] * itemsize, 2 * (world_size - 1) / world_size
