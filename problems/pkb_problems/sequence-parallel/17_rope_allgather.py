"""Rotary position embedding on sequence shards, then all-gather of the sequence.

The sequence of length S is split evenly: rank r holds positions
[r*S/W, (r+1)*S/W). Rank r has ``q_local`` and ``k_local`` (B, S/W, Hn, D)
(layout batch, sequence, heads, head dim; rank-distinct) and ``cos_local``,
``sin_local`` (B, S/W, D), all in the working dtype. With x1 = x[..., :D/2],
x2 = x[..., D/2:] and rot(x) = concat(-x2, x1) along the last dim, compute

    q_emb = q * cos + rot(q) * sin,   k_emb = k * cos + rot(k) * sin

with cos/sin broadcast over the heads (elementwise in the working dtype, as
the reference does), then all-gather along the sequence (dim 1, rank order).
Return on every rank the tuple of new tensors (q_emb, k_emb), each
(B, S, Hn, D) in the working dtype. Compared with the dtype tolerance.

pkb fix: cos and sin are real RoPE tables, not random numbers: for batch b and
global position p = o_b + r*S/W + i (o_b a random offset in [0, 4096), fresh
every trial), cos[b, i, j] = cos(p * 10000^(-2 (j mod D/2) / D)) (halves
duplicated), likewise sin; so the op preserves the norm of every (D/2)-pair.
"""
import math

import torch
import torch.distributed as dist

ID = 17
NAME = "rope_allgather"
CATEGORY = "sequence-parallel"
ORIGIN = "HF-style RoPE (rotate_half) + sequence all-gather"
WORLD_SIZE = "S % W == 0 (S = 16 at default)"
SIZES = {
    "tiny": {"batch": 2, "seq": 8, "heads": 8, "head_dim": 8},
    "default": {"batch": 16, "seq": 16, "heads": 8, "head_dim": 64},
    "large": {"batch": 8, "seq": 8192, "heads": 8, "head_dim": 128},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("q_local", "k_local", "cos_local", "sin_local"),
    "args": ("bf16[16, 8, 8, 64]", "bf16[16, 8, 8, 64]", "bf16[16, 8, 64]", "bf16[16, 8, 64]"),
    "out": ("bf16[16, 16, 8, 64]", "bf16[16, 16, 8, 64]"),
}


def world_size_error(world_size, params):
    if params["seq"] % world_size:
        return f"sequence length {params['seq']} is not divisible by W = {world_size}"
    return None


def inputs(ctx):
    p = ctx.params
    b, d = p["batch"], p["head_dim"]
    s_local = p["seq"] // ctx.world_size
    q = ctx.randn(b, s_local, p["heads"], d)
    k = ctx.randn(b, s_local, p["heads"], d)
    offset = ctx.randint(0, 4096, b, 1, shared=True)
    pos = (offset + ctx.rank * s_local + torch.arange(s_local, device=ctx.device)).to(torch.float32)
    inv_freq = torch.exp(torch.arange(0, d // 2, device=ctx.device, dtype=torch.float32) * (-2.0 * math.log(10000.0) / d))
    angles = pos.unsqueeze(-1) * inv_freq            # (B, S/W, D/2)
    angles = torch.cat((angles, angles), dim=-1)     # (B, S/W, D)
    return (q, k, torch.cos(angles).to(ctx.dtype), torch.sin(angles).to(ctx.dtype))


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def reference(q_local, k_local, cos_local, sin_local):
    world_size = dist.get_world_size()
    cos = cos_local.unsqueeze(2)
    sin = sin_local.unsqueeze(2)
    outs = []
    for x in (q_local, k_local):
        emb = (x * cos + _rotate_half(x) * sin).contiguous()
        parts = [torch.empty_like(emb) for _ in range(world_size)]
        dist.all_gather(parts, emb)
        outs.append(torch.cat(parts, dim=1))
    return tuple(outs)


def traffic(params, world_size, itemsize):
    """Two all-gathers of (B, S/W, Hn, D) blocks (W-1 blocks each sent). HBM:
    q, k, cos, sin read, local results written, gathered results written.
    About 3 FLOPs per element of q and k."""
    b, s, h, d = params["batch"], params["seq"], params["heads"], params["head_dim"]
    block = b * (s // world_size) * h * d
    return {
        "link_bytes": 2 * (world_size - 1) * block * itemsize,
        "hbm_bytes": (2 * block + 2 * b * (s // world_size) * d + 2 * block + 2 * world_size * block) * itemsize,
        "flops": 2 * 3 * block,
    }
