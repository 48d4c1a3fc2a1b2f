"""Expert-parallel-aware global gradient-norm clipping (in place).

Ranks form an E x F grid, E = ``ep_size``, F = W / E, with rank = f*E + e: the EP
groups are the contiguous blocks {f*E, ..., f*E + E - 1} (one per f) and the
EP-FSDP groups the strided sets {e, e + E, ..., e + (F-1)*E} (one per e). Here
E = W / 2 for even W >= 4 (the original's choice) and E = W otherwise, i.e. at
W = 2 and at odd W the EP group is every rank and the EP-FSDP groups are single
ranks (the original used E = 1 at W = 2: no EP groups and no EP scaling).

Each rank holds ``non_ep_grad_tensors`` (G_n gradients) and ``ep_grad_tensors``
(G_e gradients), each (M, N) in the working dtype; the floats ``max_norm`` (1.0)
and ``norm_type`` p (2.0); the int ``ep_size`` E; ``fsdp_group`` (the WORLD group
object), ``ep_fsdp_group`` and ``ep_group`` (this rank's groups of the grid).

(1) If E > 1, every EP gradient is scaled IN PLACE by 1/E. (2) A = sum of
||g||_p^p over the non-EP gradients (each norm in fp32, torch.norm(g.float(), p)),
all-reduced over fsdp_group; B = the same over the EP gradients, all-reduced over
ep_fsdp_group and then over ep_group (so summed over all ranks); total =
(A + B)^(1/p) in fp32. (3) If total > max_norm, every gradient of both lists is
scaled IN PLACE by coef = max_norm / total (fp32 0-dim; g.mul_(coef)).

Return total, an fp32 0-dim tensor, identical on every rank. The gradients after
the call are part of the result (arguments 0 and 1 are declared in MUTATES and
compared).

Inputs: the original's norm always clipped and only the norm was compared. pkb
draws the gradient scale per trial so that total is between ~0.35 and ~2.8 times
max_norm. The full 2-D grid needs W >= 4 (even); at W = 2 the EP all-reduce spans
both ranks and the EP-FSDP all-reduce is over single ranks.
"""
import math

import torch
import torch.distributed as dist

ID = 22
NAME = "clip_grad_norm_ep"
CATEGORY = "fsdp"
ORIGIN = "VeOmni EP-aware FSDP2 clipping"
WORLD_SIZE = "any W >= 2 (2-D EP x EP-FSDP grid for even W >= 4)"
MUTATES = (0, 1)
SIZES = {
    "tiny": {"non_ep": 1, "ep": 1, "m": 8, "n": 16},
    "default": {"non_ep": 1, "ep": 1, "m": 1024, "n": 1024},
    "large": {"non_ep": 4, "ep": 4, "m": 8192, "n": 8192},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": (
        "non_ep_grad_tensors", "ep_grad_tensors", "max_norm", "norm_type", "ep_size", "fsdp_group",
        "ep_fsdp_group", "ep_group",
    ),
    "args": (
        "[bf16[1024, 1024]]", "[bf16[1024, 1024]]", "1.0", "2.0", "1", "group(all)", "group(all)", "None",
    ),
    "out": "fp32[]",
}
# Why this problem differs from the original there (docs/pkb-parity.md).
PKB_DIFFERENCES = {
    "ep_size": (
        "at W = 2 the original's E = W // 2 = 1 leaves no EP groups and no EP scaling; pkb uses E = W there "
        "(see the docstring)"
    ),
    "ep_fsdp_group": "follows from E = W at W = 2: the EP-FSDP groups are single ranks",
    "ep_group": "follows from E = W at W = 2: the EP group is every rank (the original's E = 1 passed None)",
}


def _ep_size(world_size):
    return world_size // 2 if world_size % 2 == 0 and world_size >= 4 else world_size


def inputs(ctx):
    p, W = ctx.params, ctx.world_size
    E = _ep_size(W)
    F = W // E
    ep_group = ctx.groups([[f * E + e for e in range(E)] for f in range(F)])
    ep_fsdp_group = ctx.groups([[f * E + e for f in range(F)] for e in range(E)])
    max_norm = 1.0
    target = max_norm * 2.0 ** float(ctx.rand(1, dtype=torch.float32, shared=True, low=-1.5, high=1.5).item())
    # EP gradients shrink by 1/E before the norm: give them E times the scale.
    sigma = target / math.sqrt(W * p["m"] * p["n"] * (p["non_ep"] + p["ep"]))
    non_ep = [ctx.randn(p["m"], p["n"], scale=sigma) for _ in range(p["non_ep"])]
    ep = [ctx.randn(p["m"], p["n"], scale=sigma * E) for _ in range(p["ep"])]
    return (non_ep, ep, max_norm, 2.0, E, dist.group.WORLD, ep_fsdp_group, ep_group)


def _pth_power_sum(grads, p, device):
    acc = torch.zeros((), dtype=torch.float32, device=device)
    for g in grads:
        if g is not None:
            acc = acc + torch.norm(g.detach().float(), p=p) ** p
    return acc


@torch.no_grad()
def reference(non_ep_grad_tensors, ep_grad_tensors, max_norm, norm_type=2.0, ep_size=1,
              fsdp_group=None, ep_fsdp_group=None, ep_group=None):
    p = float(norm_type)
    device = next(g.device for g in [*non_ep_grad_tensors, *ep_grad_tensors] if g is not None)
    if ep_size > 1:
        for g in ep_grad_tensors:
            if g is not None:
                g.mul_(1.0 / float(ep_size))
    non_ep_total = _pth_power_sum(non_ep_grad_tensors, p, device)
    dist.all_reduce(non_ep_total, group=fsdp_group)
    ep_total = _pth_power_sum(ep_grad_tensors, p, device)
    dist.all_reduce(ep_total, group=ep_fsdp_group)
    dist.all_reduce(ep_total, group=ep_group)
    total = (non_ep_total + ep_total) ** (1.0 / p)
    if total > max_norm:
        coef = max_norm / total
        for g in [*non_ep_grad_tensors, *ep_grad_tensors]:
            if g is not None:
                g.mul_(coef)
    return total


def traffic(params, world_size, itemsize):
    """Three fp32 scalar all-reduces (latency-bound). HBM: the EP gradients are
    read and written for the 1/E scaling, every gradient is read for the norm and
    read and written again when clipping. FLOPs: ~3 per element (+1 for EP)."""
    mn = params["m"] * params["n"]
    non_ep, ep = params["non_ep"] * mn, params["ep"] * mn
    return {
        "link_bytes": 3 * 2 * (world_size - 1) / world_size * 4,
        "hbm_bytes": (3 * non_ep + 5 * ep) * itemsize,
        "flops": 3 * non_ep + 4 * ep,
    }
