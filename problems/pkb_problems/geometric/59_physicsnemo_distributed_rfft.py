"""Distributed 2-D real FFT (rfft2, 'ortho') of a field split along its width, with an all-to-all transpose.

A shared fp32 field X of shape (B, H, Wd) (H = h and Wd = w, each rounded up to a
multiple of W) is split along its width: rank r holds ``x`` = X[:, :, r Wd/W :
(r+1) Wd/W], fp32 (B, H, Wd/W), contiguous. The other arguments are
``s`` = (H, Wd), ``dim`` = (1, 2), ``norm`` = 'ortho', ``group`` = None (WORLD).

Return on rank r the complex64 tensor (B, H/W, Wd//2 + 1) equal to rows
[r H/W, (r+1) H/W) of torch.fft.rfft2(X, s=(H, Wd), dim=(1, 2), norm='ortho').

General contract (as in the original): let d0, d1 = dim (d0 is transformed first
and split across ranks afterwards; d1 is the dimension the input is split
along). The reference takes a complex FFT of length s[0] along d0, splits d0
into W equal blocks and all-to-alls them (block j to rank j; received blocks are
concatenated along d1 in rank order), takes a complex FFT of length s[1] along
d1 and keeps the first s[1]//2 + 1 bins.

Compared on both the real and the imaginary part with the fp32 tolerance (the
original compared only the real part, so a conjugated answer passed).
"""
import torch
import torch.distributed as dist

ID = 59
NAME = "physicsnemo_distributed_rfft"
CATEGORY = "geometric"
ORIGIN = "NVIDIA PhysicsNeMo distributed rfft2 (DistributedRFFT2)"
WORLD_SIZE = "any W >= 2 (H and Wd are rounded up to multiples of W)"
SIZES = {
    "tiny": {"batch": 2, "h": 16, "w": 16},
    "default": {"batch": 16, "h": 1024, "w": 1024},
    "large": {"batch": 16, "h": 4096, "w": 4096},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("x", "s", "dim", "norm", "group"),
    "args": ("fp32[16, 1024, 512]", "(1024, 1024)", "(1, 2)", "'ortho'", "None"),
    "out": "complex64[16, 512, 513]",
}


def _round_up(n, m):
    return -(-n // m) * m


def inputs(ctx):
    p = ctx.params
    height, width = _round_up(p["h"], ctx.world_size), _round_up(p["w"], ctx.world_size)
    local = width // ctx.world_size
    field = ctx.randn(p["batch"], height, width, dtype=torch.float32, shared=True)
    x = field[:, :, ctx.rank * local:(ctx.rank + 1) * local].contiguous()
    return (x, (height, width), (1, 2), "ortho", None)


def _all_to_all_blocks(t, split_dim, cat_dim, group):
    """Split ``t`` along split_dim into W equal blocks, send block j to rank j,
    concatenate what arrives along cat_dim in rank order (complex-safe)."""
    world_size = dist.get_world_size(group)
    moved = t.movedim(split_dim, 0)
    send = torch.view_as_real(moved.contiguous()) if moved.is_complex() else moved.contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    if moved.is_complex():
        recv = torch.view_as_complex(recv)
    blocks = recv.movedim(0, split_dim).chunk(world_size, dim=split_dim)
    return torch.cat(blocks, dim=cat_dim)


@torch.no_grad()
def reference(x, s, dim, norm="ortho", group=None):
    d0, d1 = (int(d) % x.ndim for d in dim)
    n0 = None if s[0] is None else int(s[0])
    n1 = None if s[1] is None else int(s[1])
    x1 = torch.fft.fft(x, n=n0, dim=d0, norm=norm)
    x1 = _all_to_all_blocks(x1, d0, d1, group)
    x2 = torch.fft.fft(x1, n=n1, dim=d1, norm=norm)
    return x2.narrow(d1, 0, x2.shape[d1] // 2 + 1).contiguous()


def traffic(params, world_size, itemsize):
    """complex64 (8 B/element): the all-to-all sends (W-1)/W of the (B, H, Wd/W)
    spectrum; HBM: read x, write/read the first FFT, write/read the transposed
    block, write the output; FLOPs: 5 N log2 N per complex FFT of length N."""
    import math
    w = world_size
    b, h, wd = params["batch"], _round_up(params["h"], w), _round_up(params["w"], w)
    elems = b * h * wd // w
    return {"link_bytes": (w - 1) / w * elems * 8,
            "hbm_bytes": elems * (4 + 4 * 8),
            "flops": 5 * elems * (math.log2(h) + math.log2(wd))}
