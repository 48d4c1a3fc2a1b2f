"""MAGI-1 context-shuffle-overlap attention: per-range Ulysses attention with all-to-alls overlapped with compute.

The sequence consists of R ranges (``cp_shuffle_num``) of N tokens each
(``clip_token_nums``). Every range is split over the ranks in blocks of
P = ceil(N/W) tokens: rank r holds positions [r·P, (r+1)·P) of each range;
positions >= N (only on the last rank(s) when W does not divide N) are
padding.

Head counts: Hq = ``q_heads`` unless W does not divide it, then
W·max(1, Hq // W); Hkv = ``kv_heads`` unless neither divides the other, then W.
Query head j reads KV head j // (Hq/Hkv) (grouped-query attention).

Arguments on rank r:

- ``query``: (R·P, Hq, D), working dtype; row i·P + p is range i, position r·P + p.
- ``key_value``: (R·P, Hkv, 2D), working dtype, same token layout; [..., :D] is
  the key, [..., D:] the value.
- ``k_ranges``: (R, 2) int64, [[i·N, (i+1)·N]], identical on every rank: the key
  rows of range i in the concatenation of all ranges' N real tokens.
- ``cp_shuffle_num`` = R, ``clip_token_nums`` = N (ints), ``group`` = None (WORLD).

Output: a new (R·P, Hq, D) tensor in the working dtype, same layout as query:
for every query token (range i, real or padding) and head j, non-causal softmax
attention with scale 1/sqrt(D) over the N real tokens of range i, keys and
values from KV head j // (Hq/Hkv).

The reference moves KV to head shards with one all-to-all (rank r gets KV
heads [r·Hkv/W, (r+1)·Hkv/W) of every token; when Hkv < W divides W, each KV
head is first repeated W/Hkv times), then per range scatters the queries'
heads and gathers the range's tokens (all-to-all), attends with Hq/W query
heads, and returns outputs by all-to-all; the query all-to-all of range i+1
and the output all-to-all of range i run asynchronously, overlapping the
attention of the next range.

Sizes (R, N, Hq, Hkv, D): tiny (4, 10, 8, 4, 16), default (4, 12150, 24, 8, 128)
as in the original for W <= 4, large (4, 21600, 48, 8, 128) (the original's
setting for W > 4).

Fix in pkb: with unit-scale queries, attention over 12,150 keys is nearly
uniform (output std ~0.015, the size of the original's atol); pkb scales the
queries by 3 so outputs are dominated by a few keys per query.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F

ID = 77
NAME = "magi1_cso_async_attention"
CATEGORY = "context-parallel"
ORIGIN = "MAGI-1 context-shuffle-overlap (CSO) attention"
WORLD_SIZE = "any W >= 2 (head counts adjusted to W)"
SIZES = {
    "tiny": {"ranges": 4, "tokens": 10, "q_heads": 8, "kv_heads": 4, "head_dim": 16},
    "default": {"ranges": 4, "tokens": 12150, "q_heads": 24, "kv_heads": 8, "head_dim": 128},
    "large": {"ranges": 4, "tokens": 21600, "q_heads": 48, "kv_heads": 8, "head_dim": 128},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("query", "key_value", "k_ranges", "cp_shuffle_num", "clip_token_nums", "group"),
    "args": ("bf16[24300, 24, 128]", "bf16[24300, 8, 256]", "int64[4, 2]", "4", "12150", "None"),
    "out": "bf16[24300, 24, 128]",
}

_Q_SCALE = 3.0


def _head_counts(params, world_size):
    hq, hkv = params["q_heads"], params["kv_heads"]
    if hq % world_size:
        hq = world_size * max(1, hq // world_size)
    if hkv % world_size and world_size % hkv:
        hkv = world_size
    return hq, hkv


def world_size_error(world_size, params):
    hq, hkv = _head_counts(params, world_size)
    if hq % hkv:
        return f"after adjusting to W, {hq} query heads do not group over {hkv} KV heads"
    return None


def inputs(ctx):
    p = ctx.params
    hq, hkv = _head_counts(p, ctx.world_size)
    per_rank = -(-p["tokens"] // ctx.world_size)
    rows = p["ranges"] * per_rank
    d = p["head_dim"]
    query = ctx.randn(rows, hq, d, scale=_Q_SCALE)
    key_value = ctx.randn(rows, hkv, 2 * d)
    starts = torch.arange(p["ranges"], device=ctx.device, dtype=torch.int64) * p["tokens"]
    k_ranges = torch.stack([starts, starts + p["tokens"]], dim=1)
    return (query, key_value, k_ranges, p["ranges"], p["tokens"], None)


def _attend(q, k, v):
    """q: (Lq, Hq', D); k, v: (Lk, Hk', D) with Hk' dividing Hq'. Returns (Lq, Hq', D)."""
    group = q.shape[1] // k.shape[1]
    q = q.transpose(0, 1).unsqueeze(0)
    k = k.repeat_interleave(group, dim=1).transpose(0, 1).unsqueeze(0)
    v = v.repeat_interleave(group, dim=1).transpose(0, 1).unsqueeze(0)
    return F.scaled_dot_product_attention(q, k, v).squeeze(0).transpose(0, 1)


def reference(query, key_value, k_ranges, cp_shuffle_num, clip_token_nums=None, group=None):
    w = dist.get_world_size(group)
    rows, hq, d = query.shape
    nr = cp_shuffle_num
    per_rank = rows // nr
    clip = int(clip_token_nums or w * per_rank)

    # KV -> head shards: recv[s] = rank s's tokens, this rank's KV heads.
    kv = key_value
    if kv.shape[1] < w and w % kv.shape[1] == 0:
        kv = kv.repeat_interleave(w // kv.shape[1], dim=1)
    hk = kv.shape[1] // w
    send = kv.reshape(rows, w, hk, 2 * d).transpose(0, 1).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    kv = recv.reshape(w, nr, per_rank, hk, 2 * d).transpose(0, 1).reshape(nr, w * per_rank, hk, 2 * d)
    kv = kv[:, :clip].reshape(nr * clip, hk, 2 * d)
    bounds = k_ranges.tolist()

    # Queries: block t of range i goes to rank t (its heads, this rank's positions).
    hl = hq // w
    q_send = query.reshape(nr, per_rank, w, hl, d).transpose(1, 2).contiguous()  # (R, W, P, Hl, D)

    def launch(x):
        out = torch.empty_like(x)
        return out, dist.all_to_all_single(out, x, group=group, async_op=True)

    pending_q = launch(q_send[0])
    pending_out = []
    for i in range(nr):
        q_recv, work = pending_q
        work.wait()
        if i + 1 < nr:
            pending_q = launch(q_send[i + 1])
        start, end = bounds[i]
        o = _attend(q_recv.reshape(w * per_rank, hl, d), kv[start:end, :, :d], kv[start:end, :, d:])
        pending_out.append(launch(o.reshape(w, per_rank, hl, d).contiguous()))
    outs = []
    for o_recv, work in pending_out:
        work.wait()
        outs.append(o_recv)  # (W, P, Hl, D): [s] = heads of rank s, this rank's positions
    return torch.stack(outs).permute(0, 2, 1, 3, 4).reshape(rows, hq, d)


def traffic(params, world_size, itemsize):
    """One all-to-all of KV and, per range, one of queries and one of outputs,
    each sending (W-1)/W of its tensor. HBM: query, KV and output read or
    written once per all-to-all, the range's KV re-read per attention. FLOPs:
    4·D per query-key pair and head (QKᵀ and PV)."""
    hq, hkv = _head_counts(params, world_size)
    per_rank = -(-params["tokens"] // world_size)
    rows = params["ranges"] * per_rank
    d = params["head_dim"]
    kv_heads_sent = max(hkv, world_size) if world_size % hkv == 0 else hkv
    q_bytes = rows * hq * d * itemsize
    kv_bytes = rows * kv_heads_sent * 2 * d * itemsize
    return {
        "link_bytes": (world_size - 1) / world_size * (kv_bytes + 2 * q_bytes),
        "hbm_bytes": 3 * (kv_bytes + 2 * q_bytes),
        "flops": 4 * rows * hq * params["tokens"] * d,
    }
