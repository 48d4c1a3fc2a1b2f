"""TorchRec KeyedJaggedTensor all-to-all: send each feature's jagged ids to the rank that owns the feature.

Signature ``reference(lengths, values, key_splits, batch_size, pg, weights=None,
stride_per_key=None, stagger=1)``; ``pg`` None = WORLD. All tensors int64.

A keyed jagged tensor (KJT) with F = sum(key_splits) features over a local
batch of B = ``batch_size`` samples. Rank r holds:

* ``lengths``: int64 (F*B,), feature-major: lengths[f*B + b] = number of ids of
  feature f in sample b (zero allowed);
* ``values``: int64 (sum(lengths),), the ids, concatenated in the order of
  ``lengths`` (feature 0 sample 0, feature 0 sample 1, ..., feature F-1 sample B-1);
* ``key_splits``: list of W ints, identical on all ranks: features
  [sum(key_splits[:d]), sum(key_splits[:d+1])) belong to rank d (here
  key_splits[d] = 1 + d mod 3).

Rank r sends rank d the lengths and values of d's features (a split-size
exchange, then one variable all-to-all for lengths and one for values). On
rank r, with L = key_splits[r] local features, the received data (ordered by
source rank s, then local feature, then sample) is regrouped to (local feature,
source rank, sample) order. Return on rank r a dict of int64 tensors:

* ``lengths``: (L*W*B,), [(l*W + s)*B + b] = length of local feature l, sample b
  of rank s;
* ``values``: the ids in the order of ``lengths``;
* ``stride``: 0-dim, W*B (the global batch);
* ``stride_per_rank``: (W,), B for every source rank.

Everything compares exactly. The signature's other paths are implemented as in
TorchRec but not benchmarked: ``weights`` (float per-id weights, permuted like
``values``, returned as "weights"); ``stride_per_key`` (variable batch per
feature: "lengths", "values" and "stride_per_key_per_rank" (L, W) are returned);
``stagger`` > 1 (source ranks taken in staggered order). Unequal batch sizes
across ranks are also handled (per-sample regrouping).

Fix in pkb: lengths start at 0 (the original drew them in [5, 21), so no sample
was ever empty); the original compared the ids with a float tolerance.
"""
import torch
import torch.distributed as dist

ID = 70
NAME = "torchrec_kjt_all2all"
CATEGORY = "other"
ORIGIN = "TorchRec KJTAllToAll"
WORLD_SIZE = "any W >= 2"
SIZES = {
    "tiny": {"batch": 4, "min_len": 0, "max_len": 4, "vocab": 1000000},
    "default": {"batch": 512, "min_len": 0, "max_len": 21, "vocab": 1000000},
    "large": {"batch": 16384, "min_len": 0, "max_len": 65, "vocab": 1000000},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": (
        "lengths", "values", "key_splits", "batch_size", "pg", "weights", "stride_per_key", "stagger",
    ),
    "args": ("int64[1536]", "int64[?]", "[1, 2]", "512", "None", "=None", "=None", "=1"),
    "out": "rank 0: {'lengths': int64[1024], 'values': int64[?], 'stride': int64[], 'stride_per_rank': int64[2]} | rank 1: {'lengths': int64[2048], 'values': int64[?], 'stride': int64[], 'stride_per_rank': int64[2]}",
}
# No CUDA-graph capture: the reference syncs with the host; data-dependent split sizes read back with .tolist().
CUDA_GRAPH = False


def _key_splits(world_size):
    return [1 + d % 3 for d in range(world_size)]


def inputs(ctx):
    p = ctx.params
    key_splits = _key_splits(ctx.world_size)
    lengths = ctx.randint(p["min_len"], p["max_len"], sum(key_splits) * p["batch"])
    values = ctx.randint(0, p["vocab"], int(lengths.sum()))
    return (lengths, values, key_splits, p["batch"], None)


# ---------------------------------------------------------------- helpers


def _segment_sums(data, seg_lengths):
    """Sums of consecutive segments of ``data`` with the given lengths."""
    seg = torch.repeat_interleave(torch.arange(seg_lengths.numel(), device=data.device), seg_lengths,
                                  output_size=data.numel())
    return torch.zeros(seg_lengths.numel(), dtype=data.dtype, device=data.device).index_add_(0, seg, data)


def _permute_segments(data, seg_lengths, order):
    """Concatenate the segments of ``data`` (lengths ``seg_lengths``) in ``order``."""
    device = data.device
    starts = torch.cumsum(seg_lengths, 0) - seg_lengths
    out_len = seg_lengths[order]
    total = int(out_len.sum())
    seg_of = torch.repeat_interleave(torch.arange(order.numel(), device=device), out_len, output_size=total)
    out_starts = torch.cumsum(out_len, 0) - out_len
    idx = starts[order][seg_of] + torch.arange(total, device=device) - out_starts[seg_of]
    return data[idx]


def _feature_order(world, stagger):
    per = world // stagger
    return [x + per * y for x in range(per) for y in range(stagger)]


def _recat(local_split, world, stagger, device):
    """Block order (source, local feature) -> (local feature, source)."""
    order = [f + s * local_split for f in range(local_split) for s in _feature_order(world, stagger)]
    return torch.tensor(order, dtype=torch.int64, device=device)


