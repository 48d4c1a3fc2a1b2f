"""Vocab-parallel LM-head GEMV for decoding, logits gathered along the vocab.

``hidden_states`` (T, H) is replicated (the same on every rank). The LM head
(V*W, H) and its bias (V*W,) are split by vocab rows: rank r holds
``weight_shard`` (V, H) = rows [r*V, (r+1)*V) and ``bias_shard`` (V,) (so shards
are rank-distinct). All tensors are in the working dtype. Return, on every
rank, the new (T, V*W) tensor of logits
concat(h @ weight_0^T + bias_0, ..., h @ weight_{W-1}^T + bias_{W-1}) along
dim 1 (rank order), in the working dtype (each shard's matmul is rounded to
the working dtype before the bias is added). Compared with the dtype
tolerance.

Inputs: h and the bias are standard normal, the weight is scaled by
1/sqrt(H) so logits are O(1).
"""
import torch
import torch.distributed as dist

ID = 46
NAME = "gemv_decode"
CATEGORY = "tensor-parallel"
ORIGIN = "tensor-parallel LM-head decode GEMV (vLLM/Megatron)"
WORLD_SIZE = "any W >= 2"
SIZES = {
    "tiny": {"tokens": 1, "hidden": 32, "vocab_per_rank": 32},
    "default": {"tokens": 1, "hidden": 1024, "vocab_per_rank": 1024},
    "large": {"tokens": 8, "hidden": 8192, "vocab_per_rank": 131072},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("hidden_states", "weight_shard", "bias_shard"),
    "args": ("bf16[1, 1024]", "bf16[1024, 1024]", "bf16[1024]"),
    "out": "bf16[1, 2048]",
}


def inputs(ctx):
    p = ctx.params
    h = ctx.randn(p["tokens"], p["hidden"], shared=True)
    weight = ctx.randn(p["vocab_per_rank"], p["hidden"], scale=p["hidden"] ** -0.5)
    bias = ctx.randn(p["vocab_per_rank"])
    return (h, weight, bias)


def reference(hidden_states, weight_shard, bias_shard):
    world_size = dist.get_world_size()
    local = torch.matmul(hidden_states, weight_shard.t()) + bias_shard
    parts = [torch.empty_like(local) for _ in range(world_size)]
    dist.all_gather(parts, local.contiguous())
    return torch.cat(parts, dim=1)


def traffic(params, world_size, itemsize):
    """All-gather of the (T, V) logit blocks: W-1 blocks sent. HBM is
    dominated by reading the (V, H) weight shard; 2 T H V FLOPs."""
    t, h, v = params["tokens"], params["hidden"], params["vocab_per_rank"]
    return {
        "link_bytes": (world_size - 1) * t * v * itemsize,
        "hbm_bytes": (v * h + v + t * h + t * v + world_size * t * v) * itemsize,
        "flops": 2 * t * h * v + t * v,
    }
