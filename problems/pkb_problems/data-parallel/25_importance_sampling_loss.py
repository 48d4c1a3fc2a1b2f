"""Importance-sampling (GRPO-style) policy loss with globally normalised metrics.

Each rank r holds a micro-batch of M tokens:

- ``hidden_states`` h_r: (M, H), working dtype;
- ``weight``: the LM head (V, H), working dtype, replicated (identical on every rank);
- ``labels``: (M,) int64 in [0, V) or ``ignore_index`` (-100);
- ``old_logprobs``, ``advantages``: (M,), working dtype;
- ``ignore_index``: int, -100.

Per token: logits = h @ weight^T (computed in the working dtype), ce =
cross_entropy(logits, labels, ignore_index, reduction="none") (0 on ignored
tokens), new = -ce. With valid = (labels != ignore_index):
delta = clamp((new - old) masked to 0 where not valid, -20, 20), ratio = exp(delta),
pg = -(ratio * advantages) masked to 0 where not valid.

Global quantities (sums over all ranks; N = max(total number of valid tokens, 1),
counted as an fp32 tensor): loss = sum(pg) / N; ratio_mean = sum(ratio over valid)
/ N; ratio_min / ratio_max = min / max of ratio over all valid tokens of all ranks
(+inf / -inf on a rank with none, before the reduction); k3_mean = sum(ratio -
delta - 1 over valid) / N; ce_mean = sum(ce over valid) / N. (The original adds a
straight-through surrogate s - s.detach() to the loss, which is 0 in value.)

Return on every rank the tuple ``(loss, None, new, pg, metrics)``: loss a 0-dim
tensor, ``new`` and ``pg`` this rank's (M,) tensors in the working dtype, and
metrics = stack([ratio_mean, ratio_min, ratio_max, k3_mean, ce_mean]) of shape (5,).
loss and metrics follow torch's type promotion with the fp32 count (fp32 when the
working dtype is bf16).

Inputs: the original's unscaled random head gave CE ~ 130, so delta saturated at
-20 and every output was ~0. pkb scales the head by 1/sqrt(H), plants each label
along its hidden state (CE ~ 0.1-3, like a policy scoring its own samples), draws
old = new + 0.2 * noise, gives the advantages mean 0.5 (so the global mean is not
a near-zero cancellation), sets ~10 % of labels to -100 and replicates the head.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F

ID = 25
NAME = "importance_sampling_loss"
CATEGORY = "data-parallel"
ORIGIN = "RL (GRPO) policy loss, NeMo-RL style"
WORLD_SIZE = "any W >= 2"
# bf16 logits of magnitude ~10 carry +-0.03 of rounding, which moves
# ratio = exp(new - old) by up to ~3 %: a candidate that keeps the logits in fp32
# must not fail for being more accurate than the bf16 reference.
TOLERANCE = {"rtol": 4e-2, "atol": 1e-2}
SIZES = {
    "tiny": {"tokens": 16, "hidden": 32, "vocab": 64},
    "default": {"tokens": 1024, "hidden": 1024, "vocab": 32000},
    "large": {"tokens": 4096, "hidden": 4096, "vocab": 131072},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("hidden_states", "weight", "labels", "old_logprobs", "advantages", "ignore_index"),
    "args": ("bf16[1024, 1024]", "bf16[32000, 1024]", "int64[1024]", "bf16[1024]", "bf16[1024]", "-100"),
    "out": ("fp32[]", "None", "bf16[1024]", "bf16[1024]", "fp32[5]"),
}


def _per_token_ce(hidden_states, weight, labels, ignore_index):
    logits = F.linear(hidden_states, weight)
    return F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1),
                           ignore_index=ignore_index, reduction="none")


@torch.no_grad()
def inputs(ctx):
    p = ctx.params
    M, H, V = p["tokens"], p["hidden"], p["vocab"]
    weight = ctx.randn(V, H, shared=True, scale=H ** -0.5)
    targets = ctx.randint(0, V, M)
    strength = ctx.rand(M, 1, dtype=torch.float32, low=8.0, high=14.0)
    hidden = (ctx.randn(M, H, dtype=torch.float32) + strength * weight[targets].float()).to(ctx.dtype)
    ignored = ctx.rand(M, dtype=torch.float32) < 0.1
    labels = targets.masked_fill(ignored, -100)
    new = -_per_token_ce(hidden, weight, labels, -100)
    old_logprobs = (new.float() + ctx.randn(M, dtype=torch.float32, scale=0.2)).to(ctx.dtype)
    advantages = (ctx.randn(M, dtype=torch.float32) + 0.5).to(ctx.dtype)
    return (hidden, weight, labels, old_logprobs, advantages, -100)


@torch.no_grad()
def reference(hidden_states, weight, labels, old_logprobs, advantages, ignore_index=-100):
    ce = _per_token_ce(hidden_states, weight, labels, ignore_index)
    new = -ce
    valid = labels.view(-1) != ignore_index
    invalid = ~valid
    old = old_logprobs.view(-1)
    adv = advantages.view(-1)

    n_valid_local = valid.sum().float()
    n_valid = n_valid_local.clone()
    dist.all_reduce(n_valid)
    n_valid = n_valid.clamp(min=1.0)

    delta = (new - old).masked_fill(invalid, 0.0).clamp(min=-20.0, max=20.0)
    ratio = torch.exp(delta)
    pg = -(ratio * adv).masked_fill(invalid, 0.0)

    pg_sum = pg.sum()
    dist.all_reduce(pg_sum)
    loss = pg_sum / n_valid

    ratio_sum = ratio.masked_fill(invalid, 0.0).sum()
    dist.all_reduce(ratio_sum)
    if n_valid_local > 0:
        ratio_min = ratio.masked_fill(invalid, float("inf")).min()
        ratio_max = ratio.masked_fill(invalid, float("-inf")).max()
    else:
        ratio_min = torch.tensor(float("inf"), dtype=ratio.dtype, device=ratio.device)
        ratio_max = torch.tensor(float("-inf"), dtype=ratio.dtype, device=ratio.device)
    dist.all_reduce(ratio_min, op=dist.ReduceOp.MIN)
    dist.all_reduce(ratio_max, op=dist.ReduceOp.MAX)

    k3_sum = (ratio - delta - 1.0).masked_fill(invalid, 0.0).sum()
    dist.all_reduce(k3_sum)
    ce_sum = ce.masked_fill(invalid, 0.0).sum()
    dist.all_reduce(ce_sum)

    metrics = torch.stack([ratio_sum / n_valid, ratio_min, ratio_max, k3_sum / n_valid, ce_sum / n_valid])
    return loss, None, new.view_as(labels), pg.view_as(labels), metrics


def traffic(params, world_size, itemsize):
    """Seven scalar all-reduces (a few bytes each); HBM: read h and the head once,
    write and re-read the (M, V) logits; FLOPs: the LM-head GEMM. Per rank per call."""
    M, H, V = params["tokens"], params["hidden"], params["vocab"]
    return {
        "link_bytes": 7 * 2 * (world_size - 1) / world_size * 4,
        "hbm_bytes": (M * H + V * H + 2 * M * V + 6 * M) * itemsize,
        "flops": 2 * M * H * V + 5 * M * V,
    }
