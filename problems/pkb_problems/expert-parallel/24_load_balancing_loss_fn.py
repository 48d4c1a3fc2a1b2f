"""MoE load-balancing (auxiliary) loss of a top-k router, averaged over data-parallel ranks.

Signature ``reference(gate_logits, num_experts, top_k=2, attention_mask=None)``.

Each rank r holds ``gate_logits`` of shape (T, E) in the working dtype (T tokens,
E = ``num_experts`` experts; a tuple/list of such tensors is concatenated along
dim 0 first). With ``attention_mask`` None (the benchmarked path):

* p = softmax(gate_logits, dim=-1), computed and kept in the working dtype;
* the top-``top_k`` experts of each token by p (``torch.topk``);
* f[j, e] = mean over tokens of [the j-th choice is e], fp32, shape (top_k, E);
* P[e] = mean over tokens of p[:, e], in the working dtype, shape (E,);
* loss_r = E * sum_{j,e} f[j, e] * P[e] (fp32, type promotion);
* return loss = (sum over ranks of loss_r) / W, a 0-dim fp32 tensor, identical
  on every rank (one all-reduce).

With an ``attention_mask`` (B, S) (0/1; T must be a multiple of B*S: T/(B*S)
layers), both means are taken over the masked tokens only. That path is kept
for signature compatibility and is not benchmarked.

Inputs: fix in pkb. The original drew i.i.d. normal logits, so routing was
near-uniform and the loss stayed ~2 for any data. Here every rank ranks the
experts by a random order skewed by a shared per-expert popularity (a few
units), and each token's sorted logits are separated by gaps of at least 0.25, so
the routing is skewed, the loss varies between trials, and the top-k choice is
the same in bf16 and fp32 (no near-ties).

Tolerance: P is a bf16 mean on GPU (relative rounding <= 2^-9), which moves the
loss by at most ~2e-3 relative; rtol 5e-3 is tight against the loss's spread
between trials and ranks.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F

ID = 24
NAME = "load_balancing_loss_fn"
CATEGORY = "expert-parallel"
ORIGIN = "HF transformers Mixtral load_balancing_loss_func + data-parallel mean"
WORLD_SIZE = "any W >= 2"
SIZES = {
    "tiny": {"tokens": 32, "experts": 8, "top_k": 2},
    "default": {"tokens": 1024, "experts": 8, "top_k": 2},
    "large": {"tokens": 1048576, "experts": 8, "top_k": 2},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("gate_logits", "num_experts", "top_k", "attention_mask"),
    "args": ("bf16[1024, 8]", "8", "2", "None"),
    "out": "fp32[]",
}
# The loss is a scalar built from a bf16 mean (see docstring).
TOLERANCE = {"rtol": 5e-3, "atol": 1e-6}


def _separated_logits(ctx, tokens, experts):
    """Router logits (tokens, experts), fp32: each row is a random ordering of
    the experts (skewed by a shared popularity) mapped to strictly decreasing
    levels with gaps in [0.25, 1.0)."""
    popularity = ctx.randn(experts, dtype=torch.float32, shared=True, scale=1.5)
    u = ctx.rand(tokens, experts, dtype=torch.float32).clamp_(1e-6, 1 - 1e-6)
    gumbel = -torch.log(-torch.log(u))
    order = torch.argsort(popularity + gumbel, dim=1, descending=True)
    gaps = ctx.rand(tokens, experts - 1, dtype=torch.float32, low=0.25, high=1.0)
    top = ctx.rand(tokens, 1, dtype=torch.float32, low=0.0, high=2.0)
    levels = torch.cat([top, top - torch.cumsum(gaps, dim=1)], dim=1)
    return torch.empty_like(levels).scatter_(1, order, levels)


def inputs(ctx):
    p = ctx.params
    logits = _separated_logits(ctx, p["tokens"], p["experts"]).to(ctx.dtype)
    return (logits, p["experts"], p["top_k"], None)


@torch.no_grad()
def reference(gate_logits, num_experts, top_k=2, attention_mask=None):
    if isinstance(gate_logits, (tuple, list)):
        device = gate_logits[0].device
        logits = torch.cat([g.to(device) for g in gate_logits], dim=0)
    else:
        logits = gate_logits
    probs = torch.softmax(logits, dim=-1)
    _, chosen = torch.topk(probs, top_k, dim=-1)
    onehot = F.one_hot(chosen, num_experts).float()  # (T, k, E)
    if attention_mask is None:
        f = onehot.mean(dim=0)
        p_mean = probs.mean(dim=0)
    else:
        b, s = attention_mask.shape
        layers = logits.shape[0] // (b * s)
        m = attention_mask.to(logits.device)
        m_tok = m[None, :, :].expand(layers, b, s).reshape(-1)  # (T,)
        m3 = m_tok[:, None, None].to(onehot.dtype)
        f = (onehot * m3).sum(dim=0) / m3.expand_as(onehot).sum(dim=0)
        m2 = m_tok[:, None].to(probs.dtype).expand_as(probs)
        p_mean = (probs * m2).sum(dim=0) / m2.sum(dim=0)
    loss = torch.sum(f * p_mean.unsqueeze(0)) * num_experts
    dist.all_reduce(loss)
    return loss / dist.get_world_size()


def traffic(params, world_size, itemsize):
    """One all-reduce of a 4-byte scalar (ring: 2 (W-1)/W of it); reads the
    logits once; softmax + top-k + means ~ 8 FLOPs per logit."""
    n = params["tokens"] * params["experts"]
    return {
        "link_bytes": 2 * (world_size - 1) / world_size * 4,
        "hbm_bytes": n * itemsize,
        "flops": 8 * n,
    }
