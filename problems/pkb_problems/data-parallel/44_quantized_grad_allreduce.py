"""Gradient all-reduce (mean) through an int8 block-quantised round trip.

Each rank r holds ``flat_grad`` g_r of shape (N,) in the working dtype and the
int ``block_size`` b (N is a multiple of b). Each rank quantises its own gradient
per contiguous block of b elements, in fp32: scale = max(max|x| over the block,
1e-8) / 127 (fp32 division), q = clamp(round(x / scale), -127, 127) with x / scale
an IEEE fp32 division and round half to even, then dequantises d = q * scale
(fp32). The fp32 vectors d_r are summed over all ranks, divided by W and cast to
the working dtype. Return on every rank the (N,) result (identical on all ranks);
``flat_grad`` is unchanged.
"""
import torch
import torch.distributed as dist

ID = 44
NAME = "quantized_grad_allreduce"
CATEGORY = "data-parallel"
ORIGIN = "ZeRO++-style int8 block-quantised gradient all-reduce"
WORLD_SIZE = "any W >= 2"
# The result is the fp32 mean cast once to the working dtype: a correct kernel is
# within one ulp of it (bf16: <= 0.8 %). A bf16-wide atol (1 % of the largest
# element) would let a plain all-reduce without the int8 round trip pass, so atol
# is tight.
TOLERANCE = {"rtol": 1e-2, "atol": 1e-4}
SIZES = {
    "tiny": {"n": 512, "block": 32},
    "default": {"n": 1048576, "block": 128},
    "large": {"n": 134217728, "block": 128},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("flat_grad", "block_size"),
    "args": ("bf16[1048576]", "128"),
    "out": "bf16[1048576]",
}


def inputs(ctx):
    p = ctx.params
    return (ctx.randn(p["n"]), p["block"])


@torch.no_grad()
def reference(flat_grad, block_size):
    world_size = dist.get_world_size()
    blocks = flat_grad.reshape(-1, block_size).float()
    scale = blocks.abs().amax(dim=1, keepdim=True).clamp(min=1e-8) / 127.0
    q = (blocks / scale).round().clamp(-127, 127).to(torch.int8)
    acc = (q.float() * scale).reshape(-1)
    dist.all_reduce(acc)
    acc.div_(world_size)
    return acc.to(flat_grad.dtype).reshape(flat_grad.shape)


def traffic(params, world_size, itemsize):
    """The reference all-reduces fp32 (ring: 2 (W-1)/W * 4N bytes sent); an int8
    wire format would send a quarter of that. HBM: read N inputs, write and read
    the fp32 buffer, write N outputs. FLOPs: ~6 per element plus the reduction."""
    n = params["n"]
    return {
        "link_bytes": 2 * (world_size - 1) / world_size * n * 4,
        "hbm_bytes": n * (2 * itemsize + 2 * 4),
        "flops": (6 + world_size) * n,
    }
