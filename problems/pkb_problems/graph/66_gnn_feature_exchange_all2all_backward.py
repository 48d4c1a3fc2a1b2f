"""GNN cooperative feature exchange (backward): rank-rotated all-to-all of gradients, then scatter-add by id.

The reverse of problem 65. Sizes: R = max(1, rows // W) rows per peer on
average, seed_size = max(1, R W / 2), H = hidden. A count matrix N (W x W, int,
random in [0, 2R], the same on every rank, zeros possible): in the forward pass
rank s sent N[s][d] rows to rank d. Chunk c on rank r concerns peer (r + c) mod W.

Inputs on rank r (fp32 throughout, as in the original):
- ``grad_output`` (sum(counts_sent), H) fp32: gradients of the rows r received
  in the forward pass, in W consecutive chunks of sizes counts_sent;
- ``seed_inverse_ids`` (S_r,) int64 in [0, seed_size), S_r = sum(counts_received);
- ``seed_size`` int;
- ``counts_sent`` list of W ints: counts_sent[c] = N[(r + c) mod W][r];
- ``counts_received`` list of W ints: counts_received[c] = N[r][(r + c) mod W];
- ``group``: None (WORLD).

Chunk c of grad_output goes back to rank (r + c) mod W. Rank r receives a
(S_r, H) tensor g of W consecutive chunks of sizes counts_received, chunk c from
rank j = (r + c) mod W (its chunk (-c) mod W). Return the fp32 (seed_size, H)
tensor out with out[i] = sum of g[n] over all n with seed_inverse_ids[n] == i
(zero rows where no id points). Compared with the fp32 tolerance (sums of a few
rows in any order).

Fix relative to the original PKB: the original used equal counts (R for every
pair); pkb draws an uneven, consistent count matrix.
"""
import torch
import torch.distributed as dist

ID = 66
NAME = "gnn_feature_exchange_all2all_backward"
CATEGORY = "graph"
ORIGIN = "DGL GraphBolt cooperative convolution (backward feature exchange)"
WORLD_SIZE = "any W >= 2"
SIZES = {
    "tiny": {"rows": 8, "hidden": 8},
    "default": {"rows": 1024, "hidden": 128},
    "large": {"rows": 131072, "hidden": 512},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("grad_output", "seed_inverse_ids", "seed_size", "counts_sent", "counts_received", "group"),
    "args": ("fp32[1024, 128]", "int64[1024]", "512", "[512, 512]", "[512, 512]", "None"),
    "out": "fp32[512, 128]",
}
# Why this problem differs from the original there (docs/pkb-parity.md).
PKB_DIFFERENCES = {
    "grad_output": "its row count is the sum of the random counts_sent",
    "seed_inverse_ids": "its length is the sum of the random counts_received",
    "counts_sent": "an uneven random count matrix (the original's counts were equal)",
    "counts_received": "an uneven random count matrix (the original's counts were equal)",
}


def inputs(ctx):
    world_size, rank = ctx.world_size, ctx.rank
    per_peer = max(1, ctx.params["rows"] // world_size)
    matrix = ctx.randint(0, 2 * per_peer + 1, world_size, world_size, shared=True)
    peers = [(rank + c) % world_size for c in range(world_size)]
    counts_sent = [int(matrix[j, rank]) for j in peers]
    counts_received = [int(matrix[rank, j]) for j in peers]
    seed_size = max(1, per_peer * world_size // 2)
    grad = ctx.randn(sum(counts_sent), ctx.params["hidden"], dtype=torch.float32)
    ids = ctx.randint(0, seed_size, sum(counts_received))
    return (grad, ids, seed_size, counts_sent, counts_received, None)


def _unrotate(sizes, rank, world_size):
    return [sizes[(peer - rank) % world_size] for peer in range(world_size)]


def _rotated_all_to_all(data, in_sizes, out_sizes, group):
    """Chunk c of ``data`` goes to peer (r + c) mod W; output chunk c comes from there."""
    world_size = dist.get_world_size(group)
    rank = dist.get_rank(group)
    chunks = torch.split(data, in_sizes)
    send = torch.cat([chunks[(peer - rank) % world_size] for peer in range(world_size)])
    recv = data.new_empty((sum(out_sizes),) + tuple(data.shape[1:]))
    dist.all_to_all_single(recv, send.contiguous(), _unrotate(out_sizes, rank, world_size),
                           _unrotate(in_sizes, rank, world_size), group=group)
    per_peer = torch.split(recv, _unrotate(out_sizes, rank, world_size))
    return torch.cat([per_peer[(rank + c) % world_size] for c in range(world_size)])


@torch.no_grad()
def reference(grad_output, seed_inverse_ids, seed_size, counts_sent, counts_received, group=None):
    received = _rotated_all_to_all(grad_output, list(counts_sent), list(counts_received), group)
    out = torch.zeros((seed_size,) + tuple(received.shape[1:]), dtype=received.dtype, device=received.device)
    return out.index_add_(0, seed_inverse_ids, received)


def traffic(params, world_size, itemsize):
    """fp32 rows: on average R W rows of H leave each rank, (W-1)/W to peers; HBM:
    the exchange reads and writes them, the scatter-add reads them and
    reads/writes the (R W / 2, H) result."""
    rows = max(1, params["rows"] // world_size) * world_size
    nbytes = rows * params["hidden"] * 4
    return {"link_bytes": (world_size - 1) / world_size * nbytes, "hbm_bytes": 4 * nbytes,
            "flops": rows * params["hidden"]}
