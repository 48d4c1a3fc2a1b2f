"""Hyena long-convolution operator under context parallelism (zig-zag sequence shards <-> channel shards).

A global sequence of Lg = W·Lloc tokens is cut into 2W chunks of Lloc/2
tokens; rank r holds chunks r and 2W-1-r, in that order (zig-zag layout).
Channel c belongs to filter group c // group_dim; G = num_groups = C / group_dim.

Arguments on rank r (positional):

- ``x1_seq``, ``x2_seq``, ``v_seq``: (B, C, Lloc), working dtype, this rank's
  two zig-zag chunks of all C channels.
- ``h``: (G, F) working dtype, identical on every rank: one causal filter of F
  taps per group (F <= Lg).
- ``conv_bias``: (C,) working dtype, identical on every rank.
- ``num_groups`` = G, ``group_dim`` (ints), ``group`` = None (WORLD),
  ``with_zigzag_splitting`` = True (False would mean rank r holds the r-th
  contiguous block of Lloc tokens instead; inputs always pass True).

With X1, X2, V the global (B, C, Lg) tensors in natural token order, for every
channel c with filter f = h[c // group_dim] and bias beta = conv_bias[c]:

    z[t]   = X2[t] * V[t]                                   (in the working dtype)
    y[t]   = sum_{j=0}^{min(t, F-1)} f[j] * z[t-j] + beta * z[t]   (in fp32, cast back)
    out[t] = X1[t] * y[t]                                   (in the working dtype)

The reference moves to channel shards first (all-to-all: rank r gets channels
[r·C/W, (r+1)·C/W) over the whole sequence, un-zig-zagged), evaluates the causal
convolution with an fp32 FFT of length 2·Lg, and moves back with a second
all-to-all. Return a new tensor of shape (B, Lloc, C) (note: transposed) in the
working dtype: this rank's zig-zag chunks r then 2W-1-r of out, token-major.

Sizes (B, C, Lloc, F): tiny (1, 24, 16, 16) with group_dim 2, default (1, 1024, 2048, 4096) as
in the original (group_dim 1), large (1, 4096, 16384, Lg) where
``filter_len: 0`` means F = Lg, the global length.

Fix in pkb: the original's filter was a deterministic ramp (h = arange/4096,
values up to about 1024) and its bias arange/1024, so outputs were huge and
identical across trials; pkb draws a shared random filter with a random decay
per group (h[g, j] = n·exp(-j/tau_g)/sqrt(tau_g/2), tau_g uniform in [F/8, F/2])
and a shared random bias.
"""
import torch
import torch.distributed as dist

ID = 72
NAME = "hyena_forward_cp"
CATEGORY = "context-parallel"
ORIGIN = "Savanna Hyena context parallelism (split<->full all-to-all, FFT long conv)"
WORLD_SIZE = "C % W == 0, num_groups % W == 0, filter length <= W·Lloc"
SIZES = {
    "tiny": {"batch": 1, "channels": 24, "local_seq": 16, "filter_len": 16, "group_dim": 2},
    "default": {"batch": 1, "channels": 1024, "local_seq": 2048, "filter_len": 4096, "group_dim": 1},
    "large": {"batch": 1, "channels": 4096, "local_seq": 16384, "filter_len": 0, "group_dim": 1},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": (
        "x1_seq", "x2_seq", "v_seq", "h", "conv_bias", "num_groups", "group_dim", "group",
        "with_zigzag_splitting",
    ),
    "args": (
        "bf16[1, 1024, 2048]", "bf16[1, 1024, 2048]", "bf16[1, 1024, 2048]", "bf16[1024, 4096]",
        "bf16[1024]", "1024", "1", "None", "True",
    ),
    "out": "bf16[1, 2048, 1024]",
}


def _filter_len(params, world_size):
    return params["filter_len"] or params["local_seq"] * world_size


def world_size_error(world_size, params):
    c, g = params["channels"], params["channels"] // params["group_dim"]
    if c % world_size or g % world_size:
        return f"channels ({c}) and filter groups ({g}) must divide by W"
    if params["local_seq"] % 2:
        return "the local sequence must split into two zig-zag chunks"
    if _filter_len(params, world_size) > params["local_seq"] * world_size:
        return f"filter length {_filter_len(params, world_size)} exceeds the global sequence (the FFT would alias)"
    return None


