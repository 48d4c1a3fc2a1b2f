"""Ulysses "gather sequence, scatter heads" all-to-all, with unpadding.

Arguments ``(x, seq_dim, head_dim, group, unpadded_dim_size)`` =
``(x, 1, 2, None, S*W - PAD)`` (group None means WORLD). Rank r holds x_r of
shape (B, S, H, D) = (batch, local sequence shard, heads, head dim) in the
working dtype: rows [r*S, (r+1)*S) of a global sequence of length S*W - PAD
that was zero-padded at the end to S*W (so the last rank's final PAD rows are
zeros). The H heads are cut into W groups of H/W; group t goes to rank t. Rank
r returns a NEW contiguous tensor of shape (B, S*W - PAD, H/W, D):

    out[:, s*S + i, j, :] = x_s[:, i, r*H/W + j, :]   (for s*S + i < S*W - PAD)

i.e. the full sequence in source-rank order for its own head group, with the
trailing padding cut. (The original cuts the padding only when
``unpadded_dim_size`` is non-zero and not divisible by W; here it always is.)
Pure data movement: compared bit for bit. ``x`` must not be modified.

Fix in pkb: the original passed unpadded_dim_size = 0, so the unpadding path
never ran; here the global sequence length S*W - PAD is not divisible by W.
"""
import torch
import torch.distributed as dist

ID = 36
NAME = "ulysses_gather_seq_scatter_heads"
CATEGORY = "context-parallel"
ORIGIN = "verl / VeOmni Ulysses (gather_seq_scatter_heads)"
WORLD_SIZE = "H % W == 0 (8 % W == 0 at default)"
SIZES = {
    "tiny": {"b": 2, "s": 4, "h": 8, "d": 4, "pad": 1},
    "default": {"b": 16, "s": 16, "h": 8, "d": 64, "pad": 1},
    "large": {"b": 8, "s": 8192, "h": 8, "d": 128, "pad": 1},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("x", "seq_dim", "head_dim", "group", "unpadded_dim_size"),
    "args": ("bf16[16, 16, 8, 64]", "1", "2", "None", "0"),
    "out": "bf16[16, 32, 4, 64]",
}
# Why this problem differs from the original there (docs/pkb-parity.md).
PKB_DIFFERENCES = {
    "unpadded_dim_size": (
        "a global length not divisible by W, so the unpadding path runs (the original passed 0 and never "
        "unpadded)"
    ),
    "out": "the padding is cut, as unpadded_dim_size asks",
}


def world_size_error(world_size, params):
    if params["h"] % world_size:
        return f"H = {params['h']} heads do not split into {world_size} equal groups"
    if params["pad"] % world_size == 0 or params["pad"] > params["s"]:
        return "PAD must be in [1, S] and not divisible by W (else nothing is unpadded)"
    return None

# Pure data movement: every element arrives as it left, so nothing is allowed off it.
TOLERANCE = {"rtol": 0.0, "atol": 0.0}


def inputs(ctx):
    p = ctx.params
    x = ctx.randn(p["b"], p["s"], p["h"], p["d"])
    if ctx.rank == ctx.world_size - 1:
        x[:, p["s"] - p["pad"]:] = 0  # the zero padding of the global sequence
    return (x, 1, 2, None, p["s"] * ctx.world_size - p["pad"])


def reference(x, seq_dim, head_dim, group=None, unpadded_dim_size=0):
    world_size = dist.get_world_size(group)
    send = [c.contiguous() for c in torch.tensor_split(x, world_size, head_dim)]
    recv = [torch.empty_like(send[0]) for _ in range(world_size)]
    dist.all_to_all(recv, send, group=group)
    out = torch.cat(recv, dim=seq_dim)
    if unpadded_dim_size and unpadded_dim_size % world_size != 0:
        out = out.narrow(seq_dim, 0, unpadded_dim_size)
    return out.contiguous()


def traffic(params, world_size, itemsize):
    """Each rank sends W-1 of its W head groups (B*S*H*D/W elements each);
    HBM: read x, write the received groups, then the concatenated output."""
    nbytes = params["b"] * params["s"] * params["h"] * params["d"] * itemsize
    return {
        "link_bytes": (world_size - 1) / world_size * nbytes,
        "hbm_bytes": 4 * nbytes,
        "flops": 0,
    }
