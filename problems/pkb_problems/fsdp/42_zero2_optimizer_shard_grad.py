"""ZeRO-2 step: broadcast, MLP forward/backward, gradient reduce-scatter, Adam on this rank's shard, gather.

Shapes (B = global batch rounded up to a multiple of W, B_r = B / W; MLP
d_in -> h -> d_out, where h is the smallest width >= the preset's hidden for which
the parameter count P = h*d_in + h + d_out*h + d_out is divisible by W; S = P / W).
Every tensor is in the working dtype, as in the original.

Each rank r holds ``X_local`` (B_r, d_in) and ``y_local`` (B_r, d_out), rows
[r*B_r, (r+1)*B_r) of one global batch; ``W1`` (h, d_in), ``b1`` (h,), ``W2``
(d_out, h), ``b2`` (d_out,), authoritative on rank 0 only (other ranks hold
unrelated values); ``exp_avg_part`` and ``exp_avg_sq_part`` (S,): this rank's
slice [r*S, (r+1)*S) of the Adam moments of the flat parameter vector
flat = cat(W1.flatten(), b1, W2.flatten(), b2); then ``lr`` (2e-2), ``beta1``
(0.9), ``beta2`` (0.999), ``eps`` (1e-8) and the integer Adam ``step`` t (>= 2).

The step: (1) every rank takes rank 0's parameters; (2) forward
out = relu(X W1^T + b1) W2^T + b2, loss = mean((out - y_local)^2) over the local
B_r * d_out elements, backward (relu'(0) = 0); (3) the flat gradient is
reduce-scattered: rank r gets slice r of the sum over ranks, divided by W; (4) Adam
on slice r: m = beta1 m + (1 - beta1) g;
v = beta2 v + (1 - beta2) g^2; w = w - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 -
beta2^t)) + eps); (5) the updated slices of all ranks are gathered into the flat
vector. The Adam arithmetic is fp32 on the working-dtype values, rounded to the
working dtype at the end (the reference communicates in the working dtype; any
order of rounding within the tolerance passes).

Return on every rank (W1, b1, W2, b2) after the step (identical on all ranks)
followed by this rank's updated (m, v) slices, each (S,); inputs are unchanged.

Identical to problem 41 except that the gradient is reduce-scattered instead of
all-reduced. Inputs: as in problem 40, the original's ~lr update hid under its
tolerance. pkb draws parameters at init scale (1/sqrt(fan_in); biases 0.1) and
takes lr = 2e-2, so the update (~lr) is several times the bf16 tolerance, draws non-zero
moments of the gradients' scale consistent with t in [2, 8], and gives ranks >= 1
random (not zero) parameters.
"""
import math

import torch
import torch.distributed as dist

ID = 42
NAME = "zero2_optimizer_shard_grad"
CATEGORY = "fsdp"
ORIGIN = "DeepSpeed ZeRO-2"
WORLD_SIZE = "W such that some width >= hidden makes the parameter count divisible by W (default and large: no multiple of 3; default: nor of 19)"
SIZES = {
    "tiny": {"batch": 8, "d_in": 8, "hidden": 16, "d_out": 8},
    "default": {"batch": 1024, "d_in": 256, "hidden": 512, "d_out": 256},
    "large": {"batch": 16384, "d_in": 4096, "hidden": 16384, "d_out": 4096},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": (
        "X_local", "y_local", "W1", "b1", "W2", "b2", "exp_avg_part", "exp_avg_sq_part", "lr", "beta1",
        "beta2", "eps", "step",
    ),
    "args": (
        "bf16[512, 256]", "bf16[512, 256]", "bf16[512, 256]", "bf16[512]", "bf16[256, 512]", "bf16[256]",
        "bf16[131456]", "bf16[131456]", "0.001", "0.9", "0.999", "1e-08", "?",
    ),
    "out": ("bf16[512, 256]", "bf16[512]", "bf16[256, 512]", "bf16[256]", "bf16[131456]", "bf16[131456]"),
}
# Why this problem differs from the original there (docs/pkb-parity.md).
PKB_DIFFERENCES = {
    "lr": (
        "2e-2 so the Adam update (~lr) stands several times above the bf16 tolerance; at the original's 1e-3 "
        "skipping the update passed"
    ),
}

LR, BETA1, BETA2, EPS = 2e-2, 0.9, 0.999, 1e-8


def _width(params, world_size):
    """Smallest h >= hidden with P(h) divisible by W (P(h) mod W has period W)."""
    d_in, d_out = params["d_in"], params["d_out"]
    for h in range(params["hidden"], params["hidden"] + world_size):
        if (h * (d_in + 1 + d_out) + d_out) % world_size == 0:
            return h
    return None


def world_size_error(world_size, params):
    if _width(params, world_size) is None:
        return (f"the parameter count h*{params['d_in'] + 1 + params['d_out']} + {params['d_out']} "
                f"is never divisible by {world_size}")
    return None


def _shapes(d_in, hidden, d_out):
    return [(hidden, d_in), (hidden,), (d_out, hidden), (d_out,)]


