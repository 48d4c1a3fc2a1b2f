"""Scatter of W matrices from a source rank.

On rank ``src`` (default 0), ``tensor`` has shape (W, M, N) and slot i is meant
for rank i. On every other rank ``tensor`` is an (M, N) placeholder filled with
NaN. Return a new (M, N) tensor on each rank r: slot r of src's tensor.
Bit-exact comparison (returning the placeholder fails).
"""
import torch
import torch.distributed as dist

from pkb_core import matrix_for_bytes

ID = 5
NAME = "scatter"
CATEGORY = "collective"
ORIGIN = "generic NCCL primitive"
WORLD_SIZE = "any W >= 2"
# NCCL implements this with point-to-point calls; replaying them from a CUDA
# graph hung on the 2xH200 (docs/benchmarks/2026-11-22-h200x2.md).
CUDA_GRAPH = False
SIZES = {
    "tiny": {"m": 8, "n": 16},
    "default": {"m": 1024, "n": 1024},
    "large": {"m": 4096, "n": 4096},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("tensor", "src"),
    "args": ("rank 0: bf16[2, 1024, 1024] | rank 1: bf16[1024, 1024]", "=0"),
    "out": "bf16[1024, 1024]",
}

# Pure data movement: every element arrives as it left, so nothing is allowed off it.
TOLERANCE = {"rtol": 0.0, "atol": 0.0}


def inputs(ctx, src=0):
    p = ctx.params
    if ctx.rank == src:
        tensor = ctx.randn(ctx.world_size, p["m"], p["n"])
    else:
        tensor = torch.full((p["m"], p["n"]), float("nan"), dtype=ctx.dtype, device=ctx.device)
    return (tensor, src)


def reference(tensor, src=0):
    rank = dist.get_rank()
    if rank == src:
        out = torch.empty_like(tensor[0])
        dist.scatter(out, list(tensor.unbind(0)), src=src)
    else:
        out = torch.empty_like(tensor)
        dist.scatter(out, None, src=src)
    return out


def traffic(params, world_size, itemsize):
    """The source sends W-1 blocks; each block is read once and written once."""
    nbytes = params["m"] * params["n"] * itemsize
    return {"link_bytes": (world_size - 1) * nbytes, "hbm_bytes": 2 * nbytes, "flops": 0}


def sweep(nbytes, world_size, itemsize):
    """Sizes for a sweep where ``nbytes`` is each rank's output block."""
    return matrix_for_bytes(nbytes, itemsize, 1)


def busbw(params, world_size, itemsize):
    """nccl-tests' (S, factor): busbw = S / t * factor."""
    return world_size * params["m"] * params["n"] * itemsize, (world_size - 1) / world_size
