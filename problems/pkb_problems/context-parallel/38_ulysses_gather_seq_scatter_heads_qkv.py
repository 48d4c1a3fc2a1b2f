"""Ulysses all-to-all of a fused QKV projection: gather sequence, scatter heads.

Arguments ``(qkv_tensor, seq_dim, group, unpadded_dim_size, restore_shape)`` =
``(qkv, 1, None, S*W - PAD, True)`` (group None means WORLD). Rank r holds
qkv_r of shape (B, S, 3*F) in the working dtype: its local sequence shard
(rows [r*S, (r+1)*S) of a global sequence of length S*W - PAD, zero-padded at
the end to S*W, so the last rank's final PAD rows are zeros), with the features
laid out [q (F) | k (F) | v (F)]. Viewed as (B, S, 3, F), each of q, k and v
is cut into W feature slices of F/W; slice t goes to rank t, and the sequence
is gathered in source-rank order. Rank r returns a NEW contiguous tensor of
shape (B, S*W - PAD, 3*F/W) (restore_shape=True):

    out.view(B, S*W - PAD, 3, F/W)[:, s*S + i, c, j] = qkv_s.view(B, S, 3, F)[:, i, c, r*F/W + j]

i.e. per token [q slice r | k slice r | v slice r], with the trailing padding
cut (the original cuts it only when unpadded_dim_size is non-zero and not
divisible by W; here it always is). With restore_shape=False the result keeps
the (B, S*W - PAD, 3, F/W) view. Pure data movement: compared bit for bit.
``qkv_tensor`` must not be modified.

Fix in pkb: the original passed unpadded_dim_size = None, so the unpadding
path never ran; here the global sequence length S*W - PAD is not divisible by W.
"""
import torch
import torch.distributed as dist

ID = 38
NAME = "ulysses_gather_seq_scatter_heads_qkv"
CATEGORY = "context-parallel"
ORIGIN = "VeOmni gather_seq_scatter_heads_qkv"
WORLD_SIZE = "F % W == 0 (512 % W == 0 at default)"
SIZES = {
    "tiny": {"b": 2, "s": 4, "f": 16, "pad": 1},
    "default": {"b": 16, "s": 16, "f": 512, "pad": 1},
    "large": {"b": 8, "s": 8192, "f": 1024, "pad": 1},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("qkv_tensor", "seq_dim", "group", "unpadded_dim_size", "restore_shape"),
    "args": ("bf16[16, 16, 1536]", "1", "None", "None", "True"),
    "out": "bf16[16, 32, 768]",
}
# Why this problem differs from the original there (docs/pkb-parity.md).
PKB_DIFFERENCES = {
    "unpadded_dim_size": (
        "a global length not divisible by W, so the unpadding path runs (the original passed None)"
    ),
    "out": "the padding is cut, as unpadded_dim_size asks",
}


def world_size_error(world_size, params):
    if params["f"] % world_size:
        return f"F = {params['f']} features of q/k/v do not split into {world_size} equal slices"
    if params["pad"] % world_size == 0 or params["pad"] > params["s"]:
        return "PAD must be in [1, S] and not divisible by W (else nothing is unpadded)"
    return None

# Pure data movement: every element arrives as it left, so nothing is allowed off it.
TOLERANCE = {"rtol": 0.0, "atol": 0.0}


def inputs(ctx):
    p = ctx.params
    qkv = ctx.randn(p["b"], p["s"], 3 * p["f"])
    if ctx.rank == ctx.world_size - 1:
        qkv[:, p["s"] - p["pad"]:] = 0  # the zero padding of the global sequence
    return (qkv, 1, None, p["s"] * ctx.world_size - p["pad"], True)


def reference(qkv_tensor, seq_dim, group=None, unpadded_dim_size=None, restore_shape=True):
    world_size = dist.get_world_size(group)
    orig_shape = list(qkv_tensor.shape)
    features = orig_shape[-1] // 3
    x = qkv_tensor.reshape(orig_shape[:-1] + [3, features])
    scatter_dim = x.dim() - 1
    send = [c.contiguous() for c in torch.tensor_split(x, world_size, scatter_dim)]
    recv = [torch.empty_like(send[0]) for _ in range(world_size)]
    dist.all_to_all(recv, send, group=group)
    out = torch.cat(recv, dim=seq_dim)
    if restore_shape:
        out_shape = list(orig_shape)
        out_shape[seq_dim] *= world_size
        out_shape[-1] = 3 * features // world_size
        out = out.reshape(out_shape)
    if unpadded_dim_size and unpadded_dim_size % world_size != 0:
        out = out.narrow(seq_dim, 0, unpadded_dim_size)
    return out.contiguous()


def traffic(params, world_size, itemsize):
    """Each rank sends W-1 of its W feature slices (3*B*S*F/W elements each);
    HBM: read qkv, write the received slices, then the concatenated output."""
    nbytes = params["b"] * params["s"] * 3 * params["f"] * itemsize
    return {
        "link_bytes": (world_size - 1) / world_size * nbytes,
        "hbm_bytes": 4 * nbytes,
        "flops": 0,
    }
