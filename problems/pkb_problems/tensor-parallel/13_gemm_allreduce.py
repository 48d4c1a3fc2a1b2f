"""GEMM + all-reduce: a row-parallel linear layer.

Rank r holds ``A_local`` (M, K), its slice of the activation along the global
contraction dimension, and ``B_local`` (K, N), the matching row slice of the
weight, both rank-distinct, in the working dtype. Return, on every rank, a new
(M, N) tensor C = sum over ranks s of A_s @ B_s in the working dtype (the
reference multiplies locally, rounds to the working dtype, then all-reduces).
Inputs are normal, B scaled by 1/sqrt(W*K) so C is O(1). The inputs must not
be modified. Compared with the dtype tolerance.
"""
import torch
import torch.distributed as dist

ID = 13
NAME = "gemm_allreduce"
CATEGORY = "tensor-parallel"
ORIGIN = "GEMM+AR (Megatron row-parallel linear)"
WORLD_SIZE = "any W >= 2"
SIZES = {
    "tiny": {"m": 16, "k": 16, "n": 16},
    "default": {"m": 1024, "k": 512, "n": 1024},
    "large": {"m": 8192, "k": 8192, "n": 8192},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("A_local", "B_local"),
    "args": ("bf16[1024, 512]", "bf16[512, 1024]"),
    "out": "bf16[1024, 1024]",
}


def inputs(ctx):
    p = ctx.params
    a_local = ctx.randn(p["m"], p["k"])
    b_local = ctx.randn(p["k"], p["n"], scale=(p["k"] * ctx.world_size) ** -0.5)
    return (a_local, b_local)


def reference(A_local, B_local):
    c = torch.matmul(A_local, B_local)
    dist.all_reduce(c)
    return c


def traffic(params, world_size, itemsize):
    """Ring all-reduce of the (M, N) partial: 2 (W-1)/W of it sent. HBM: A,
    B read, the partial written and read, C written. 2 M K N FLOPs plus the
    reduction."""
    m, k, n = params["m"], params["k"], params["n"]
    return {
        "link_bytes": 2 * (world_size - 1) / world_size * m * n * itemsize,
        "hbm_bytes": (m * k + k * n + 3 * m * n) * itemsize,
        "flops": 2 * m * k * n + (world_size - 1) * m * n,
    }
