"""GNN cooperative feature exchange (forward): gather rows by id, then a rank-rotated all-to-all.

Sizes: R = max(1, rows // W) rows per peer on average, F = max(1, 3 R W / 4)
feature rows, H = hidden. A count matrix N (W x W, int, random in [0, 2R], the
same on every rank, zeros possible) says how many rows rank s sends to rank d.
Chunks are numbered relative to the rank ("rotated"): on rank r, chunk c
concerns peer (r + c) mod W.

Inputs on rank r:
- ``local_features`` (F, H), working dtype;
- ``seed_inverse_ids`` (S_r,) int64 in [0, F), S_r = sum_d N[r][d];
- ``counts_sent`` list of W ints: counts_sent[c] = N[(r + c) mod W][r], the rows
  rank r receives from peer (r + c) mod W (the output chunk sizes);
- ``counts_received`` list of W ints: counts_received[c] = N[r][(r + c) mod W],
  the rows rank r sends to peer (r + c) mod W (the input chunk sizes);
- ``group``: None (WORLD).

Let g = local_features[seed_inverse_ids] (S_r, H), cut into W consecutive chunks
of sizes counts_received; chunk c goes to rank (r + c) mod W. Return on rank r the
(sum(counts_sent), H) tensor made of W consecutive chunks of sizes counts_sent,
where chunk c is the chunk that rank j = (r + c) mod W sent to r (its chunk
(-c) mod W). Pure data movement: compared bit for bit.

Fix relative to the original PKB: the original used equal counts (R for every
pair); pkb draws an uneven, consistent count matrix so chunk bookkeeping is tested.
"""
import torch
import torch.distributed as dist

ID = 65
NAME = "gnn_feature_exchange_all2all"
CATEGORY = "graph"
ORIGIN = "DGL GraphBolt cooperative convolution (forward feature exchange)"
WORLD_SIZE = "any W >= 2"
SIZES = {
    "tiny": {"rows": 8, "hidden": 8},
    "default": {"rows": 1024, "hidden": 128},
    "large": {"rows": 131072, "hidden": 512},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("local_features", "seed_inverse_ids", "counts_sent", "counts_received", "group"),
    "args": ("bf16[768, 128]", "int64[1024]", "[512, 512]", "[512, 512]", "None"),
    "out": "bf16[1024, 128]",
}
# Why this problem differs from the original there (docs/pkb-parity.md).
PKB_DIFFERENCES = {
    "seed_inverse_ids": "its length is the sum of the random counts_received",
    "counts_sent": (
        "an uneven random count matrix (the original's counts were equal), so chunk bookkeeping is tested"
    ),
    "counts_received": (
        "an uneven random count matrix (the original's counts were equal), so chunk bookkeeping is tested"
    ),
    "out": "its row count is the sum of the random counts",
}


def _count_matrix(ctx):
    per_peer = max(1, ctx.params["rows"] // ctx.world_size)
    return ctx.randint(0, 2 * per_peer + 1, ctx.world_size, ctx.world_size, shared=True), per_peer


def _rotated_counts(matrix, rank, world_size):
    peers = [(rank + c) % world_size for c in range(world_size)]
    counts_sent = [int(matrix[j, rank]) for j in peers]
    counts_received = [int(matrix[rank, j]) for j in peers]
    return counts_sent, counts_received

# Pure data movement: every element arrives as it left, so nothing is allowed off it.
TOLERANCE = {"rtol": 0.0, "atol": 0.0}


def inputs(ctx):
    matrix, per_peer = _count_matrix(ctx)
    num_features = max(1, 3 * per_peer * ctx.world_size // 4)
    counts_sent, counts_received = _rotated_counts(matrix, ctx.rank, ctx.world_size)
    features = ctx.randn(num_features, ctx.params["hidden"])
    ids = ctx.randint(0, num_features, sum(counts_received))
    return (features, ids, counts_sent, counts_received, None)


def _unrotate(sizes, rank, world_size):
    """Reorder per-chunk sizes (chunk c = peer (r+c) mod W) into per-peer order."""
    return [sizes[(peer - rank) % world_size] for peer in range(world_size)]


def _rotated_all_to_all(data, in_sizes, out_sizes, group):
    """Chunk c of ``data`` goes to peer (r + c) mod W; output chunk c comes from there."""
    world_size = dist.get_world_size(group)
    rank = dist.get_rank(group)
    perm = [(peer - rank) % world_size for peer in range(world_size)]   # chunk index per peer
    chunks = torch.split(data, in_sizes)
    send = torch.cat([chunks[c] for c in perm]) if chunks else data
    recv = data.new_empty((sum(out_sizes),) + tuple(data.shape[1:]))
    dist.all_to_all_single(recv, send.contiguous(), _unrotate(out_sizes, rank, world_size),
                           _unrotate(in_sizes, rank, world_size), group=group)
    per_peer = torch.split(recv, _unrotate(out_sizes, rank, world_size))
    return torch.cat([per_peer[(rank + c) % world_size] for c in range(world_size)])


@torch.no_grad()
def reference(local_features, seed_inverse_ids, counts_sent, counts_received, group=None):
    gathered = local_features[seed_inverse_ids]
    return _rotated_all_to_all(gathered, list(counts_received), list(counts_sent), group)


def traffic(params, world_size, itemsize):
    """On average R W rows of H leave each rank, (W-1)/W of them to peers; HBM:
    the gather reads and writes them, the exchange writes the output."""
    rows = max(1, params["rows"] // world_size) * world_size
    nbytes = rows * params["hidden"] * itemsize
    return {"link_bytes": (world_size - 1) / world_size * nbytes, "hbm_bytes": 4 * nbytes, "flops": 0}
