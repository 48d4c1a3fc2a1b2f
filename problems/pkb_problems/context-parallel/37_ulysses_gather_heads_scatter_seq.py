"""Ulysses "gather heads, scatter sequence" all-to-all, with zero padding.

Arguments ``(x, seq_dim, head_dim, group)`` = ``(x, 1, 2, None)`` (group None
means WORLD). Rank r holds x_r of shape (B, L, H, D) = (batch, full sequence,
its own H heads, head dim) in the working dtype. The sequence is zero-padded at
the end to Lp = ceil(L/W)*W rows and cut into W chunks of Lp/W rows; chunk t
goes to rank t. Rank r returns a NEW contiguous tensor of shape
(B, Lp/W, H*W, D): its sequence chunk with the heads of all ranks,
concatenated in source-rank order:

    out[:, i, s*H + j, :] = xpad_s[:, r*Lp/W + i, j, :]

where xpad_s is x_s with the zero rows appended (so the last rank's final
Lp - L rows are zeros). This is the inverse of problem 36. Pure data movement:
compared bit for bit. ``x`` must not be modified.

Fix in pkb: the original used L = 16, which the usual W divide, so the padding
path never ran; here L = 31 (large 8191), both prime, so padding runs at every
W; W is admitted while the last rank still receives real rows (every W <= 8).
The original's 8 % W assertion (a leftover of a shared input builder) is
dropped: gathering heads works at any W.
"""
import torch
import torch.distributed as dist

ID = 37
NAME = "ulysses_gather_heads_scatter_seq"
CATEGORY = "context-parallel"
ORIGIN = "verl / VeOmni Ulysses (gather_heads_scatter_seq)"
WORLD_SIZE = "ceil(L/W)*W - L < ceil(L/W), i.e. the last rank gets real rows (every W <= 8 at default)"
SIZES = {
    "tiny": {"b": 2, "l": 31, "h": 8, "d": 4},
    "default": {"b": 16, "l": 31, "h": 8, "d": 64},
    "large": {"b": 8, "l": 8191, "h": 8, "d": 128},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("x", "seq_dim", "head_dim", "group"),
    "args": ("bf16[16, 16, 8, 64]", "1", "2", "None"),
    "out": "bf16[16, 8, 16, 64]",
}
# Why this problem differs from the original there (docs/pkb-parity.md).
PKB_DIFFERENCES = {
    "x": "a local sequence of L = 31 (prime) instead of 16, so the padding path runs at every W",
    "out": "a sequence of L = 31 per rank, the padding cut after the scatter",
}


def world_size_error(world_size, params):
    chunk = -(-params["l"] // world_size)
    if chunk * world_size - params["l"] >= chunk:
        return f"L = {params['l']} padded for {world_size} ranks leaves the last rank only padding"
    return None

# Pure data movement: every element arrives as it left, so nothing is allowed off it.
TOLERANCE = {"rtol": 0.0, "atol": 0.0}


def inputs(ctx):
    p = ctx.params
    return (ctx.randn(p["b"], p["l"], p["h"], p["d"]), 1, 2, None)


def reference(x, seq_dim, head_dim, group=None):
    world_size = dist.get_world_size(group)
    length = x.size(seq_dim)
    if length % world_size:
        pad_shape = list(x.shape)
        pad_shape[seq_dim] = world_size - length % world_size
        x = torch.cat([x, torch.zeros(pad_shape, dtype=x.dtype, device=x.device)], dim=seq_dim)
    send = [c.contiguous() for c in torch.tensor_split(x, world_size, seq_dim)]
    recv = [torch.empty_like(send[0]) for _ in range(world_size)]
    dist.all_to_all(recv, send, group=group)
    return torch.cat(recv, dim=head_dim).contiguous()


def traffic(params, world_size, itemsize):
    """Each rank sends W-1 of its W padded sequence chunks; HBM: read x, write
    the padded copy, the received chunks and the concatenated output."""
    padded = -(-params["l"] // world_size) * world_size
    nbytes = params["b"] * padded * params["h"] * params["d"] * itemsize
    return {
        "link_bytes": (world_size - 1) / world_size * nbytes,
        "hbm_bytes": 5 * nbytes,
        "flops": 0,
    }
