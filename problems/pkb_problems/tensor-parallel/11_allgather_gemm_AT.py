"""All-gather + GEMM, gathering the transposed K-slices of A.

A (M, K) is split along K (its columns): rank r holds ``A_local`` = A[:, r*K/W :
(r+1)*K/W], shape (M, K/W). ``B`` (K, N) is replicated: the same tensor on
every rank. Return, on every rank, a new (M, N) tensor C = A @ B in the working
dtype. The reference gathers the transposed slices A_r^T into A^T (K, M) with
one all-gather along dim 0 and computes C = (B^T A^T)^T.

pkb fix: B is shared (the original drew a different B per rank, which is odd
for AG+GEMM); all ranks return the same C. Inputs are normal, B scaled by 1/sqrt(K) so C
is O(1). Compared with the dtype tolerance.
"""
import torch
import torch.distributed as dist

ID = 11
NAME = "allgather_gemm_AT"
CATEGORY = "tensor-parallel"
ORIGIN = "AG+GEMM (async-TP / ParallelKittens / Triton-distributed family)"
WORLD_SIZE = "K % W == 0 (K = 512 at default)"
SIZES = {
    "tiny": {"m": 16, "k": 16, "n": 16},
    "default": {"m": 1024, "k": 512, "n": 1024},
    "large": {"m": 8192, "k": 8192, "n": 8192},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("A_local", "B"),
    "args": ("bf16[1024, 256]", "bf16[512, 1024]"),
    "out": "bf16[1024, 1024]",
}


def world_size_error(world_size, params):
    if params["k"] % world_size:
        return f"K = {params['k']} is not divisible by W = {world_size}"
    return None


def inputs(ctx):
    p = ctx.params
    a_local = ctx.randn(p["m"], p["k"] // ctx.world_size)
    b = ctx.randn(p["k"], p["n"], shared=True, scale=p["k"] ** -0.5)
    return (a_local, b)


def reference(A_local, B):
    world_size = dist.get_world_size()
    m, k_local = A_local.shape
    a_t = A_local.t().contiguous()
    a_t_full = torch.empty((world_size * k_local, m), dtype=A_local.dtype, device=A_local.device)
    dist.all_gather_into_tensor(a_t_full, a_t)
    return torch.matmul(B.t(), a_t_full).t().contiguous()


def traffic(params, world_size, itemsize):
    """Ring all-gather of the (M, K/W) slices: W-1 slices sent. HBM: the
    gathered A (write + read), B and C once. 2 M K N FLOPs."""
    m, k, n = params["m"], params["k"], params["n"]
    return {
        "link_bytes": (world_size - 1) * m * (k // world_size) * itemsize,
        "hbm_bytes": (2 * m * k + k * n + m * n) * itemsize,
        "flops": 2 * m * k * n,
    }
