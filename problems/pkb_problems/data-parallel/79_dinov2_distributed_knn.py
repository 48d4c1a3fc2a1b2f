"""Distributed k-nearest-neighbour search over a sharded train set (DINOv2 k-NN evaluation).

Each rank r holds ``test_features_rank`` (Q, D) (its own queries),
``train_features_rank_T`` (D, T) (its shard of the train features,
transposed: column j is train sample g = r*T + j of the global set, T = train // W),
``train_labels_rank`` (1, T) int64 (label of sample g = g mod 1000), the int
``max_k`` k <= T and ``group`` (None: WORLD). Features are in the working
dtype, as in the original.

For every query q of rank r, rank its similarity s(q, g) = q . train_g against all
W*T train samples of all ranks, in descending order of similarity with ties
broken by the smaller global index g, and keep the first k. Return on rank r the
tuple (sims (Q, k) in the working dtype, labels (Q, k) int64) for its own queries: the k
similarities in that order and the labels of those samples. The original
broadcasts each owner's queries in turn, takes every rank's local top-k and
gathers them on the owner (2W broadcasts, 2W gathers).

Inputs: features are roughly unit-norm ternary vectors (entries -1, 0, 1 times
a power of two); each query has at most 64 non-zero entries, so every partial
sum of a similarity is a small integer times a power of two, exact in bf16,
fp16 and fp32 in any summation order. Similarities are therefore exact in the
working dtype, ties are frequent and resolved by the index rule above, and
values and labels compare exactly. (The original drew normal bf16 features,
whose similarities, rounded to bf16, tie at rank k in an order that depends on
rounding.)
"""
import math

import torch
import torch.distributed as dist

ID = 79
NAME = "dinov2_distributed_knn"
CATEGORY = "data-parallel"
ORIGIN = "DINOv2 k-NN evaluation"
WORLD_SIZE = "any W >= 2 with train // W >= k"
# Every similarity is exact in the working dtype (see Inputs).
TOLERANCE = {"rtol": 0.0, "atol": 0.0}
SIZES = {
    "tiny": {"queries": 4, "train": 32, "dim": 8, "k": 4},
    "default": {"queries": 32, "train": 16384, "dim": 384, "k": 200},
    "large": {"queries": 256, "train": 1048576, "dim": 768, "k": 200},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("test_features_rank", "train_features_rank_T", "train_labels_rank", "max_k", "group"),
    "args": ("bf16[32, 384]", "bf16[384, 8192]", "int64[1, 8192]", "200", "None"),
    "out": ("bf16[32, 200]", "int64[32, 200]"),
}


def world_size_error(world_size, params):
    if params["train"] // world_size < params["k"]:
        return f"train shard {params['train'] // world_size} is smaller than k = {params['k']}"
    return None


_QUERY_NONZEROS = 64


def _ternary_features(ctx, n, dim, nonzeros=None):
    """n vectors of entries -1, 0, 1 times 2^-e (norms ~1): ``nonzeros`` non-zero
    entries at random places, or two thirds of them non-zero when None."""
    signs = ctx.randint(0, 2, n, dim, dtype=torch.float32) * 2 - 1
    if nonzeros is None:
        keep = ctx.randint(0, 3, n, dim) > 0
        expected = 2 * dim / 3
    else:
        chosen = torch.topk(ctx.rand(n, dim, dtype=torch.float32), nonzeros, dim=1).indices
        keep = torch.zeros(n, dim, dtype=torch.bool, device=ctx.device).scatter_(1, chosen, True)
        expected = nonzeros
    e = round(math.log2(math.sqrt(expected)))
    return (signs * keep * 2.0 ** -e).to(ctx.dtype)


def inputs(ctx):
    p, W, r = ctx.params, ctx.world_size, ctx.rank
    T = p["train"] // W
    queries = _ternary_features(ctx, p["queries"], p["dim"], min(p["dim"], _QUERY_NONZEROS))
    train_T = _ternary_features(ctx, T, p["dim"]).t().contiguous()
    labels = (torch.arange(r * T, (r + 1) * T, device=ctx.device) % 1000).view(1, T)
    return (queries, train_T, labels, p["k"], None)


def _top_k(sims, labels, k):
    """First k by descending value; equal values keep their column order."""
    values, order = torch.sort(sims, dim=1, descending=True, stable=True)
    return values[:, :k].contiguous(), torch.gather(labels, 1, order[:, :k]).contiguous()


@torch.no_grad()
def reference(test_features_rank, train_features_rank_T, train_labels_rank, max_k, group=None):
    group = group or dist.group.WORLD
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    result = None
    for owner in range(world_size):
        owner_global = dist.get_global_rank(group, owner)
        queries = test_features_rank.clone() if rank == owner else torch.empty_like(test_features_rank)
        dist.broadcast(queries, src=owner_global, group=group)
        sims = queries @ train_features_rank_T
        vals, labs = _top_k(sims, train_labels_rank.expand(sims.shape[0], -1), max_k)
        if rank == owner:
            all_vals = [torch.empty_like(vals) for _ in range(world_size)]
            all_labs = [torch.empty_like(labs) for _ in range(world_size)]
            dist.gather(vals, all_vals, dst=owner_global, group=group)
            dist.gather(labs, all_labs, dst=owner_global, group=group)
            # Rank order, each list in (value desc, index asc) order: a stable sort
            # of the concatenation breaks ties by the smaller global index.
            result = _top_k(torch.cat(all_vals, dim=1), torch.cat(all_labs, dim=1), max_k)
        else:
            dist.gather(vals, None, dst=owner_global, group=group)
            dist.gather(labs, None, dst=owner_global, group=group)
    return result


def traffic(params, world_size, itemsize):
    """Features in the working dtype, int64 labels. Links: this rank's queries
    broadcast once (~Q*D items sent) and its k candidates (value + 8-byte label)
    sent to each of the W-1 other owners. HBM: the train shard read once per owner,
    the (Q, T) similarities written and sorted per owner. FLOPs: W GEMMs of Q*D*T."""
    W = world_size
    Q, D, k = params["queries"], params["dim"], params["k"]
    T = params["train"] // W
    return {
        "link_bytes": Q * D * itemsize + (W - 1) * Q * k * (itemsize + 8),
        "hbm_bytes": W * (D * T * itemsize + 3 * Q * T * itemsize) + W * Q * k * (itemsize + 8),
        "flops": 2 * W * Q * D * T,
    }
