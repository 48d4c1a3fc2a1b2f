"""LayerNorm weight/bias gradients, reduced over sequence-parallel ranks.

Each rank r holds ``X_hat`` (B, H), the normalised LayerNorm input of its B
rows (every row has unit L2 norm), and ``dY`` (B, H), the upstream gradient,
both in the working dtype (bf16 on GPU). Return, on every rank, the tuple

    (d_gamma, d_beta) = (sum over ranks s and rows i of dY_s[i] * X_hat_s[i],
                         sum over ranks s and rows i of dY_s[i]),

two new (H,) tensors in the working dtype: column sums taken over this rank's
rows, then summed over all ranks (the reference reduces each in the working
dtype with one all-reduce per output). The inputs must not be modified.

Inputs: X_hat = normal rows divided by (their L2 norm + 1e-5), dY normal.
Compared with the dtype tolerance (the sums run over B*W rows).
"""
import torch
import torch.distributed as dist

ID = 9
NAME = "layernorm_backward"
CATEGORY = "tensor-parallel"
ORIGIN = "Megatron-style LayerNorm weight-gradient reduction (SP/TP)"
WORLD_SIZE = "any W >= 2"
SIZES = {
    "tiny": {"b": 16, "h": 32},
    "default": {"b": 1024, "h": 1024},
    "large": {"b": 32768, "h": 8192},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("X_hat", "dY"),
    "args": ("bf16[1024, 1024]", "bf16[1024, 1024]"),
    "out": ("bf16[1024]", "bf16[1024]"),
}


def inputs(ctx):
    p = ctx.params
    x = ctx.randn(p["b"], p["h"], dtype=torch.float32)
    x_hat = (x / (x.norm(dim=-1, keepdim=True) + 1e-5)).to(ctx.dtype)
    d_y = ctx.randn(p["b"], p["h"])
    return (x_hat, d_y)


def reference(X_hat, dY):
    d_beta = dY.sum(dim=0)
    d_gamma = (dY * X_hat).sum(dim=0)
    dist.all_reduce(d_beta)
    dist.all_reduce(d_gamma)
    return d_gamma, d_beta


def traffic(params, world_size, itemsize):
    """Two ring all-reduces of H elements (2 (W-1)/W of each); reads both
    (B, H) inputs once and writes two (H,) outputs; one multiply and two adds
    per input element."""
    b, h = params["b"], params["h"]
    return {
        "link_bytes": 2 * 2 * (world_size - 1) / world_size * h * itemsize,
        "hbm_bytes": (2 * b * h + 2 * h) * itemsize,
        "flops": 3 * b * h + 2 * (world_size - 1) * h,
    }
