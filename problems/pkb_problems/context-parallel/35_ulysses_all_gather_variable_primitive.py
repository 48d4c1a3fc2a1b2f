"""Ulysses all-gather of tensors whose shapes differ between ranks.

Arguments ``(x, gather_dim, group)`` = ``(x, 0, None)`` (group None means
WORLD). Rank r holds x_r of shape (M - STEP*r, N) in the working dtype: the row
count differs per rank and is not known to the other ranks in advance (the
original first all-gathers every rank's shape as an int64 vector, then the
tensors). Every rank returns a NEW contiguous tensor: x_0, x_1, ..., x_{W-1}
concatenated along ``gather_dim`` (source-rank order), shape
(sum_r (M - STEP*r), N) for gather_dim 0. Pure data movement: compared bit for
bit. ``x`` must not be modified.

Fix in pkb: the original gave every rank the same shape, so the variable-size
path never ran; here rank r has M - STEP*r rows.
"""
import torch
import torch.distributed as dist

ID = 35
NAME = "ulysses_all_gather_variable_primitive"
CATEGORY = "context-parallel"
ORIGIN = "verl / VeOmni Ulysses utilities"
WORLD_SIZE = "M - STEP*(W-1) >= 1 (W <= 128 at default)"
SIZES = {
    "tiny": {"m": 16, "n": 8, "step": 2},
    "default": {"m": 1024, "n": 1024, "step": 8},
    "large": {"m": 16384, "n": 8192, "step": 8},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("x", "gather_dim", "group"),
    "args": ("bf16[1024, 1024]", "0", "None"),
    "out": "bf16[2048, 1024]",
}
# Why this problem differs from the original there (docs/pkb-parity.md).
PKB_DIFFERENCES = {
    "x": (
        "rank r holds M - STEP*r rows so the variable-size path runs (the original gave every rank the same "
        "shape)"
    ),
    "out": "the concatenation of the ranks' different row counts",
}


def world_size_error(world_size, params):
    if params["m"] - params["step"] * (world_size - 1) < 1:
        return f"rank {world_size - 1} would hold no rows (M - STEP*r < 1)"
    return None


def inputs(ctx):
    p = ctx.params
    rows = p["m"] - p["step"] * ctx.rank
    return (ctx.randn(rows, p["n"]), 0, None)


def reference(x, gather_dim, group=None):
    world_size = dist.get_world_size(group)
    x = x.contiguous()
    my_shape = torch.tensor(x.shape, dtype=torch.int64, device=x.device)
    shapes = [torch.empty_like(my_shape) for _ in range(world_size)]
    dist.all_gather(shapes, my_shape, group=group)
    # gloo's all_gather needs equal sizes, so each rank's block is broadcast
    # from its owner (NCCL implements uneven all_gather the same way).
    pieces = []
    for s in range(world_size):
        src = dist.get_global_rank(group, s) if group is not None else s
        if src == dist.get_rank():
            buf = x.clone()
        else:
            buf = torch.empty(torch.Size(shapes[s].tolist()), dtype=x.dtype, device=x.device)
        dist.broadcast(buf, src=src, group=group)
        pieces.append(buf)
    return torch.cat(pieces, dim=gather_dim).contiguous()


def traffic(params, world_size, itemsize):
    """Each rank's block reaches the W-1 peers (counted as this rank sending
    the average block W-1 times); HBM: read one block, write the gathered
    result twice (receive buffers, then the concatenation)."""
    rows = [params["m"] - params["step"] * r for r in range(world_size)]
    avg = sum(rows) / world_size * params["n"] * itemsize
    total = sum(rows) * params["n"] * itemsize
    return {"link_bytes": (world_size - 1) * avg, "hbm_bytes": avg + 2 * total, "flops": 0}
