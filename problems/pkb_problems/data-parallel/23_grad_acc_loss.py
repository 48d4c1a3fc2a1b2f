"""Token-count loss normalisation across data-parallel ranks, forward and backward.

Each rank r holds, as 0-dim tensors:

- ``loss``: fp32, this rank's mean loss over its valid tokens (NaN on a rank
  with no valid tokens);
- ``local_valid_tokens``: int64 n_r >= 0, this rank's valid-token count;
- ``global_valid_tokens``: int64 N = sum over all ranks of n_r (the same on every
  rank);
- ``grad_normalized_loss``: fp32 upstream gradient g_norm of the normalised loss;
- ``grad_loss_sum``: fp32 upstream gradient g_sum of the loss sum (may be None,
  meaning 0).

Forward: if n_r == 0 the local loss is replaced by ``torch.nan_to_num(loss)``
(NaN -> 0); loss_sum = sum over ranks of loss_r * n_r (an all-reduce);
normalized = loss_sum / N. Backward (local, no communication):
grad = g_norm * n_r / N + g_sum * n_r.

Return the tuple ``(normalized, loss_sum, grad)`` of fp32 0-dim tensors on every
rank (normalized and loss_sum identical on all ranks, grad per rank).

Inputs: per-rank losses are uniform in [0.5, 5) and the counts are random in
[1, TOKENS] (drawn alike on every rank), except that one random rank per trial
has count 0 and a NaN loss. The original used equal constant counts (the grad was
always 1/W) and bf16 scalars: pkb draws random counts and upstream gradients and
keeps the scalars in fp32 so they are checked tightly (the dtype costs nothing at
this size; the problem is latency-bound by design).
"""
import torch
import torch.distributed as dist

ID = 23
NAME = "grad_acc_loss"
CATEGORY = "data-parallel"
ORIGIN = "token-count loss normalisation (VeOmni / verl)"
WORLD_SIZE = "any W >= 2"
SIZES = {
    "tiny": {"tokens": 64},
    "default": {"tokens": 1048576},
    "large": {"tokens": 1048576},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("loss", "local_valid_tokens", "global_valid_tokens", "grad_normalized_loss", "grad_loss_sum"),
    "args": ("bf16[]", "int64[]", "int64[]", "bf16[]", "bf16[]"),
    "out": ("bf16[]", "bf16[]", "bf16[]"),
}
# Why this problem differs from the original there (docs/pkb-parity.md).
PKB_DIFFERENCES = {
    "loss": (
        "fp32 scalars instead of bf16, so normalisation and gradients are checked tightly; the dtype costs "
        "nothing at this latency-bound size (docstring)"
    ),
    "grad_normalized_loss": (
        "fp32 scalars instead of bf16, so normalisation and gradients are checked tightly; the dtype costs "
        "nothing at this latency-bound size (docstring)"
    ),
    "grad_loss_sum": (
        "fp32 scalars instead of bf16, so normalisation and gradients are checked tightly; the dtype costs "
        "nothing at this latency-bound size (docstring)"
    ),
    "out[0]": (
        "fp32 scalars instead of bf16, so normalisation and gradients are checked tightly; the dtype costs "
        "nothing at this latency-bound size (docstring)"
    ),
    "out[1]": (
        "fp32 scalars instead of bf16, so normalisation and gradients are checked tightly; the dtype costs "
        "nothing at this latency-bound size (docstring)"
    ),
    "out[2]": (
        "fp32 scalars instead of bf16, so normalisation and gradients are checked tightly; the dtype costs "
        "nothing at this latency-bound size (docstring)"
    ),
}


def inputs(ctx):
    W, r = ctx.world_size, ctx.rank
    f32 = torch.float32
    counts = ctx.randint(1, ctx.params["tokens"] + 1, W, shared=True)
    empty_rank = int(ctx.randint(0, W, 1, shared=True).item())
    counts[empty_rank] = 0
    loss = ctx.rand((), dtype=f32, low=0.5, high=5.0)
    if r == empty_rank:
        loss = torch.full_like(loss, float("nan"))
    local = counts[r].clone()
    total = counts.sum()
    grad_normalized_loss = ctx.randn((), dtype=f32)
    grad_loss_sum = ctx.randn((), dtype=f32)
    return (loss, local, total, grad_normalized_loss, grad_loss_sum)


def reference(loss, local_valid_tokens, global_valid_tokens, grad_normalized_loss, grad_loss_sum=None):
    if int(local_valid_tokens.item()) == 0:
        loss = torch.nan_to_num(loss)
    loss_sum = loss * local_valid_tokens
    dist.all_reduce(loss_sum)
    normalized = loss_sum / global_valid_tokens
    grad = grad_normalized_loss * local_valid_tokens / global_valid_tokens
    if grad_loss_sum is not None:
        grad = grad + grad_loss_sum * local_valid_tokens
    return normalized, loss_sum, grad


def traffic(params, world_size, itemsize):
    """One scalar all-reduce (fp32, 4 bytes; ring: 2 (W-1)/W of it sent); a few
    scalar reads and writes; a handful of FLOPs. Latency-bound at every size."""
    return {
        "link_bytes": 2 * (world_size - 1) / world_size * 4,
        "hbm_bytes": 8 * 4,
        "flops": 8 + world_size,
    }
