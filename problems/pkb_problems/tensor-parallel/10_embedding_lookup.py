"""Row-sharded embedding lookup with all-to-all routing, owner-grouped output.

The global table has W*R rows of width D; rank r holds ``local_shard`` (R, D),
global rows [r*R, (r+1)*R), in the working dtype. Rank r also holds ``indices``
(n,) int64 in [0, W*R). Every id is served by its owner rank id // R.

Return on rank r a new (n, D) tensor in the working dtype whose rows are the
table rows of this rank's ids **grouped by owner**: take the ids in the order
of a stable sort by owner (all ids owned by rank 0 in their input order, then
those owned by rank 1, ...) and output row i = table[sorted_ids[i]]. This is
the order the all-to-all exchange naturally produces (counts, then ids, then
rows), not the input order. Pure data movement: compared bit for bit.

``default`` draws ids uniformly (the original); ``tiny`` and ``large`` send a
``hot_fraction`` of the ids to a few ``hot_rows`` shared by all ranks (skewed,
repeated ids, unequal per-owner counts). The inputs must not be modified.
"""
import torch
import torch.distributed as dist

ID = 10
NAME = "embedding_lookup"
CATEGORY = "tensor-parallel"
ORIGIN = "row-sharded embedding lookup (TorchRec/DLRM-like)"
WORLD_SIZE = "any W >= 2"
SIZES = {
    "tiny": {"n_ids": 32, "rows": 16, "dim": 8, "hot_fraction": 0.5, "hot_rows": 4},
    "default": {"n_ids": 1024, "rows": 1024, "dim": 1024, "hot_fraction": 0.0, "hot_rows": 0},
    "large": {"n_ids": 65536, "rows": 65536, "dim": 1024, "hot_fraction": 0.5, "hot_rows": 256},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("indices", "local_shard"),
    "args": ("int64[1024]", "bf16[1024, 1024]"),
    "out": "bf16[1024, 1024]",
}

# Pure data movement: every element arrives as it left, so nothing is allowed off it.
TOLERANCE = {"rtol": 0.0, "atol": 0.0}


def inputs(ctx):
    p = ctx.params
    total = ctx.world_size * p["rows"]
    ids = ctx.randint(0, total, p["n_ids"])
    if p["hot_fraction"] > 0 and p["hot_rows"] > 0:
        hot = ctx.randint(0, total, p["hot_rows"], shared=True)
        pick = hot[ctx.randint(0, p["hot_rows"], p["n_ids"])]
        use_hot = ctx.rand(p["n_ids"], dtype=torch.float32) < p["hot_fraction"]
        ids = torch.where(use_hot, pick, ids)
    shard = ctx.randn(p["rows"], p["dim"])
    return (ids, shard)


def reference(indices, local_shard):
    rank = dist.get_rank()
    world_size = dist.get_world_size()
    rows, dim = local_shard.shape
    owner = indices // rows
    order = torch.sort(owner, stable=True).indices
    send_ids = indices[order].contiguous()
    send_counts = torch.bincount(owner, minlength=world_size).to(torch.int64)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)
    send_split = send_counts.tolist()
    recv_split = recv_counts.tolist()
    recv_ids = torch.empty(sum(recv_split), dtype=indices.dtype, device=indices.device)
    dist.all_to_all_single(recv_ids, send_ids, output_split_sizes=recv_split, input_split_sizes=send_split)
    rows_out = local_shard[recv_ids - rank * rows].contiguous()
    out = torch.empty((indices.numel(), dim), dtype=local_shard.dtype, device=local_shard.device)
    dist.all_to_all_single(out, rows_out, output_split_sizes=send_split, input_split_sizes=recv_split)
    return out


def traffic(params, world_size, itemsize):
    """Expected for uniform ids: (W-1)/W of this rank's ids (8 bytes each) go
    out and as many rows (D * itemsize) come back from peers; the same volume
    is served to peers. Counts are W int64. HBM: read and write each served
    row, write each output row."""
    n, d = params["n_ids"], params["dim"]
    remote = n * (world_size - 1) / world_size
    return {
        "link_bytes": remote * (8 + d * itemsize) + 8 * world_size,
        "hbm_bytes": 3 * n * d * itemsize + 2 * n * 8,
        "flops": 0,
    }
