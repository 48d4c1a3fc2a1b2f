"""Broadcast of one matrix from a source rank.

Each rank holds ``tensor`` of shape (M, N); ``src`` (default 0) names the rank
whose tensor is sent. Return a new (M, N) tensor equal to src's ``tensor`` on
every rank; ``tensor`` itself must not be modified. Bit-exact comparison.
"""
import torch
import torch.distributed as dist

from pkb_core import matrix_for_bytes

ID = 3
NAME = "broadcast"
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
    "params": ("tensor", "src"),
    "args": ("bf16[1024, 1024]", "=0"),
    "out": "bf16[1024, 1024]",
}

# Pure data movement: every element arrives as it left, so nothing is allowed off it.
TOLERANCE = {"rtol": 0.0, "atol": 0.0}


def inputs(ctx):
    p = ctx.params
    return (ctx.randn(p["m"], p["n"]), 0)


def reference(tensor, src=0):
    out = tensor.clone()
    dist.broadcast(out, src=src)
    return out


def traffic(params, world_size, itemsize):
    """The source's block reaches W-1 peers (a pipelined tree sends it about
    once per rank); every rank writes one block."""
    nbytes = params["m"] * params["n"] * itemsize
    return {"link_bytes": nbytes, "hbm_bytes": 2 * nbytes, "flops": 0}


def sweep(nbytes, world_size, itemsize):
    """Sizes for a sweep where ``nbytes`` is the broadcast buffer."""
    return matrix_for_bytes(nbytes, itemsize, 1)


def busbw(params, world_size, itemsize):
    """nccl-tests' (S, factor): busbw = S / t * factor."""
    return params["m"] * params["n"] * itemsize, 1.0
