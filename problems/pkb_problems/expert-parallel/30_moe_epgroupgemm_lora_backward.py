"""In-place sum all-reduce of three LoRA gradient matrices (MoE group-GEMM LoRA backward).

Signature ``reference(grad_fc1_1_lora_A, grad_fc1_2_lora_A, grad_fc2_lora_B, group)``;
``group`` None = WORLD.

Each rank holds three tensors in the working dtype: ``grad_fc1_1_lora_A`` and
``grad_fc1_2_lora_A`` of shape (R, N) and ``grad_fc2_lora_B`` of shape (N, R)
(R = LoRA rank, N = width). Replace each, IN PLACE, by its sum over all ranks
of the group, and return the same three tensors as a tuple (a, b, c), identical
on every rank.

All three arguments are mutated (declared in MUTATES; every call gets fresh
copies). Values are random integers in [-16, 16] in the working dtype, so the
sums are exact in any order: bit-exact comparison. Fix in pkb: the original
reused the same buffers over hundreds of timed calls, growing them to inf.
"""
import torch
import torch.distributed as dist

ID = 30
NAME = "moe_epgroupgemm_lora_backward"
CATEGORY = "expert-parallel"
ORIGIN = "VeOmni EP group-GEMM LoRA backward"
WORLD_SIZE = "any W >= 2"
EXACT = True
SIZES = {
    "tiny": {"rank": 2, "width": 8},
    "default": {"rank": 8, "width": 1024},
    "large": {"rank": 64, "width": 16384},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("grad_fc1_1_lora_A", "grad_fc1_2_lora_A", "grad_fc2_lora_B", "group"),
    "args": ("bf16[8, 1024]", "bf16[8, 1024]", "bf16[1024, 8]", "None"),
    "out": ("bf16[8, 1024]", "bf16[8, 1024]", "bf16[1024, 8]"),
}
MUTATES = (0, 1, 2)


def inputs(ctx):
    p = ctx.params
    r, n = p["rank"], p["width"]
    return (ctx.exact(r, n), ctx.exact(r, n), ctx.exact(n, r), None)


@torch.no_grad()
def reference(grad_fc1_1_lora_A, grad_fc1_2_lora_A, grad_fc2_lora_B, group=None):
    group = group or dist.group.WORLD
    for t in (grad_fc1_1_lora_A, grad_fc1_2_lora_A, grad_fc2_lora_B):
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=group)
    return grad_fc1_1_lora_A, grad_fc1_2_lora_A, grad_fc2_lora_B


def traffic(params, world_size, itemsize):
    """Three ring all-reduces of R*N elements: 2 (W-1)/W of 3 R*N elements
    sent; each tensor read and written in place."""
    nbytes = 3 * params["rank"] * params["width"] * itemsize
    return {
        "link_bytes": 2 * (world_size - 1) / world_size * nbytes,
        "hbm_bytes": 2 * nbytes,
        "flops": (world_size - 1) * 3 * params["rank"] * params["width"],
    }
