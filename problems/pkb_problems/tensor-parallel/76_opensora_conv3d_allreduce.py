"""Input-channel-parallel 3-D convolution, partial outputs all-reduced.

A Conv3d with C_in = W*Cl input and C output channels, kernel 3x3x3, is split
along its input channels: rank r holds ``input`` (1, Cl, T, Hh, Ww), channel
block r of the activation, and ``weight`` (C, Cl, 3, 3, 3), the matching
input-channel block of the weight (both rank-distinct), plus the replicated
``bias`` (C,) (the same on every rank), all in the working dtype; then
``stride`` = 1, ``padding`` = 0, ``dilation`` = 1, ``groups`` = 1 (ints) and
``group`` = None (WORLD). Cl = C // W (the original picked C as the first of
512/256/128 divisible by W, i.e. C = 512 for every W that divides 512; otherwise
Cl is rounded down).

Each rank computes its partial conv3d(input, weight) without bias, rounded to
the working dtype; the partials are all-reduced (summed in the working dtype)
and the bias is added afterwards. Return on every rank the new
(1, C, T-2, Hh-2, Ww-2) tensor in the working dtype. (The original splits a
convolution into channel chunks only above 2^31 elements, which no preset
reaches.) Compared with the dtype tolerance.

pkb fix: the weights are scaled by 1/sqrt(fan-in) = 1/sqrt(27*C_in) and the
bias is random (the original had unscaled weights, outputs of std ~80 in
bf16, and a linspace bias).
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F

ID = 76
NAME = "opensora_conv3d_allreduce"
CATEGORY = "tensor-parallel"
ORIGIN = "Open-Sora VAE channel-chunked conv3d + tensor-parallel all-reduce"
WORLD_SIZE = "any 2 <= W <= C (input channels per rank C // W, rounded down)"
SIZES = {
    "tiny": {"channels": 8, "t": 4, "h": 6, "w": 6},
    "default": {"channels": 512, "t": 19, "h": 66, "w": 66},
    "large": {"channels": 512, "t": 35, "h": 130, "w": 130},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("input", "weight", "bias", "stride", "padding", "dilation", "groups", "group"),
    "args": (
        "bf16[1, 256, 19, 66, 66]", "bf16[512, 256, 3, 3, 3]", "bf16[512]", "1", "0", "1", "1", "None",
    ),
    "out": "bf16[1, 512, 17, 64, 64]",
}


def world_size_error(world_size, params):
    if world_size > params["channels"]:
        return f"W = {world_size} exceeds the {params['channels']} channels (no input channel per rank)"
    return None


def inputs(ctx):
    p = ctx.params
    c = p["channels"]
    cl = c // ctx.world_size
    x = ctx.randn(1, cl, p["t"], p["h"], p["w"])
    weight = ctx.randn(c, cl, 3, 3, 3, scale=(27 * cl * ctx.world_size) ** -0.5)
    bias = ctx.randn(c, shared=True, scale=0.5)
    return (x, weight, bias, 1, 0, 1, 1, None)


def reference(input, weight, bias, stride, padding, dilation, groups=1, group=None):
    out = F.conv3d(input, weight, None, stride, padding, dilation, groups)
    dist.all_reduce(out, group=group)
    if bias is not None:
        out = out + bias.view(1, -1, 1, 1, 1)
    return out


def traffic(params, world_size, itemsize):
    """Ring all-reduce of the (1, C, T-2, H-2, W-2) partial (2 (W-1)/W of it
    sent). HBM: input and weight read, partial written and read, output
    written. 2 * 27 * Cl FLOPs per output element."""
    c = params["channels"]
    cl = c // world_size
    out = c * (params["t"] - 2) * (params["h"] - 2) * (params["w"] - 2)
    return {
        "link_bytes": 2 * (world_size - 1) / world_size * out * itemsize,
        "hbm_bytes": (cl * params["t"] * params["h"] * params["w"] + 27 * c * cl + 3 * out) * itemsize,
        "flops": 2 * 27 * cl * out + (world_size - 1) * out,
    }
