"""GEMM + reduce-scatter: row-parallel linear with sequence-parallel output.

Rank r holds ``A_local`` (M, K/W) and ``B_local`` (K/W, N), its slices of A and
B along the global contraction dimension K (rank-distinct), in the working
dtype. Return on rank r a new (M/W, N) tensor: row block r (rows
[r*M/W, (r+1)*M/W)) of sum over ranks s of A_s @ B_s, in the working dtype
(the reference rounds each partial product to the working dtype, then
reduce-scatters). Inputs are normal, B scaled by 1/sqrt(K) so the result is
O(1). The inputs must not be modified. Compared with the dtype
tolerance.
"""
import torch
import torch.distributed as dist

ID = 16
NAME = "gemm_reducescatter"
CATEGORY = "tensor-parallel"
ORIGIN = "GEMM+RS (Megatron row-parallel linear with sequence parallelism)"
WORLD_SIZE = "K % W == 0 and M % W == 0 (K = 512, M = 1024 at default)"
SIZES = {
    "tiny": {"m": 16, "k": 16, "n": 16},
    "default": {"m": 1024, "k": 512, "n": 1024},
    "large": {"m": 8192, "k": 8192, "n": 8192},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("A_local", "B_local"),
    "args": ("bf16[1024, 256]", "bf16[256, 1024]"),
    "out": "bf16[512, 1024]",
}


def world_size_error(world_size, params):
    if params["k"] % world_size or params["m"] % world_size:
        return f"K = {params['k']} and M = {params['m']} must both be divisible by W = {world_size}"
    return None


def inputs(ctx):
    p = ctx.params
    k_local = p["k"] // ctx.world_size
    a_local = ctx.randn(p["m"], k_local)
    b_local = ctx.randn(k_local, p["n"], scale=p["k"] ** -0.5)
    return (a_local, b_local)


def reference(A_local, B_local):
    world_size = dist.get_world_size()
    partial = torch.matmul(A_local, B_local)
    out = torch.empty((partial.shape[0] // world_size, partial.shape[1]), dtype=partial.dtype, device=partial.device)
    dist.reduce_scatter_tensor(out, partial)
    return out


def traffic(params, world_size, itemsize):
    """Ring reduce-scatter of the (M, N) partial: W-1 of its W row blocks
    sent. HBM: A, B read, the partial written and read, the block written.
    2 M (K/W) N FLOPs plus the reduction."""
    m, k, n = params["m"], params["k"], params["n"]
    block = m // world_size * n
    return {
        "link_bytes": (world_size - 1) * block * itemsize,
        "hbm_bytes": (m * (k // world_size) + (k // world_size) * n + 2 * m * n + block) * itemsize,
        "flops": 2 * m * (k // world_size) * n + (world_size - 1) * block,
    }
