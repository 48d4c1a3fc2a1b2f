"""All-to-all of W matrices.

Each rank s holds ``tensor`` x_s of shape (W, M, N); slot r is meant for rank r.
Return on rank r a new (W, M, N) tensor y with y[s] = x_s[r]. Bit-exact
comparison.
"""
import torch
import torch.distributed as dist

from pkb_core import matrix_for_bytes

ID = 8
NAME = "alltoall"
CATEGORY = "collective"
ORIGIN = "generic NCCL primitive"
WORLD_SIZE = "any W >= 2"
# NCCL runs all_to_all_single as grouped point-to-point calls; replaying them
# from a CUDA graph hung on the 2xH200 (docs/benchmarks/2026-11-22-h200x2.md).
CUDA_GRAPH = False
SIZES = {
    "tiny": {"m": 8, "n": 16},
    "default": {"m": 1024, "n": 1024},
    "large": {"m": 4096, "n": 4096},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("tensor",),
    "args": ("bf16[2, 1024, 1024]",),
    "out": "bf16[2, 1024, 1024]",
}

# Pure data movement: every element arrives as it left, so nothing is allowed off it.
TOLERANCE = {"rtol": 0.0, "atol": 0.0}


def inputs(ctx):
    p = ctx.params
    return (ctx.randn(ctx.world_size, p["m"], p["n"]),)


def reference(tensor):
    out = torch.empty_like(tensor)
    dist.all_to_all_single(out, tensor.contiguous())
    return out


def traffic(params, world_size, itemsize):
    """Each rank sends W-1 slots and receives W-1; reads and writes W slots."""
    block = params["m"] * params["n"] * itemsize
    return {"link_bytes": (world_size - 1) * block, "hbm_bytes": 2 * world_size * block, "flops": 0}


def sweep(nbytes, world_size, itemsize):
    """Sizes for a sweep where ``nbytes`` is each rank's whole input (W slots)."""
    return matrix_for_bytes(nbytes, itemsize, world_size)


def busbw(params, world_size, itemsize):
    """nccl-tests' (S, factor): busbw = S / t * factor."""
    return world_size * params["m"] * params["n"] * itemsize, (world_size - 1) / world_size
