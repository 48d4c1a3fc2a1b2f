"""All-gather of one matrix from every rank into a stacked tensor.

Each rank r holds ``tensor`` x_r of shape (M, N). Return a new tensor of shape
(W, M, N) whose slot s is x_s, identical on every rank. Bit-exact comparison.
"""
import torch
import torch.distributed as dist

from pkb_core import matrix_for_bytes

ID = 2
NAME = "allgather"
CATEGORY = "collective"
ORIGIN = "generic NCCL primitive"
WORLD_SIZE = "any W >= 2"
SIZES = {
    "tiny": {"m": 8, "n": 16},
    "default": {"m": 1024, "n": 1024},
    "large": {"m": 8192, "n": 8192},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("tensor",),
    "args": ("bf16[1024, 1024]",),
    "out": "bf16[2, 1024, 1024]",
}

# Pure data movement: every element arrives as it left, so nothing is allowed off it.
TOLERANCE = {"rtol": 0.0, "atol": 0.0}


def inputs(ctx):
    p = ctx.params
    return (ctx.randn(p["m"], p["n"]),)


def reference(tensor):
    world_size = dist.get_world_size()
    out = torch.empty((world_size, *tensor.shape), dtype=tensor.dtype, device=tensor.device)
    # gloo wants the output as (W*M, N): one chunk per rank along dim 0.
    dist.all_gather_into_tensor(out.view(-1, *tensor.shape[1:]), tensor.contiguous())
    return out


def traffic(params, world_size, itemsize):
    """Each rank sends its block to W-1 peers (or along a ring: W-1 blocks);
    writes W blocks."""
    nbytes = params["m"] * params["n"] * itemsize
    return {
        "link_bytes": (world_size - 1) * nbytes,
        "hbm_bytes": (world_size + 1) * nbytes,
        "flops": 0,
    }


def sweep(nbytes, world_size, itemsize):
    """Sizes for a sweep where ``nbytes`` is each rank's input block."""
    return matrix_for_bytes(nbytes, itemsize, 1)


def busbw(params, world_size, itemsize):
    """nccl-tests' (S, factor): busbw = S / t * factor."""
    return world_size * params["m"] * params["n"] * itemsize, (world_size - 1) / world_size
