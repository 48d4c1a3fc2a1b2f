"""Gather every rank's object masks and suppress overlapping duplicates (SAM 3 multi-GPU tracking).

Rank r tracks c_r objects (c_r varies by rank; ``num_obj_per_gpu`` is the list
[c_0, ..., c_{W-1}], the same on every rank; N = sum of c_q; global object i of
rank q has index sum(c_0..c_{q-1}) + local index). Each rank holds
``low_res_masks_local`` (c_r, H, W) mask logits and ``obj_scores_local`` (c_r,),
working dtype; ``last_occluded`` (N,) int64 (global, the same on every rank, values
>= -1); the float ``iou_threshold`` (0.7), the bool ``reverse`` and ``group``
(None: WORLD).

Gather masks and scores of all ranks in rank order and convert to fp32: masks
(N, H, W), scores (N,). Binarise m = masks > 0. IoU(i, j) = fp32(|m_i & m_j|) /
fp32(max(|m_i| + |m_j| - |m_i & m_j|, 1)) (an IEEE division; pixel counts are
exact). For every pair i < j with IoU(i, j) >= fp32(iou_threshold): with
cmp = (>) (or (<) if reverse), object i is suppressed if cmp(last_i, last_j) and
last_j > -1; object j is suppressed if cmp(last_j, last_i) and last_i > -1.
Suppressed objects get every pixel of their gathered mask set to -10.0.

Return on every rank (masks (N, H, W) fp32, scores (N,) fp32, suppressed (N,)
bool), identical on all ranks; the flags compare exactly.

Inputs: the original's masks never overlapped with IoU above ~0.5, so nothing was
ever suppressed. pkb draws disc-shaped objects from N/2 shared templates (centres
jittered, edges noisy), so copies of one template, often on different ranks, overlap
with IoU mostly in 0.65-0.95, on both sides of the threshold; it also draws the counts (1 to 3 per rank at the default
size), last_occluded in [-1, 3], reverse and the scores at random each trial.
"""
import torch
import torch.distributed as dist

ID = 81
NAME = "sam3_allgather_iou_suppression"
CATEGORY = "data-parallel"
ORIGIN = "SAM 3 multi-GPU mask suppression"
WORLD_SIZE = "any W >= 2"
SIZES = {
    "tiny": {"min_objects": 1, "max_objects": 3, "size": 16},
    "default": {"min_objects": 1, "max_objects": 3, "size": 256},
    "large": {"min_objects": 16, "max_objects": 64, "size": 1024},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": (
        "low_res_masks_local", "obj_scores_local", "num_obj_per_gpu", "last_occluded", "iou_threshold",
        "reverse", "group",
    ),
    "args": ("bf16[?, 256, 256]", "bf16[?]", "[?, ?]", "int64[?]", "0.7", "False", "None"),
    "out": ("fp32[?, 256, 256]", "fp32[?]", "bool[?]"),
}
# Why this problem differs from the original there (docs/pkb-parity.md).
PKB_DIFFERENCES = {
    "low_res_masks_local": (
        "the object counts are random per trial, but the table's three seeds drew 2 per rank (the original "
        "cycled 1 + (rank + trial) % 3)"
    ),
    "obj_scores_local": "one score per object (see low_res_masks_local)",
    "num_obj_per_gpu": "the per-rank object counts (see low_res_masks_local)",
    "reverse": "drawn per trial instead of the constant False",
}

NO_OBJECT_LOGIT = -10.0


