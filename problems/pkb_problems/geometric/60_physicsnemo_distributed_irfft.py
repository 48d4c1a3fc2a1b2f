"""Distributed 2-D inverse real FFT (irfft2, 'ortho') of a spectrum split along its rows, with an all-to-all transpose.

A shared fp32 field F (B, C, H, Wd) is transformed to Y = rfft2(F, s=(H, Wd),
dim=(-2, -1), norm='ortho'), complex64 (B, C, H, Wd//2 + 1). Rank r holds ``x`` =
Y[:, :, r H/W : (r+1) H/W, :], complex64 (B, C, H/W, Wd//2 + 1), contiguous. The
other arguments are ``s`` = (H, Wd), ``dim`` = (-2, -1), ``norm`` = 'ortho',
``group`` = None (WORLD).

Return on rank r the fp32 tensor (B, C, H, Wd/W) equal to columns
[r Wd/W, (r+1) Wd/W) of the real part of the full inverse FFT of the Hermitian
completion of Y, i.e. of torch.fft.irfft2(Y, s=(H, Wd), norm='ortho') (which
recovers F up to rounding). Precisely, with h0 = dim[0], h1 = dim[1]:
1. complete the spectrum along h1 to length Wd: Z[.., k, m] = Y[.., k, m] for
   m <= Wd//2, and Z[.., k, m] = conj(Y[.., (H - k) mod H, Wd - m]) for
   Wd//2 < m < Wd (row index mirrored across the full H: this needs other ranks'
   rows; the reference all-gathers the whole local spectrum, as the original
   gathered the whole padded spectrum);
2. complex inverse FFT of length Wd along h1 ('ortho') on the local rows;
3. all-to-all: split h1 into W blocks of Wd/W, block j to rank j; received blocks
   concatenated along h0 in rank order (giving all H rows of this rank's columns);
4. complex inverse FFT of length H along h0 ('ortho'); return the real part.
``s`` = None means (W * x.shape[h0], 2 * (x.shape[h1] - 1)).

Compared with the fp32 tolerance. pkb sizes the problem by preset (the original
fixed (2, 10, 720, 1440) regardless of its base shape).
"""
import torch
import torch.distributed as dist

ID = 60
NAME = "physicsnemo_distributed_irfft"
CATEGORY = "geometric"
ORIGIN = "NVIDIA PhysicsNeMo distributed irfft2 (DistributedIRFFT2)"
WORLD_SIZE = "H % W == 0 and Wd % W == 0"
SIZES = {
    "tiny": {"batch": 1, "channels": 2, "h": 12, "w": 24},
    "default": {"batch": 2, "channels": 10, "h": 720, "w": 1440},
    "large": {"batch": 2, "channels": 10, "h": 1440, "w": 2880},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("x", "s", "dim", "norm", "group"),
    "args": ("complex64[2, 10, 360, 721]", "(720, 1440)", "(-2, -1)", "'ortho'", "None"),
    "out": "fp32[2, 10, 720, 720]",
}


def world_size_error(world_size, params):
    if params["h"] % world_size or params["w"] % world_size:
        return f"H = {params['h']} and Wd = {params['w']} must both be divisible by W"
    return None


def inputs(ctx):
    p = ctx.params
    height, width = p["h"], p["w"]
    local = height // ctx.world_size
    field = ctx.randn(p["batch"], p["channels"], height, width, dtype=torch.float32, shared=True)
    spectrum = torch.fft.rfft2(field, s=(height, width), dim=(-2, -1), norm="ortho")
    x = spectrum[:, :, ctx.rank * local:(ctx.rank + 1) * local, :].contiguous()
    return (x, (height, width), (-2, -1), "ortho", None)


def _all_gather_dim(t, dim, group):
    """Concatenate every rank's complex ``t`` along ``dim`` in rank order."""
    world_size = dist.get_world_size(group)
    moved = torch.view_as_real(t.movedim(dim, 0).contiguous())
    out = moved.new_empty((world_size * moved.shape[0],) + tuple(moved.shape[1:]))
    dist.all_gather_into_tensor(out, moved, group=group)
    return torch.view_as_complex(out).movedim(0, dim)


def _all_to_all_blocks(t, split_dim, cat_dim, group):
    """Split complex ``t`` along split_dim into W equal blocks, block j to rank j;
    concatenate what arrives along cat_dim in rank order."""
    world_size = dist.get_world_size(group)
    send = torch.view_as_real(t.movedim(split_dim, 0).contiguous())
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    blocks = torch.view_as_complex(recv).movedim(0, split_dim).chunk(world_size, dim=split_dim)
    return torch.cat(blocks, dim=cat_dim)


@torch.no_grad()
def reference(x, s, dim, norm="ortho", group=None):
    world_size = dist.get_world_size(group)
    rank = dist.get_rank(group)
    d0, d1 = (int(d) % x.ndim for d in dim)
    if s is None:
        height, width = world_size * x.shape[d0], 2 * (x.shape[d1] - 1)
    else:
        height, width = int(s[0]), int(s[1])
    local_rows = x.shape[d0]
    # 1. Hermitian completion along d1 (needs the mirrored rows of other ranks).
    full = _all_gather_dim(x, d0, group)                          # all H rows
    mirror_rows = (-torch.arange(height, device=x.device)) % height
    mirrored = full.index_select(d0, mirror_rows[rank * local_rows:(rank + 1) * local_rows])
    half = x.shape[d1]
    tail_cols = torch.arange(width - half, 0, -1, device=x.device) if width > half else None
    pieces = [x]
    if tail_cols is not None:
        # columns half..width-1 take conj(Y[-k, width - m]): source columns width-half .. 1
        pieces.append(mirrored.index_select(d1, tail_cols).conj())
    z = torch.cat(pieces, dim=d1).narrow(d1, 0, width)
    # 2.-4. inverse FFT along d1, transpose, inverse FFT along d0.
    z = torch.fft.ifft(z, n=width, dim=d1, norm=norm)
    z = _all_to_all_blocks(z, d1, d0, group)
    z = torch.fft.ifft(z, n=height, dim=d0, norm=norm)
    return torch.real(z).contiguous()


def traffic(params, world_size, itemsize):
    """complex64 (8 B): the all-gather sends the local (B, C, H/W, Wd/2+1)
    spectrum to W-1 peers; the all-to-all sends (W-1)/W of the (B, C, H/W, Wd)
    block; HBM: gathered spectrum, completed block and two FFT passes; FLOPs:
    5 N log2 N per complex FFT of length N."""
    import math
    w = world_size
    bc, h, wd = params["batch"] * params["channels"], params["h"], params["w"]
    local_half = bc * h // w * (wd // 2 + 1) * 8
    local_full = bc * h * wd // w * 8
    return {"link_bytes": (w - 1) * local_half + (w - 1) / w * local_full,
            "hbm_bytes": w * local_half + 6 * local_full,
            "flops": 5 * bc * h * wd / w * (math.log2(h) + math.log2(wd))}
