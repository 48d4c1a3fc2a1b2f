"""GEMM + all-gather: a column-parallel linear layer with gathered output.

``A`` (M, K) is the replicated activation (the same tensor on every rank);
rank r holds ``B`` (K, N/W), column block r of the weight (rank-distinct), in
the working dtype. Return, on every rank, a new (M, N) tensor
C = concat(A @ B_0, ..., A @ B_{W-1}) along dim 1 (rank order), i.e. A times
the full weight.

pkb fix: A is shared (the original drew a different A per rank, but a
column-parallel linear has a replicated activation). Inputs are normal, B
scaled by 1/sqrt(K) so C is O(1). Compared with the dtype tolerance.
"""
import torch
import torch.distributed as dist

ID = 14
NAME = "gemm_allgather"
CATEGORY = "tensor-parallel"
ORIGIN = "GEMM+AG (Megatron column-parallel linear, gather_output)"
WORLD_SIZE = "N % W == 0 (N = 1024 at default)"
SIZES = {
    "tiny": {"m": 16, "k": 16, "n": 16},
    "default": {"m": 1024, "k": 512, "n": 1024},
    "large": {"m": 8192, "k": 8192, "n": 8192},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("A", "B"),
    "args": ("bf16[1024, 512]", "bf16[512, 512]"),
    "out": "bf16[1024, 1024]",
}


def world_size_error(world_size, params):
    if params["n"] % world_size:
        return f"N = {params['n']} is not divisible by W = {world_size}"
    return None


def inputs(ctx):
    p = ctx.params
    a = ctx.randn(p["m"], p["k"], shared=True)
    b = ctx.randn(p["k"], p["n"] // ctx.world_size, scale=p["k"] ** -0.5)
    return (a, b)


def reference(A, B):
    world_size = dist.get_world_size()
    c_local = torch.matmul(A, B)
    parts = [torch.empty_like(c_local) for _ in range(world_size)]
    dist.all_gather(parts, c_local)
    return torch.cat(parts, dim=1)


def traffic(params, world_size, itemsize):
    """Ring all-gather of the (M, N/W) blocks: W-1 blocks sent. HBM: A and
    B read, the local block written, the (M, N) result written. 2 M K N/W
    FLOPs."""
    m, k, n = params["m"], params["k"], params["n"]
    n_local = n // world_size
    return {
        "link_bytes": (world_size - 1) * m * n_local * itemsize,
        "hbm_bytes": (m * k + k * n_local + m * n_local + m * n) * itemsize,
        "flops": 2 * m * k * n_local,
    }
