"""2-D FSDP x tensor-parallel SwiGLU MLP forward: gather the FSDP weight shards, compute, all-reduce over TP.

Grid: n_tp is the smallest divisor >= 2 of W that leaves n_fsdp = W / n_tp >= 2;
if there is none (W prime, e.g. W = 2), n_tp = 1 and n_fsdp = W. Rank =
fsdp_rank * n_tp + tp_rank: the TP groups are the contiguous blocks
{f*n_tp, ..., f*n_tp + n_tp - 1}, the FSDP groups the strided sets
{t, t + n_tp, ..., t + (n_fsdp-1)*n_tp}. Sizes: D, D_ff and the global batch B are
the preset's rounded up to multiples of lcm(n_tp, n_fsdp), n_tp and n_fsdp.

Each rank holds, in the working dtype: ``x_local`` (B / n_fsdp, D), rows block
fsdp_rank of a global batch (TP peers hold the same rows); ``W1_shard`` and
``W2_shard`` (D / n_fsdp, D_ff / n_tp): block (fsdp_rank, tp_rank) of the global
W1, W2 (D, D_ff) with FSDP splitting rows and TP splitting columns; ``W3_shard``
(D_ff / n_tp, D / n_fsdp): block (tp_rank, fsdp_rank) of the global W3 (D_ff, D);
then the ints ``n_tp`` and ``n_fsdp``.

Gather the FSDP shards of the FSDP group (in FSDP-rank order) into W1_t, W2_t
(D, D_ff / n_tp) and W3_t (D_ff / n_tp, D), i.e. this rank's TP column/row slices
of the full weights; y_partial = (silu(x W1_t) * (x W2_t)) W3_t; sum y_partial over
the TP group. Return y (B / n_fsdp, D) in the working dtype (identical within a TP
group).

The original built its TP and FSDP groups inside the call (~0.2 s each time); pkb
builds them once per launch in the input builder and the reference looks them up
by (n_tp, n_fsdp), the signature unchanged. Weights are scaled by 1/sqrt(fan_in)
and shared. The full 2-D pattern needs a composite W >= 4; at prime W the TP
groups are single ranks (no TP all-reduce) and only the FSDP gathers communicate.
"""
import math

import torch
import torch.distributed as dist
import torch.nn.functional as F

ID = 48
NAME = "fsdp_and_tp"
CATEGORY = "fsdp"
ORIGIN = "2-D FSDP x TP (torchtitan style)"
WORLD_SIZE = "any W >= 2 (2-D grid for composite W >= 4; TP is trivial at prime W)"
SIZES = {
    "tiny": {"batch": 16, "d": 16, "d_ff": 32},
    "default": {"batch": 2048, "d": 256, "d_ff": 1024},
    "large": {"batch": 16384, "d": 4096, "d_ff": 16384},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("x_local", "W1_shard", "W2_shard", "W3_shard", "n_tp", "n_fsdp"),
    "args": ("bf16[1024, 256]", "bf16[128, 1024]", "bf16[128, 1024]", "bf16[1024, 128]", "1", "2"),
    "out": "bf16[1024, 256]",
}

# (n_tp, n_fsdp) -> (tp_group or None, fsdp_group), made by the first call in
# a process (every rank calls the reference together, so the collective
# new_group calls match) and kept: PKB's reference made new groups every call.
_GROUPS = {}


def _groups(n_tp, n_fsdp):
    if (n_tp, n_fsdp) not in _GROUPS:
        rank, mine = dist.get_rank(), {}
        for name, partition in (("fsdp", [[f * n_tp + t for f in range(n_fsdp)] for t in range(n_tp)]),
                                ("tp", [[f * n_tp + t for t in range(n_tp)] for f in range(n_fsdp)])):
            if name == "tp" and n_tp == 1:
                mine[name] = None
                continue
            for block in partition:
                group = dist.new_group(block)
                if rank in block:
                    mine[name] = group
        _GROUPS[(n_tp, n_fsdp)] = (mine["tp"], mine["fsdp"])
    return _GROUPS[(n_tp, n_fsdp)]


