"""Causal depthwise conv1d over a zig-zag context-parallel sequence, with halo exchange.

A global sequence of 2·W·L tokens is cut into 2W chunks of L tokens; rank r
holds chunks r and 2W-1-r (the zig-zag layout of causal context parallelism).

Arguments on rank r:

- ``x``: (B, C, 2L), working dtype. ``x[..., :L]`` is global chunk r ("chunk
  a"), ``x[..., L:]`` is global chunk 2W-1-r ("chunk b").
- ``weight``: (C, 1, K), working dtype, identical on every rank: one K-tap
  filter per channel, no bias.
- ``group``: None (WORLD).

With X the global (B, C, 2WL) sequence in natural order (X = 0 at negative
positions), the causal depthwise convolution is

    Y[b, c, t] = sum_{j=0}^{K-1} weight[c, 0, j] * X[b, c, t - (K-1) + j]

(``F.conv1d`` of the left-zero-padded X with ``groups=C``). Return a new
tensor y of shape (B, C, 2L) in x's dtype and the same zig-zag layout:
``y[..., :L]`` = Y's chunk r, ``y[..., L:]`` = Y's chunk 2W-1-r.

Each chunk needs the K-1 tokens that precede it globally: chunk a takes the
tail of rank r-1's chunk a (zeros on rank 0); chunk b takes the tail of rank
r+1's chunk b, except on rank W-1, whose chunk b (global chunk W) follows its
own chunk a (global chunk W-1). Requires K-1 <= L.

Sizes (B, C, L, K): tiny (1, 8, 16, 7), default (1, 1024, 1024, 7) as in the
original, large (4, 4096, 8192, 7).

Fix in pkb: the original drew a different filter on every rank; a depthwise
conv layer has one filter, so the weight is shared and y is the true global
convolution.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F

ID = 71
NAME = "hyena_conv1d_boundary_exchange"
CATEGORY = "context-parallel"
ORIGIN = "Savanna / BioNeMo Evo 2 Hyena context-parallel conv1d"
WORLD_SIZE = "any W >= 2"
SIZES = {
    "tiny": {"batch": 1, "channels": 8, "chunk": 16, "kernel": 7},
    "default": {"batch": 1, "channels": 1024, "chunk": 1024, "kernel": 7},
    "large": {"batch": 4, "channels": 4096, "chunk": 8192, "kernel": 7},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("x", "weight", "group"),
    "args": ("bf16[1, 1024, 2048]", "bf16[1024, 1, 7]", "None"),
    "out": "bf16[1, 1024, 2048]",
}


def world_size_error(world_size, params):
    if params["kernel"] - 1 > params["chunk"]:
        return f"the halo (kernel-1 = {params['kernel'] - 1}) is longer than a chunk ({params['chunk']})"
    return None


def inputs(ctx):
    p = ctx.params
    x = ctx.randn(p["batch"], p["channels"], 2 * p["chunk"])
    weight = ctx.randn(p["channels"], 1, p["kernel"], shared=True)
    return (x, weight, None)


def reference(x, weight, group=None):
    ranks = dist.get_process_group_ranks(group or dist.group.WORLD)
    size = len(ranks)
    me = ranks.index(dist.get_rank())
    chunk = x.shape[-1] // 2
    halo = weight.shape[-1] - 1
    tail_a = x[..., chunk - halo:chunk].contiguous()
    tail_b = x[..., 2 * chunk - halo:].contiguous()

    # chunk a's halo: tail of the previous rank's chunk a; chunk b's halo: tail
    # of the next rank's chunk b (global chunk 2W-2-r precedes 2W-1-r).
    halo_a = torch.zeros_like(tail_a)
    halo_b = tail_a.clone() if me == size - 1 else torch.empty_like(tail_b)
    ops = []
    if me > 0:
        ops.append(dist.P2POp(dist.irecv, halo_a, ranks[me - 1], group))
        ops.append(dist.P2POp(dist.isend, tail_b, ranks[me - 1], group))
    if me < size - 1:
        ops.append(dist.P2POp(dist.isend, tail_a, ranks[me + 1], group))
        ops.append(dist.P2POp(dist.irecv, halo_b, ranks[me + 1], group))
    if ops:
        for work in dist.batch_isend_irecv(ops):
            work.wait()

    channels = x.shape[1]
    ya = F.conv1d(torch.cat([halo_a, x[..., :chunk]], dim=-1), weight, groups=channels)
    yb = F.conv1d(torch.cat([halo_b, x[..., chunk:]], dim=-1), weight, groups=channels)
    return torch.cat([ya, yb], dim=-1)


def traffic(params, world_size, itemsize):
    """An interior rank sends two halos of B·C·(K-1) elements; HBM: read x and
    the filter, write y; FLOPs: a multiply-add per tap per output element."""
    b, c, l, k = params["batch"], params["channels"], params["chunk"], params["kernel"]
    return {
        "link_bytes": 2 * b * c * (k - 1) * itemsize,
        "hbm_bytes": (2 * b * c * 2 * l + c * k) * itemsize,
        "flops": 2 * b * c * 2 * l * k,
    }
