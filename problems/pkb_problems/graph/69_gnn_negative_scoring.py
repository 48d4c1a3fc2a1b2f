"""Link-prediction rank evaluation: all-gather variable-length score blocks, rank each positive among its negatives.

Inputs on rank r (fp32, fixed): ``local_pos_scores`` (n_r,) and
``local_neg_scores`` (n_r, negatives), with n_r = max(1, rows // W) + (r mod 3)
(so the ranks hold different numbers of rows); ``group`` None (WORLD). Row i
holds the score of one positive edge and of its ``negatives`` negative edges.

Concatenate all ranks' rows in rank order (n = sum of n_r rows) and return, on
every rank, the int64 tensor (n,) with
    rank_i = 1 + #{ j : neg_i[j] > pos_i }
i.e. the 1-based position of the positive when [pos_i, neg_i...] is sorted by
descending sigmoid, ties counted in the positive's favour (a stable descending
sort with the positive first). Compared exactly; identical on every rank.

The reference all-gathers the variable-length blocks (sizes first, then padded
blocks) and counts; gathering only the n_r local results would also do.

Fix relative to the original PKB: scores were bf16, where sigmoids tie constantly
and the sort's tie order is unspecified. pkb uses fp32 scores in [-6, 6], keeps
every negative at least 1e-3 away from its positive (so fp32 sigmoids never tie
with it), and defines the tie rule explicitly.
"""
import torch
import torch.distributed as dist

ID = 69
NAME = "gnn_negative_scoring"
CATEGORY = "graph"
ORIGIN = "link-prediction rank evaluation (DGL-KE style)"
WORLD_SIZE = "any W >= 2"
SIZES = {
    "tiny": {"rows": 16, "negatives": 16},
    "default": {"rows": 1024, "negatives": 1000},
    "large": {"rows": 16384, "negatives": 10000},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("local_pos_scores", "local_neg_scores", "group"),
    "args": (
        "rank 0: bf16[512] | rank 1: bf16[513]", "rank 0: bf16[512, 1000] | rank 1: bf16[513, 1000]", "None",
    ),
    "out": "int64[1025]",
}
# Why this problem differs from the original there (docs/pkb-parity.md).
PKB_DIFFERENCES = {
    "local_pos_scores": (
        "fp32 instead of bf16: bf16 sigmoids tie constantly and the sort's tie order is unspecified "
        "(docstring)"
    ),
    "local_neg_scores": (
        "fp32 instead of bf16: bf16 sigmoids tie constantly and the sort's tie order is unspecified "
        "(docstring)"
    ),
}

_MARGIN = 1e-3


def _local_rows(params, world_size, rank):
    return max(1, params["rows"] // world_size) + rank % 3


def inputs(ctx):
    n = _local_rows(ctx.params, ctx.world_size, ctx.rank)
    pos = ctx.randn(n, dtype=torch.float32).clamp(-5.0, 5.0)
    neg = ctx.randn(n, ctx.params["negatives"], dtype=torch.float32).clamp(-6.0, 6.0)
    gap = neg - pos[:, None]
    push = torch.where(gap >= 0, _MARGIN, -_MARGIN)
    neg = torch.where(gap.abs() < _MARGIN, pos[:, None] + push, neg)
    return (pos, neg, None)


def _all_gather_rows(x, counts, group):
    """Concatenate every rank's x (n_r, ...) along dim 0 (sizes known)."""
    world_size = len(counts)
    width = max(counts)
    padded = x.new_zeros((width,) + tuple(x.shape[1:]))
    padded[: x.shape[0]] = x
    out = x.new_empty((world_size * width,) + tuple(x.shape[1:]))
    dist.all_gather_into_tensor(out, padded, group=group)
    keep = [out[r * width: r * width + counts[r]] for r in range(world_size)]
    return torch.cat(keep)


@torch.no_grad()
def reference(local_pos_scores, local_neg_scores, group=None):
    world_size = dist.get_world_size(group)
    size = torch.tensor([local_pos_scores.shape[0]], dtype=torch.int64, device=local_pos_scores.device)
    sizes = size.new_empty(world_size)
    dist.all_gather_into_tensor(sizes, size, group=group)
    counts = sizes.tolist()
    pos = _all_gather_rows(local_pos_scores, counts, group)
    neg = _all_gather_rows(local_neg_scores, counts, group)
    return 1 + (neg > pos[:, None]).sum(dim=1)


def traffic(params, world_size, itemsize):
    """fp32: each rank's (n_r, 1 + negatives) block goes to W-1 peers; HBM:
    the gathered scores are written once and read once; one compare per score."""
    n = params["rows"] // world_size + 1
    block = n * (1 + params["negatives"]) * 4
    return {"link_bytes": (world_size - 1) * block, "hbm_bytes": 2 * world_size * block,
            "flops": world_size * n * params["negatives"]}