def _recat_per_sample(local_split, world, stagger, batch_per_rank, device):
    """Sample order (source, local feature, b) -> (local feature, source, b), with
    a different batch size per source rank."""
    offsets = [0]
    for b in batch_per_rank[:-1]:
        offsets.append(offsets[-1] + local_split * b)
    starts, sizes = [], []
    for f in range(local_split):
        for s in _feature_order(world, stagger):
            starts.append(offsets[s] + f * batch_per_rank[s])
            sizes.append(batch_per_rank[s])
    starts = torch.tensor(starts, dtype=torch.int64, device=device)
    sizes = torch.tensor(sizes, dtype=torch.int64, device=device)
    total = int(sizes.sum())
    blk = torch.repeat_interleave(torch.arange(sizes.numel(), device=device), sizes, output_size=total)
    block_starts = torch.cumsum(sizes, 0) - sizes
    return starts[blk] + torch.arange(total, device=device) - block_starts[blk]


# ---------------------------------------------------------------- reference


@torch.no_grad()
def reference(lengths, values, key_splits, batch_size, pg=None, weights=None, stride_per_key=None, stagger=1):
    pg = pg or dist.group.WORLD
    world = dist.get_world_size(pg)
    rank = dist.get_rank(pg)
    device = lengths.device
    i64 = torch.int64
    num_features = sum(key_splits)
    variable = stride_per_key is not None
    strides = torch.tensor(list(stride_per_key) if variable else [batch_size] * num_features,
                           dtype=i64, device=device)

    # split sizes per destination rank
    length_per_key = _segment_sums(lengths.to(i64), strides)
    owner = torch.repeat_interleave(torch.arange(world, device=device),
                                    torch.tensor(key_splits, dtype=i64, device=device), output_size=num_features)
    length_splits = torch.zeros(world, dtype=i64, device=device).index_add_(0, owner, strides)
    value_splits = torch.zeros(world, dtype=i64, device=device).index_add_(0, owner, length_per_key)

    columns = [length_splits, value_splits]
    tensors = [lengths, values]
    if variable:
        columns.append(torch.tensor(key_splits, dtype=i64, device=device))
        tensors.append(strides)
    if weights is not None:
        columns.append(value_splits)
        tensors.append(weights)
    if not variable:
        columns.append(torch.full((world,), batch_size, dtype=i64, device=device))

    meta_in = torch.stack(columns, dim=1).reshape(-1)
    meta_out = torch.empty_like(meta_in)
    dist.all_to_all_single(meta_out, meta_in, group=pg)
    send_rows = torch.stack(columns, dim=0).tolist()
    recv_rows = meta_out.view(world, -1).T.tolist()
    stride_per_rank = None if variable else recv_rows[-1]

    received, works = [], []
    for k, t in enumerate(tensors):
        out = torch.empty(sum(recv_rows[k]), dtype=t.dtype, device=device)
        works.append(dist.all_to_all_single(out, t.contiguous(), output_split_sizes=recv_rows[k],
                                            input_split_sizes=send_rows[k], group=pg, async_op=True))
        received.append(out)
    for work in works:
        work.wait()
    recv_lengths, recv_values = received[0], received[1]
    recv_strides = received[2] if variable else None
    recv_weights = received[-1] if weights is not None else None

    local_split = key_splits[rank]
    if variable:
        if local_split > 0:
            order = _recat(local_split, world, stagger, device)
            value_seg = _segment_sums(recv_lengths.to(i64), recv_strides.to(i64))
            recv_lengths = _permute_segments(recv_lengths, recv_strides.to(i64), order)
            recv_values = _permute_segments(recv_values, value_seg, order)
            if recv_weights is not None:
                recv_weights = _permute_segments(recv_weights, value_seg, order)
        per_key_per_rank = recv_strides.view(world, local_split).T
        if stagger > 1:
            cols = torch.arange(world, device=device).view(stagger, -1).T.reshape(-1)
            per_key_per_rank = per_key_per_rank[:, cols]
        result = {"lengths": recv_lengths, "values": recv_values, "stride_per_key_per_rank": per_key_per_rank}
    else:
        if local_split > 0 and all(s == stride_per_rank[0] for s in stride_per_rank):
            if stride_per_rank[0] > 0:
                order = _recat(local_split, world, stagger, device)
                rows = recv_lengths.view(-1, stride_per_rank[0])
                row_len = rows.to(i64).sum(dim=1)
                recv_values = _permute_segments(recv_values, row_len, order)
                if recv_weights is not None:
                    recv_weights = _permute_segments(recv_weights, row_len, order)
                recv_lengths = rows[order].reshape(-1)
        elif local_split > 0:
            order = _recat_per_sample(local_split, world, stagger, stride_per_rank, device)
            seg = recv_lengths.to(i64)
            recv_values = _permute_segments(recv_values, seg, order)
            if recv_weights is not None:
                recv_weights = _permute_segments(recv_weights, seg, order)
            recv_lengths = recv_lengths[order]
        result = {
            "lengths": recv_lengths,
            "values": recv_values,
            "stride": torch.tensor(sum(stride_per_rank), device=device),
            "stride_per_rank": torch.tensor(stride_per_rank, device=device),
        }
    if recv_weights is not None:
        result["weights"] = recv_weights
    return result


def traffic(params, world_size, itemsize):
    """int64 throughout (itemsize ignored). Per rank, F = sum(1 + d mod 3) features,
    F*B lengths and ~F*B*mean_len values; (W-1)/W of them (on average) leave the
    rank, plus the tiny split exchange. HBM: the sends are read, the receives
    written, then read and written again by the regrouping."""
    f = sum(1 + d % 3 for d in range(world_size))
    n = f * params["batch"] * (1 + (params["min_len"] + params["max_len"] - 1) / 2)
    return {
        "link_bytes": (world_size - 1) / world_size * n * 8,
        "hbm_bytes": 4 * n * 8,
        "flops": 0,
    }