def inputs(ctx):
    p = ctx.params
    b, c, lloc, gd = p["batch"], p["channels"], p["local_seq"], p["group_dim"]
    groups = c // gd
    flen = _filter_len(p, ctx.world_size)
    x1, x2, v = (ctx.randn(b, c, lloc) for _ in range(3))
    tau = flen * ctx.rand(groups, 1, dtype=torch.float32, shared=True, low=0.125, high=0.5)
    taps = torch.arange(flen, device=ctx.device, dtype=torch.float32)
    h = ctx.randn(groups, flen, dtype=torch.float32, shared=True) * torch.exp(-taps / tau) / torch.sqrt(tau / 2)
    bias = ctx.randn(c, shared=True)
    return (x1, x2, v, h.to(ctx.dtype), bias, groups, gd, None, True)


def _to_channel_shards(x, group, zigzag):
    """(B, C, Lloc) zig-zag sequence shard -> (B, C/W, Lg) channel shard in natural order."""
    w = dist.get_world_size(group)
    b, c, lloc = x.shape
    send = x.reshape(b, w, c // w, lloc).transpose(0, 1).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)  # recv[s] = rank s's tokens, my channels
    if zigzag:
        halves = recv.reshape(w, b, c // w, 2, lloc // 2)
        # rank s holds chunks s and 2W-1-s: first halves are chunks 0..W-1, second halves W..2W-1 reversed.
        recv = torch.cat([halves[:, :, :, 0], halves[:, :, :, 1].flip(0)], dim=0)
    return recv.permute(1, 2, 0, 3).reshape(b, c // w, -1)


def _to_sequence_shards(z, group, zigzag):
    """(B, C/W, Lg) channel shard in natural order -> (B, C, Lloc) zig-zag sequence shard."""
    w = dist.get_world_size(group)
    b, cl, lg = z.shape
    if zigzag:
        chunks = z.reshape(b, cl, 2 * w, lg // (2 * w))
        send = torch.stack([chunks[:, :, :w], chunks[:, :, w:].flip(2)], dim=3)  # (B, Cl, W, 2, Lh)
        send = send.permute(2, 0, 1, 3, 4).reshape(w, b, cl, lg // w)
    else:
        send = z.reshape(b, cl, w, lg // w).permute(2, 0, 1, 3)
    send = send.contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)  # recv[s] = rank s's channels, my tokens
    return recv.transpose(0, 1).reshape(b, w * cl, lg // w)


def _causal_fft_conv(u, taps, bias):
    """y[t] = sum_j taps[j] u[t-j] + bias*u[t], in fp32, via an FFT of length 2L."""
    length = u.shape[-1]
    n = 2 * length
    uf = u.float()
    spectrum = torch.fft.rfft(uf, n=n) * torch.fft.rfft(taps.float(), n=n)
    y = torch.fft.irfft(spectrum, n=n)[..., :length]
    return (y + uf * bias.float().unsqueeze(-1)).to(u.dtype)


def reference(x1_seq, x2_seq, v_seq, h, conv_bias, num_groups, group_dim, group=None,
              with_zigzag_splitting=True):
    w = dist.get_world_size(group)
    me = dist.get_rank(group)
    x1, x2, v = (_to_channel_shards(t, group, with_zigzag_splitting) for t in (x1_seq, x2_seq, v_seq))
    local_channels = x1.shape[1]
    local_groups = num_groups // w
    taps = h[me * local_groups:(me + 1) * local_groups].repeat_interleave(group_dim, dim=0)
    bias = conv_bias[me * local_channels:(me + 1) * local_channels]
    z = x1 * _causal_fft_conv(x2 * v, taps, bias)
    return _to_sequence_shards(z, group, with_zigzag_splitting).transpose(1, 2).contiguous()


def traffic(params, world_size, itemsize):
    """Four all-to-alls of a (B, C, Lloc) tensor, each sending (W-1)/W of it.
    HBM: the three inputs and the output are each read or written twice (once
    per all-to-all, once in compute), plus this rank's filter slice. FLOPs:
    real FFTs of length n = 2·Lg (2.5·n·log2 n each): two per local channel and
    batch row plus one per local filter, and the pointwise work."""
    b, c, lloc = params["batch"], params["channels"], params["local_seq"]
    lg = lloc * world_size
    n = 2 * lg
    numel = b * c * lloc
    local_channels = c // world_size
    flen = _filter_len(params, world_size)
    fft = 2.5 * n * (n.bit_length() - 1)
    return {
        "link_bytes": 4 * (world_size - 1) / world_size * numel * itemsize,
        "hbm_bytes": (8 * numel + local_channels // params["group_dim"] * flen) * itemsize,
        "flops": local_channels * ((2 * b + 1) * fft + b * (3 * n + 4 * lg)),
    }