def _factor(world_size):
    for n_tp in range(2, world_size):
        if world_size % n_tp == 0 and world_size // n_tp >= 2:
            return n_tp, world_size // n_tp
    return 1, world_size


def _dims(params, world_size):
    n_tp, n_fsdp = _factor(world_size)
    up = lambda v, m: -(-v // m) * m
    return (up(params["d"], math.lcm(n_tp, n_fsdp)), up(params["d_ff"], n_tp), up(params["batch"], n_fsdp))


def inputs(ctx):
    W, r = ctx.world_size, ctx.rank
    n_tp, n_fsdp = _factor(W)
    D, D_ff, B = _dims(ctx.params, W)
    tp_rank, fsdp_rank = r % n_tp, r // n_tp
    rows, dr, dc, rr = B // n_fsdp, D // n_fsdp, D_ff // n_tp, D_ff // n_tp
    x = ctx.randn(B, D, shared=True)[fsdp_rank * rows:(fsdp_rank + 1) * rows].clone()
    W1 = ctx.randn(D, D_ff, shared=True, scale=D ** -0.5)
    W2 = ctx.randn(D, D_ff, shared=True, scale=D ** -0.5)
    W3 = ctx.randn(D_ff, D, shared=True, scale=D_ff ** -0.5)
    W1_shard = W1[fsdp_rank * dr:(fsdp_rank + 1) * dr, tp_rank * dc:(tp_rank + 1) * dc].clone()
    W2_shard = W2[fsdp_rank * dr:(fsdp_rank + 1) * dr, tp_rank * dc:(tp_rank + 1) * dc].clone()
    W3_shard = W3[tp_rank * rr:(tp_rank + 1) * rr, fsdp_rank * dr:(fsdp_rank + 1) * dr].clone()
    return (x, W1_shard, W2_shard, W3_shard, n_tp, n_fsdp)


def _gather_rows(shard, parts, group):
    out = shard.new_empty((parts * shard.shape[0], shard.shape[1]))
    dist.all_gather_into_tensor(out, shard.contiguous(), group=group)
    return out


@torch.no_grad()
def reference(x_local, W1_shard, W2_shard, W3_shard, n_tp, n_fsdp):
    assert dist.get_world_size() == n_tp * n_fsdp
    tp_group, fsdp_group = _groups(n_tp, n_fsdp)
    W1 = _gather_rows(W1_shard, n_fsdp, fsdp_group)
    W2 = _gather_rows(W2_shard, n_fsdp, fsdp_group)
    rows, cols = W3_shard.shape
    W3 = _gather_rows(W3_shard, n_fsdp, fsdp_group).view(n_fsdp, rows, cols).transpose(0, 1).reshape(rows, n_fsdp * cols)
    y = (F.silu(x_local @ W1) * (x_local @ W2)) @ W3
    if tp_group is not None:
        dist.all_reduce(y, group=tp_group)
    return y


def traffic(params, world_size, itemsize):
    """Links: three ring all-gathers over n_fsdp ranks of this rank's TP slice of
    W1, W2, W3 ((n_fsdp-1)/n_fsdp of D*D_ff/n_tp each) plus a ring all-reduce of
    y over n_tp ranks. HBM: gathered weights written and read, x read, y written.
    FLOPs: three GEMMs of (B/n_fsdp) x D x D_ff/n_tp."""
    n_tp, n_fsdp = _factor(world_size)
    D, D_ff, B = _dims(params, world_size)
    slice_elems = D * D_ff // n_tp
    rows = B // n_fsdp
    return {
        "link_bytes": (3 * (n_fsdp - 1) / n_fsdp * slice_elems + 2 * (n_tp - 1) / n_tp * rows * D) * itemsize,
        "hbm_bytes": (6 * slice_elems + 2 * rows * D + 3 * rows * D_ff // n_tp) * itemsize,
        "flops": 6 * rows * D * D_ff // n_tp,
    }
