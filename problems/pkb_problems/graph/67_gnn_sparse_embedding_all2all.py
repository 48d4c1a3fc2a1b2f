"""Sparse-embedding exchange: route (id, row) pairs to the owner rank id mod W.

Inputs on rank r: ``idx`` (nnz,) int64 random ids in [0, num_nodes) (repeats
possible); ``value`` (nnz, hidden) in the working dtype, row i belonging to
idx[i]; ``num_nodes`` int (nodes rounded up to a multiple of W; not needed by the
computation); ``group`` None (WORLD).

The owner of id i is i mod W. Each rank sends every pair to its owner. Return on
rank r the tuple (ids (M_r,) int64, rows (M_r, hidden) working dtype) of all pairs
owned by r, ordered by source rank (0..W-1) and, within one source, in that
source's original order (a stable sort by owner). M_r varies per rank. Pure data
movement: both leaves compared bit for bit (the original compared ids with rtol).
"""
import torch
import torch.distributed as dist

ID = 67
NAME = "gnn_sparse_embedding_all2all"
CATEGORY = "graph"
ORIGIN = "DGL distributed sparse-embedding exchange (dgl.distributed)"
WORLD_SIZE = "any W >= 2"
SIZES = {
    "tiny": {"nnz": 32, "hidden": 8, "nodes": 1000},
    "default": {"nnz": 1024, "hidden": 128, "nodes": 100000},
    "large": {"nnz": 1048576, "hidden": 256, "nodes": 100000000},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("idx", "value", "num_nodes", "group"),
    "args": ("int64[1024]", "bf16[1024, 128]", "100000", "None"),
    "out": ("int64[?]", "bf16[?, 128]"),
}

# Pure data movement: every element arrives as it left, so nothing is allowed off it.
TOLERANCE = {"rtol": 0.0, "atol": 0.0}


def inputs(ctx):
    p = ctx.params
    num_nodes = -(-p["nodes"] // ctx.world_size) * ctx.world_size
    idx = ctx.randint(0, num_nodes, p["nnz"])
    value = ctx.randn(p["nnz"], p["hidden"])
    return (idx, value, num_nodes, None)


@torch.no_grad()
def reference(idx, value, num_nodes, group=None):
    world_size = dist.get_world_size(group)
    owner = idx % world_size
    perm = torch.argsort(owner, stable=True)
    send_counts = torch.bincount(owner, minlength=world_size)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts, group=group)
    send_splits, recv_splits = send_counts.tolist(), recv_counts.tolist()
    total = sum(recv_splits)
    recv_idx = idx.new_empty(total)
    dist.all_to_all_single(recv_idx, idx[perm], recv_splits, send_splits, group=group)
    recv_value = value.new_empty((total,) + tuple(value.shape[1:]))
    dist.all_to_all_single(recv_value, value[perm].contiguous(), recv_splits, send_splits, group=group)
    return recv_idx, recv_value


def traffic(params, world_size, itemsize):
    """(W-1)/W of the ids (8 B) and rows leave each rank; HBM: the permutation
    reads and writes them, the exchange writes the received copy."""
    nbytes = params["nnz"] * (8 + params["hidden"] * itemsize)
    return {"link_bytes": (world_size - 1) / world_size * nbytes, "hbm_bytes": 3 * nbytes, "flops": 0}