def inputs(ctx):
    p, W, r = ctx.params, ctx.world_size, ctx.rank
    f32, S = torch.float32, p["size"]
    counts = ctx.randint(p["min_objects"], p["max_objects"] + 1, W, shared=True)
    N = int(counts.sum().item())
    start = int(counts[:r].sum().item())
    c = int(counts[r].item())
    # Shared scene: templates (centre, radius), each object's template and jitter.
    n_templates = max(1, N // 2)
    centre = ctx.rand(n_templates, 2, dtype=f32, shared=True, low=0.2 * S, high=0.8 * S)
    radius = ctx.rand(n_templates, dtype=f32, shared=True, low=0.1 * S, high=0.3 * S)
    template = ctx.randint(0, n_templates, N, shared=True)
    jitter = ctx.rand(N, 2, dtype=f32, shared=True, low=-0.15, high=0.15)
    last_occluded = ctx.randint(-1, 4, N, shared=True)
    reverse = bool(ctx.randint(0, 2, 1, shared=True).item())

    mine = template[start:start + c]
    R = radius[mine].view(c, 1, 1)
    cy = (centre[mine, 0] + jitter[start:start + c, 0] * radius[mine]).view(c, 1, 1)
    cx = (centre[mine, 1] + jitter[start:start + c, 1] * radius[mine]).view(c, 1, 1)
    yy = torch.arange(S, dtype=f32, device=ctx.device).view(1, S, 1)
    xx = torch.arange(S, dtype=f32, device=ctx.device).view(1, 1, S)
    dist_px = ((yy - cy) ** 2 + (xx - cx) ** 2).sqrt()
    logits = (R - dist_px) / (0.005 * S) + ctx.randn(c, S, S, dtype=f32)
    scores = ctx.randn(c)
    return (logits.to(ctx.dtype), scores, counts.tolist(), last_occluded, 0.7, reverse, None)


def _gather_uneven(local, counts, group):
    """All-gather rows of uneven counts (padded to the largest), in rank order."""
    world_size, widest = len(counts), max(counts)
    padded = local.new_zeros((widest, *local.shape[1:]))
    padded[:local.shape[0]] = local
    out = local.new_empty((world_size * widest, *local.shape[1:]))
    dist.all_gather_into_tensor(out, padded, group=group)
    keep = torch.cat([torch.arange(q * widest, q * widest + c, device=local.device) for q, c in enumerate(counts)])
    return out[keep]


@torch.no_grad()
def reference(low_res_masks_local, obj_scores_local, num_obj_per_gpu, last_occluded,
              iou_threshold=0.7, reverse=False, group=None):
    group = group or dist.group.WORLD
    counts = [int(c) for c in num_obj_per_gpu]
    masks = _gather_uneven(low_res_masks_local.float().contiguous(), counts, group)
    scores = _gather_uneven(obj_scores_local.float().contiguous(), counts, group)

    n = masks.shape[0]
    binary = (masks > 0).flatten(1).float()
    inter = binary @ binary.t()
    area = binary.sum(dim=1)
    iou = inter / (area[:, None] + area[None, :] - inter).clamp_min(1.0)
    overlaps = torch.triu(iou >= iou_threshold, diagonal=1)
    last = last_occluded.to(device=masks.device, dtype=torch.long)
    last_i, last_j = last.view(n, 1), last.view(1, n)
    cmp = torch.lt if reverse else torch.gt
    suppress_i = overlaps & cmp(last_i, last_j) & (last_j > -1)
    suppress_j = overlaps & cmp(last_j, last_i) & (last_i > -1)
    suppressed = suppress_i.any(dim=1) | suppress_j.any(dim=0)
    masks[suppressed] = NO_OBJECT_LOGIT
    return masks, scores, suppressed


def traffic(params, world_size, itemsize):
    """Average counts c = (min + max) / 2 objects per rank of S*S pixels, gathered
    as fp32 (the reference pads to the largest count). Links: this rank's c masks
    to W-1 peers. HBM: write the N = W*c gathered masks, read them ~3x (binarise,
    IoU, suppression). FLOPs: the N x N x S^2 IoU GEMM."""
    c = (params["min_objects"] + params["max_objects"]) / 2
    pix = params["size"] ** 2
    N = world_size * c
    return {
        "link_bytes": (world_size - 1) * c * pix * 4,
        "hbm_bytes": c * pix * itemsize + 4 * N * pix * 4,
        "flops": 2 * N * N * pix,
    }
