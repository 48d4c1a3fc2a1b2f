"""Distributed Sinkhorn-Knopp centering of teacher logits (DINOv2).

Each rank r holds ``teacher_output`` (B, K) fp32 (its B samples' logits over K
prototypes), the float ``teacher_temp`` (0.07), ``n_masked_patches_tensor`` (1,)
int64 holding B, the int ``n_iterations`` (3) and ``group`` (None: WORLD).

All in fp32. Q = exp(teacher_output / temp)^T, shape (K, B) (prototypes x
samples); N = sum over ranks of n_masked_patches (as fp32); Q /= (sum of Q over
all ranks). Then n_iterations times: divide each prototype row by its sum over all
samples of all ranks, then by K; divide each sample column by its (local) sum,
then by N. Finally multiply by N. Return this rank's Q^T, shape (B, K) fp32: each
row sums to 1 (up to rounding).

Inputs: the original's logits were 0.01 * randn, so the output was nearly uniform
(~1/K everywhere) and under its absolute atol. pkb draws 0.1 * randn: outputs
spread over about three orders of magnitude around 1/K, and nearly all of them lie
above the atol floor (1e-5 of the largest output). Unit-scale logits, as first
planned, would leave 99 % of the outputs below that floor and some at 0.
"""
import torch
import torch.distributed as dist

ID = 80
NAME = "dinov2_distributed_sinkhorn_knopp"
CATEGORY = "data-parallel"
ORIGIN = "DINOv2 Sinkhorn-Knopp centering"
WORLD_SIZE = "any W >= 2"
SIZES = {
    "tiny": {"batch": 16, "prototypes": 32},
    "default": {"batch": 1024, "prototypes": 16384},
    "large": {"batch": 4096, "prototypes": 65536},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("teacher_output", "teacher_temp", "n_masked_patches_tensor", "n_iterations", "group"),
    "args": ("fp32[1024, 16384]", "0.07", "int64[1]", "3", "None"),
    "out": "fp32[1024, 16384]",
}


def inputs(ctx):
    p = ctx.params
    logits = ctx.randn(p["batch"], p["prototypes"], dtype=torch.float32, scale=0.1)
    count = torch.full((1,), p["batch"], dtype=torch.int64, device=ctx.device)
    return (logits, 0.07, count, 3, None)


@torch.no_grad()
def reference(teacher_output, teacher_temp, n_masked_patches_tensor, n_iterations=3, group=None):
    group = group or dist.group.WORLD
    q = torch.exp(teacher_output.float() / teacher_temp).t()
    total = n_masked_patches_tensor.to(device=q.device, dtype=q.dtype).clone()
    dist.all_reduce(total, group=group)
    num_prototypes = q.shape[0]
    mass = q.sum()
    dist.all_reduce(mass, group=group)
    q = q / mass
    for _ in range(n_iterations):
        rows = q.sum(dim=1, keepdim=True)
        dist.all_reduce(rows, group=group)
        q /= rows
        q /= num_prototypes
        q /= q.sum(dim=0, keepdim=True)
        q /= total
    q *= total
    return q.t().contiguous()


def traffic(params, world_size, itemsize):
    """fp32 (itemsize ignored). Links: n_iterations = 3 ring all-reduces of the
    K row sums (2 (W-1)/W * 4K bytes each) plus two scalars. HBM: about ten passes
    over the (B, K) matrix. FLOPs: ~15 per element."""
    B, K = params["batch"], params["prototypes"]
    return {
        "link_bytes": 3 * 2 * (world_size - 1) / world_size * K * 4 + 16,
        "hbm_bytes": 10 * B * K * 4,
        "flops": 15 * B * K,
    }
