"""Vocab-parallel cross-entropy loss (Megatron-LM), forward only.

The vocabulary of V entries is split into W contiguous slices; rank r owns
entries [r·V/W, (r+1)·V/W).

Arguments on rank r:

- ``vocab_parallel_logits``: (B, S, V/W), working dtype: this rank's slice of
  the logits of every token. Leave it unchanged, like every input.
- ``target``: (B, S) int64 in [0, V), identical on every rank.
- ``group``: None (WORLD).

Return a new (B, S) tensor in the logits' dtype, identical on every rank:

    loss[b, s] = log(sum_v exp(l[b, s, v] - m[b, s])) - (l[b, s, target[b, s]] - m[b, s])

where l is the full (B, S, V) logits tensor and m its max over v. The
reference computes the max (all-reduce MAX), the target logit (owner picks it,
others contribute 0; all-reduce SUM) and the sum of exponentials (all-reduce
SUM), all in the working dtype.

Sizes (B, S, V): tiny (2, 8, 48), default (8, 1024, 512) as in the original,
large (8, 4096, 131072).

Fix in pkb: the targets come from a shared random seed (the original's were a
deterministic formula). The original's reference subtracted the max from the
logits in place (as Megatron's autograd function does to save memory); its
harness never looked at the logits afterwards, so that side effect is no part
of this problem: pkb's reference subtracts out of place and the logits, like
every input, must be unchanged after the call.
"""
import torch
import torch.distributed as dist

ID = 73
NAME = "vocab_parallel_cross_entropy_loss"
CATEGORY = "vocab-parallel"
ORIGIN = "Megatron-LM vocab-parallel cross-entropy"
WORLD_SIZE = "V % W == 0"
SIZES = {
    "tiny": {"batch": 2, "seq": 8, "vocab": 48},
    "default": {"batch": 8, "seq": 1024, "vocab": 512},
    "large": {"batch": 8, "seq": 4096, "vocab": 131072},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("vocab_parallel_logits", "target", "group"),
    "args": ("bf16[8, 1024, 256]", "int64[8, 1024]", "None"),
    "out": "bf16[8, 1024]",
}


def world_size_error(world_size, params):
    if params["vocab"] % world_size:
        return f"the vocabulary ({params['vocab']}) must split evenly over W ranks"
    return None


def inputs(ctx):
    p = ctx.params
    logits = ctx.randn(p["batch"], p["seq"], p["vocab"] // ctx.world_size)
    target = ctx.randint(0, p["vocab"], p["batch"], p["seq"], shared=True)
    return (logits, target, None)


def reference(vocab_parallel_logits, target, group=None):
    logits = vocab_parallel_logits
    local_vocab = logits.shape[-1]
    start = dist.get_rank(group) * local_vocab

    global_max = logits.amax(dim=-1)
    dist.all_reduce(global_max, op=dist.ReduceOp.MAX, group=group)
    logits = logits - global_max.unsqueeze(-1)

    local_target = target - start
    owned = (local_target >= 0) & (local_target < local_vocab)
    picked = logits.gather(-1, local_target.clamp(0, local_vocab - 1).unsqueeze(-1)).squeeze(-1)
    target_logit = torch.where(owned, picked, torch.zeros_like(picked))
    dist.all_reduce(target_logit, group=group)

    sum_exp = logits.exp().sum(dim=-1)
    dist.all_reduce(sum_exp, group=group)
    return sum_exp.log() - target_logit


def traffic(params, world_size, itemsize):
    """Three all-reduces of a (B, S) tensor (ring: 2(W-1)/W of it each); HBM:
    the logits are read for the max, read and written by the subtraction, read
    again for the exponentials. FLOPs: about four per logit."""
    tokens = params["batch"] * params["seq"]
    local = tokens * params["vocab"] // world_size
    return {
        "link_bytes": 3 * 2 * (world_size - 1) / world_size * tokens * itemsize,
        "hbm_bytes": 4 * local * itemsize,
        "flops": 4 * local,
    }
