"""Tensor-parallel RMSNorm over a hidden dimension split across ranks.

The hidden dimension of width H*W is split evenly: rank r holds
``local_hidden_states`` h_r (R, H), its column slice of the hidden states, and
``local_weight`` w_r (H,), the matching slice of the RMSNorm weight (both
rank-distinct, working dtype), plus ``variance_epsilon`` (float, 1e-5).

In fp32: var[i] = (sum over ranks s and columns j of h_s[i, j]^2) / (H*W),
the per-row sum of squares all-reduced as an fp32 (R, 1) tensor. Return on
rank r the new (R, H) tensor

    w_r * to_working_dtype(fp32(h_r) * rsqrt(var + eps))

in the working dtype (the product with the weight is taken in the working
dtype, as in HF/Megatron RMSNorm). Inputs: h is normal times a random
log-normal scale per row, w is normal. Compared with the dtype tolerance.
"""
import torch
import torch.distributed as dist

ID = 18
NAME = "tp_rms_norm"
CATEGORY = "tensor-parallel"
ORIGIN = "tensor-parallel RMSNorm (Megatron/NeMo)"
WORLD_SIZE = "any W >= 2"
SIZES = {
    "tiny": {"rows": 8, "hidden": 16},
    "default": {"rows": 1024, "hidden": 1024},
    "large": {"rows": 16384, "hidden": 8192},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("local_hidden_states", "local_weight", "variance_epsilon"),
    "args": ("bf16[1024, 1024]", "bf16[1024]", "1e-05"),
    "out": "bf16[1024, 1024]",
}


def inputs(ctx):
    p = ctx.params
    h = ctx.randn(p["rows"], p["hidden"], dtype=torch.float32)
    # Rows differ in scale (and ranks within a row too), so the norm must be global.
    h = h * torch.exp(ctx.randn(p["rows"], 1, dtype=torch.float32))
    w = ctx.randn(p["hidden"])
    return (h.to(ctx.dtype), w, 1e-5)


def reference(local_hidden_states, local_weight, variance_epsilon):
    world_size = dist.get_world_size()
    x = local_hidden_states.to(torch.float32)
    sumsq = x.pow(2).sum(dim=-1, keepdim=True)
    dist.all_reduce(sumsq)
    var = sumsq / (x.shape[-1] * world_size)
    y = (x * torch.rsqrt(var + variance_epsilon)).to(local_hidden_states.dtype)
    return local_weight * y


def traffic(params, world_size, itemsize):
    """All-reduce of R fp32 sums of squares (2 (W-1)/W of them sent); reads
    h and w, writes the output; about 5 FLOPs per element."""
    r, h = params["rows"], params["hidden"]
    return {
        "link_bytes": 2 * (world_size - 1) / world_size * r * 4,
        "hbm_bytes": (2 * r * h + h) * itemsize,
        "flops": 5 * r * h,
    }
