"""Variable-split row all-to-all (the MoE expert-parallel dispatch primitive).

Signature ``reference(local_tensor, input_split_sizes, output_split_sizes, group)``;
``group`` None = WORLD.

A split matrix S (W x W, non-negative ints, each row summing to T) is common to
all ranks: S[s][d] = rows rank s sends to rank d. Rank r holds ``local_tensor``
x_r of shape (T, H) in the working dtype, ``input_split_sizes`` = S[r] and
``output_split_sizes`` = [S[s][r] for s in range(W)] (Python lists of ints).
Rows of x_r are sent in order: the first S[r][0] rows to rank 0, the next
S[r][1] to rank 1, and so on. Return on rank r a new tensor of shape
(sum_s S[s][r], H): the blocks received from ranks 0, 1, ..., W-1 concatenated in
source-rank order, each block keeping its row order. Bit-exact comparison.

Fix in pkb: the original split every tensor evenly; here S is random and
uneven (zero-row blocks can occur), drawn from a seed shared by all ranks so that
every rank's output splits match its peers' input splits.
"""
import torch
import torch.distributed as dist

ID = 27
NAME = "moe_all2all_primitive"
CATEGORY = "expert-parallel"
ORIGIN = "VeOmni / Megatron expert-parallel all-to-all"
WORLD_SIZE = "any W >= 2"
SIZES = {
    "tiny": {"tokens": 16, "hidden": 8},
    "default": {"tokens": 1024, "hidden": 1024},
    "large": {"tokens": 32768, "hidden": 4096},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("local_tensor", "input_split_sizes", "output_split_sizes", "group"),
    "args": ("bf16[1024, 1024]", "[512, 512]", "[512, 512]", "None"),
    "out": "bf16[1024, 1024]",
}
# Why this problem differs from the original there (docs/pkb-parity.md).
PKB_DIFFERENCES = {
    "input_split_sizes": (
        "pkb draws uneven random splits each trial (the original's were even constants), so the split "
        "bookkeeping is tested"
    ),
    "output_split_sizes": (
        "pkb draws uneven random splits each trial (the original's were even constants), so the split "
        "bookkeeping is tested"
    ),
    "out": "its row count is the sum of the random output splits",
}
# NCCL runs all_to_all_single as grouped point-to-point calls; replaying them
# from a CUDA graph hung on the 2xH200 (docs/benchmarks/2026-11-22-h200x2-c.md).
CUDA_GRAPH = False

# Pure data movement: every element arrives as it left, so nothing is allowed off it.
TOLERANCE = {"rtol": 0.0, "atol": 0.0}


def inputs(ctx):
    p = ctx.params
    t, w = p["tokens"], ctx.world_size
    cuts = torch.sort(ctx.randint(0, t + 1, w, w - 1, shared=True), dim=1).values
    zero = torch.zeros(w, 1, dtype=torch.int64, device=ctx.device)
    edges = torch.cat([zero, cuts, zero + t], dim=1)
    splits = (edges[:, 1:] - edges[:, :-1]).cpu()  # (W, W), row s = what s sends
    x = ctx.randn(t, p["hidden"])
    return (x, splits[ctx.rank].tolist(), splits[:, ctx.rank].tolist(), None)


@torch.no_grad()
def reference(local_tensor, input_split_sizes=None, output_split_sizes=None, group=None):
    group = group or dist.group.WORLD
    x = local_tensor.contiguous()
    if output_split_sizes is None:
        out = torch.empty_like(x)
    else:
        out = torch.empty((int(sum(output_split_sizes)), x.size(1)), dtype=x.dtype, device=x.device)
    dist.all_to_all_single(out, x, output_split_sizes=output_split_sizes,
                           input_split_sizes=input_split_sizes, group=group)
    return out


def traffic(params, world_size, itemsize):
    """On average (W-1)/W of the T rows leave the rank (and as many arrive);
    reads T rows, writes ~T rows."""
    nbytes = params["tokens"] * params["hidden"] * itemsize
    return {
        "link_bytes": (world_size - 1) / world_size * nbytes,
        "hbm_bytes": 2 * nbytes,
        "flops": 0,
    }