def _mlp_grads(X, y, W1, b1, W2, b2):
    """Gradients of mean((relu(X W1^T + b1) W2^T + b2 - y)^2)."""
    pre = torch.addmm(b1, X, W1.t())
    h = torch.relu(pre)
    out = torch.addmm(b2, h, W2.t())
    d_out = (out - y) * (2.0 / out.numel())
    g_W2 = d_out.t() @ h
    g_b2 = d_out.sum(0)
    d_pre = (d_out @ W2) * (pre > 0)
    g_W1 = d_pre.t() @ X
    g_b1 = d_pre.sum(0)
    return [g_W1, g_b1, g_W2, g_b2]


def _draw_params(ctx, shapes, shared):
    fan_in = [shapes[0][1], None, shapes[2][1], None]
    return [ctx.randn(*shape, dtype=torch.float32, shared=shared, scale=fan ** -0.5 if fan else 0.1)
            for shape, fan in zip(shapes, fan_in)]


def _sigma_slice(shapes, sigmas, start, stop, device):
    """Per-element gradient scale for flat indices [start, stop)."""
    pieces, at = [], 0
    for shape, s in zip(shapes, sigmas):
        n = math.prod(shape)
        lo, hi = max(start, at), min(stop, at + n)
        if hi > lo:
            pieces.append(torch.full((hi - lo,), s, dtype=torch.float32, device=device))
        at += n
    return torch.cat(pieces)


def inputs(ctx):
    p, W, r = ctx.params, ctx.world_size, ctx.rank
    f32 = torch.float32
    hidden = _width(p, W)
    shapes = _shapes(p["d_in"], hidden, p["d_out"])
    part = sum(math.prod(s) for s in shapes) // W
    batch = -(-p["batch"] // W) * W
    rows = batch // W
    X_all = ctx.randn(batch, p["d_in"], dtype=f32, shared=True)
    y_all = ctx.randn(batch, p["d_out"], dtype=f32, shared=True)
    X = X_all[r * rows:(r + 1) * rows].clone()
    y = y_all[r * rows:(r + 1) * rows].clone()
    step = int(ctx.randint(2, 9, 1, shared=True).item())
    params = _draw_params(ctx, shapes, shared=True)
    grads = _mlp_grads(X_all[:256], y_all[:256], *params)
    sigmas = [g.pow(2).mean().sqrt().item() for g in grads]
    del X_all, y_all, grads
    if r != 0:
        params = _draw_params(ctx, shapes, shared=False)
    sigma = _sigma_slice(shapes, sigmas, r * part, (r + 1) * part, ctx.device)
    exp_avg = ctx.randn(part, dtype=f32) * (sigma * (1 - BETA1 ** (step - 1)))
    exp_avg_sq = ctx.rand(part, dtype=f32, low=0.5, high=2.0) * (sigma.square() * (1 - BETA2 ** (step - 1)))
    tensors = [t.to(ctx.dtype) for t in (X, y, *params, exp_avg, exp_avg_sq)]
    return (*tensors, LR, BETA1, BETA2, EPS, step)


def _flat(tensors):
    return torch.cat([t.reshape(-1) for t in tensors])


def _split(flat, like):
    out, at = [], 0
    for t in like:
        out.append(flat[at:at + t.numel()].view_as(t))
        at += t.numel()
    return out


@torch.no_grad()
def reference(X_local, y_local, W1, b1, W2, b2, exp_avg_part, exp_avg_sq_part,
              lr, beta1, beta2, eps, step):
    world_size, rank = dist.get_world_size(), dist.get_rank()
    dtype = W1.dtype
    like = [W1, b1, W2, b2]
    flat_p = _flat(like)
    dist.broadcast(flat_p, src=0)

    flat_g = _flat(_mlp_grads(X_local.float(), y_local.float(), *_split(flat_p.float(), like))).to(dtype)
    part = exp_avg_part.numel()
    g = torch.empty(part, dtype=dtype, device=flat_g.device)
    dist.reduce_scatter_tensor(g, flat_g)
    g = g.float().div_(world_size)

    w = flat_p[rank * part:(rank + 1) * part].to(torch.float32, copy=True)
    m = exp_avg_part.to(torch.float32, copy=True).mul_(beta1).add_(g, alpha=1.0 - beta1)
    v = exp_avg_sq_part.to(torch.float32, copy=True).mul_(beta2).addcmul_(g, g, value=1.0 - beta2)
    w.add_((m / (1.0 - beta1 ** step)) / ((v / (1.0 - beta2 ** step)).sqrt() + eps), alpha=-lr)

    dist.all_gather_into_tensor(flat_p, w.to(dtype))
    return (*_split(flat_p, like), m.to(dtype), v.to(dtype))


def traffic(params, world_size, itemsize):
    """All in the working dtype; P at the preset's hidden width. Links: a
    broadcast of the P parameters (~P per rank, pipelined), a ring reduce-scatter
    of the gradient and a ring all-gather of the updated shards. HBM: activations ~3x,
    parameters, gradient and the shard's state. FLOPs: forward + backward GEMMs
    plus ~12 per shard element."""
    W = world_size
    d_in, hidden, d_out = params["d_in"], params["hidden"], params["d_out"]
    rows = -(-params["batch"] // W)
    P = hidden * d_in + hidden + d_out * hidden + d_out
    return {
        "link_bytes": (P + 2 * (W - 1) / W * P) * itemsize,
        "hbm_bytes": (rows * (d_in + d_out + 2 * hidden) * 3 + 4 * P + 6 * P / W) * itemsize,
        "flops": 6 * rows * (d_in * hidden + hidden * d_out) + 12 * P / W,
    }
