"""Gather of one matrix from every rank onto a destination rank.

Each rank r holds ``tensor`` x_r of shape (M, N); ``dst`` defaults to 0.
Return on rank dst a new (W, M, N) tensor whose slot s is x_s; on every other
rank its own x_r, unchanged: ``tensor`` itself, as the original returns it, or
a copy (RETURNS_INPUTS). Bit-exact comparison.
"""
import torch
import torch.distributed as dist

from pkb_core import matrix_for_bytes

ID = 6
NAME = "gather"
CATEGORY = "collective"
ORIGIN = "generic NCCL primitive"
WORLD_SIZE = "any W >= 2"
# NCCL implements this with point-to-point calls; replaying them from a CUDA
# graph hung on the 2xH200 (docs/benchmarks/2026-11-22-h200x2.md).
CUDA_GRAPH = False
# Non-root ranks return their input itself, as the original's reference does.
RETURNS_INPUTS = (0,)
SIZES = {
    "tiny": {"m": 8, "n": 16},
    "default": {"m": 1024, "n": 1024},
    "large": {"m": 8192, "n": 8192},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("tensor", "dst"),
    "args": ("bf16[1024, 1024]", "=0"),
    "out": "rank 0: bf16[2, 1024, 1024] | rank 1: bf16[1024, 1024]",
}

# Pure data movement: every element arrives as it left, so nothing is allowed off it.
TOLERANCE = {"rtol": 0.0, "atol": 0.0}


def inputs(ctx):
    p = ctx.params
    return (ctx.randn(p["m"], p["n"]), 0)


def reference(tensor, dst=0):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if rank == dst:
        out = torch.empty((world_size, *tensor.shape), dtype=tensor.dtype, device=tensor.device)
        dist.gather(tensor.contiguous(), list(out.unbind(0)), dst=dst)
        return out
    dist.gather(tensor.contiguous(), None, dst=dst)
    return tensor


def traffic(params, world_size, itemsize):
    """The root receives W-1 blocks and writes W."""
    nbytes = params["m"] * params["n"] * itemsize
    return {"link_bytes": nbytes, "hbm_bytes": (world_size + 1) * nbytes, "flops": 0}


def sweep(nbytes, world_size, itemsize):
    """Sizes for a sweep where ``nbytes`` is each rank's input block."""
    return matrix_for_bytes(nbytes, itemsize, 1)


def busbw(params, world_size, itemsize):
    """nccl-tests' (S, factor): busbw = S / t * factor."""
    return world_size * params["m"] * params["n"] * itemsize, (world_size - 1) / world_size
