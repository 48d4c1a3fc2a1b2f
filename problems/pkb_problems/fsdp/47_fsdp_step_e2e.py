"""FSDP / ZeRO-3 step: gather the parameter shards, MLP forward/backward, gradient reduce-scatter, AdamW on the shard.

Shapes (B = global batch rounded up to a multiple of W, B_r = B / W; MLP
d_in -> h -> d_out, where h is the smallest width >= the preset's hidden for which
the parameter count P = h*d_in + h + d_out*h + d_out is divisible by W; S = P / W;
at the default size and W = 2, P = 262,912 and S = 131,456). Every tensor is in
the working dtype, as in the original.

Each rank r holds ``X_local`` (B_r, d_in) and ``y_local`` (B_r, d_out), rows
[r*B_r, (r+1)*B_r) of one global batch; ``flat_param_shard`` (S,): slice
[r*S, (r+1)*S) of flat = cat(W1.flatten(), b1, W2.flatten(), b2) with W1 (h, d_in),
b1 (h,), W2 (d_out, h), b2 (d_out,); ``param_shapes`` = ((h, d_in), (h,), (d_out,
h), (d_out,)) (a tuple of tuples); ``exp_avg_shard`` and ``exp_avg_sq_shard`` (S,):
the AdamW moments of this slice; then ``lr`` (2e-2), ``beta1`` (0.9), ``beta2``
(0.999), ``eps`` (1e-8), ``weight_decay`` (5.0) and the integer step t (>= 2).

The step: (1) all-gather the shards into flat (rank order) and unflatten it with
param_shapes; (2) forward out = relu(X W1^T + b1) W2^T + b2, loss =
mean((out - y_local)^2) over the local B_r * d_out elements, backward
(relu'(0) = 0); (3) reduce-scatter the flat gradient: rank r gets slice r of the
sum over ranks, divided by W; (4) AdamW on the shard with theta = the input shard:
m = beta1 m + (1 - beta1) g; v = beta2 v + (1 - beta2) g^2;
new = theta - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
- lr * weight_decay * theta (decoupled decay on the pre-step weights). The
arithmetic is fp32 on the working-dtype values, the results rounded to the
working dtype (the reference all-gathers and reduce-scatters in the working
dtype; any order of rounding within the tolerance passes).

Return on every rank the tuple (new shard, m, v), each (S,); inputs are unchanged.

Inputs: the original sliced a vector that was random on rank 0 and zero elsewhere,
so ranks >= 1 held zero shards and zeros passed there; pkb slices one shared
random vector. As in problem 40, parameters are at init scale (1/sqrt(fan_in);
biases 0.1) and lr = 2e-2, so the ~lr update is several times the bf16
tolerance, and the moments are non-zero, of the gradients' scale, consistent with
t in [2, 8]. The weight decay is 5.0, so the decay takes lr * wd = 10 % of each
weight (the original's 0.01 made it 1e-5 of each weight, far below any
tolerance, so dropping it passed).
"""
import math

import torch
import torch.distributed as dist

ID = 47
NAME = "fsdp_step_e2e"
CATEGORY = "fsdp"
ORIGIN = "FSDP / ZeRO-3 step"
WORLD_SIZE = "W such that some width >= hidden makes the parameter count divisible by W (default and large: no multiple of 3; default: nor of 19)"
SIZES = {
    "tiny": {"batch": 8, "d_in": 8, "hidden": 16, "d_out": 8},
    "default": {"batch": 1024, "d_in": 256, "hidden": 512, "d_out": 256},
    "large": {"batch": 16384, "d_in": 4096, "hidden": 16384, "d_out": 4096},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": (
        "X_local", "y_local", "flat_param_shard", "param_shapes", "exp_avg_shard", "exp_avg_sq_shard", "lr",
        "beta1", "beta2", "eps", "weight_decay", "step",
    ),
    "args": (
        "bf16[512, 256]", "bf16[512, 256]", "bf16[131456]", "((512, 256), (512,), (256, 512), (256,))",
        "bf16[131456]", "bf16[131456]", "0.001", "0.9", "0.999", "1e-08", "0.01", "?",
    ),
    "out": ("bf16[131456]", "bf16[131456]", "bf16[131456]"),
}
# Why this problem differs from the original there (docs/pkb-parity.md).
PKB_DIFFERENCES = {
    "lr": (
        "2e-2 so the AdamW update (~lr) stands several times above the bf16 tolerance; at the original's 1e-3"
        " skipping the update passed"
    ),
    "weight_decay": (
        "5.0, so the decoupled decay takes lr * wd = 10 % of each weight; the original's 0.01 (1e-5 of a "
        "weight) passed when dropped"
    ),
}

LR, BETA1, BETA2, EPS, WEIGHT_DECAY = 2e-2, 0.9, 0.999, 1e-8, 5.0


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


def _unflatten(flat, shapes):
    out, at = [], 0
    for shape in shapes:
        n = math.prod(shape)
        out.append(flat[at:at + n].view(shape))
        at += n
    return out


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
    shapes = ((hidden, p["d_in"]), (hidden,), (p["d_out"], hidden), (p["d_out"],))
    part = sum(math.prod(s) for s in shapes) // W
    batch = -(-p["batch"] // W) * W
    rows = batch // W
    X_all = ctx.randn(batch, p["d_in"], dtype=f32, shared=True)
    y_all = ctx.randn(batch, p["d_out"], dtype=f32, shared=True)
    X = X_all[r * rows:(r + 1) * rows].clone()
    y = y_all[r * rows:(r + 1) * rows].clone()
    step = int(ctx.randint(2, 9, 1, shared=True).item())
    scales = [p["d_in"] ** -0.5, 0.1, hidden ** -0.5, 0.1]
    params = [ctx.randn(*shape, dtype=f32, shared=True, scale=s) for shape, s in zip(shapes, scales)]
    grads = _mlp_grads(X_all[:256], y_all[:256], *params)
    sigmas = [g.pow(2).mean().sqrt().item() for g in grads]
    shard = torch.cat([t.reshape(-1) for t in params])[r * part:(r + 1) * part].clone()
    del X_all, y_all, grads, params
    sigma = _sigma_slice(shapes, sigmas, r * part, (r + 1) * part, ctx.device)
    exp_avg = ctx.randn(part, dtype=f32) * (sigma * (1 - BETA1 ** (step - 1)))
    exp_avg_sq = ctx.rand(part, dtype=f32, low=0.5, high=2.0) * (sigma.square() * (1 - BETA2 ** (step - 1)))
    X, y, shard, exp_avg, exp_avg_sq = (t.to(ctx.dtype) for t in (X, y, shard, exp_avg, exp_avg_sq))
    return (X, y, shard, shapes, exp_avg, exp_avg_sq, LR, BETA1, BETA2, EPS, WEIGHT_DECAY, step)


@torch.no_grad()
def reference(X_local, y_local, flat_param_shard, param_shapes, exp_avg_shard, exp_avg_sq_shard,
              lr, beta1, beta2, eps, weight_decay, step):
    world_size = dist.get_world_size()
    part = flat_param_shard.numel()
    flat_p = torch.empty(world_size * part, dtype=flat_param_shard.dtype, device=flat_param_shard.device)
    dist.all_gather_into_tensor(flat_p, flat_param_shard.contiguous())

    dtype = flat_param_shard.dtype
    grads = _mlp_grads(X_local.float(), y_local.float(), *_unflatten(flat_p.float(), param_shapes))
    flat_g = torch.cat([g.reshape(-1) for g in grads]).to(dtype)
    g = torch.empty(part, dtype=dtype, device=flat_g.device)
    dist.reduce_scatter_tensor(g, flat_g)
    g = g.float().div_(world_size)

    m = exp_avg_shard.to(torch.float32, copy=True).mul_(beta1).add_(g, alpha=1.0 - beta1)
    v = exp_avg_sq_shard.to(torch.float32, copy=True).mul_(beta2).addcmul_(g, g, value=1.0 - beta2)
    theta = flat_param_shard.to(torch.float32, copy=True)
    theta.add_((m / (1.0 - beta1 ** step)) / ((v / (1.0 - beta2 ** step)).sqrt() + eps), alpha=-lr)
    theta.add_(flat_param_shard.float(), alpha=-lr * weight_decay)
    return theta.to(dtype), m.to(dtype), v.to(dtype)


def traffic(params, world_size, itemsize):
    """All in the working dtype; P at the preset's hidden width. Links: a
    ring all-gather of the parameters and a ring reduce-scatter of the gradient,
    (W-1)/W * P each. HBM: activations ~3x, gathered parameters and gradient, the
    shard's state. FLOPs: forward + backward GEMMs plus ~14 per shard element."""
    W = world_size
    d_in, hidden, d_out = params["d_in"], params["hidden"], params["d_out"]
    rows = -(-params["batch"] // W)
    P = hidden * d_in + hidden + d_out * hidden + d_out
    return {
        "link_bytes": 2 * (W - 1) / W * P * itemsize,
        "hbm_bytes": (rows * (d_in + d_out + 2 * hidden) * 3 + 4 * P + 7 * P / W) * itemsize,
        "flops": 6 * rows * (d_in * hidden + hidden * d_out) + 14 * P / W,
    }
