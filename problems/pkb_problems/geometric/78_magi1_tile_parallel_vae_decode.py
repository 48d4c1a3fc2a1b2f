"""Tile-parallel video VAE decode: split a latent into overlapping tiles, decode them across ranks, blend seams, assemble.

Inputs: ``z`` (B, Cz, T, H, W) in the working dtype, the SAME latent on every rank;
then ``tile_latent_min_length`` lt, ``tile_latent_min_height`` lh,
``tile_latent_min_width`` lw, ``spatial_tile_overlap_factor`` os,
``temporal_tile_overlap_factor`` ot, ``spatial_upsample`` su,
``temporal_upsample`` tu, ``sr_ratio`` (1), ``first_frame_as_image`` (False),
``group`` (None = WORLD). Default: z (1, 16, 6, 90, 90), (3, 32, 32, 0.25, 0.0, 8, 4, 1, False).

Definitions (Python int() truncation throughout): lt += int(first_frame_as_image);
su *= sr_ratio; latent strides st = int(lt (1 - ot)), sh = int(lh (1 - os)),
sw = int(lw (1 - os)); decoded tile extents RT = lt tu, RH = lh su, RW = lw su;
blend extents bt = int(RT ot), bh = int(RH os), bw = int(RW os); kept extents
KT = RT - bt, KH = RH - bh, KW = RW - bw. Tiles: nt = ceil(T / st), nh = ceil(H /
sh), nw = ceil(W / sw), tile (a, b, c) (flat index (a nh + b) nw + c) is
z[:, :, a st : a st + lt, b sh : b sh + lh, c sw : c sw + lw] (clipped at the end).

1. Decode (a stand-in for the VAE decoder): D(tile) = trilinear interpolation
   (align_corners=False, scale (tu, su, su)) in fp32 of the tile's channels
   (0, 1, 2) (channel i mod Cz when Cz < 3), cast to the working dtype:
   (B, 3, t tu, h su, w su) for a (t, h, w) tile.
2. Blend: tile (a, b, c) is blended with its predecessors, in this order along
   time (with D(a-1, b, c)), height (with D(a, b-1, c)) and width (with
   D(a, b, c-1)), each only if that predecessor exists; blending along an axis
   with extent e = min(prev extent, cur extent, blend extent) sets, for i < e,
   cur[i] = prev[-e + i] (1 - i/e) + cur[i] (i/e) (computed in fp32, rounded to the
   working dtype once per axis). Predecessors are always UNblended decoded tiles.
3. Crop each blended tile to its first (KT, KH, KW) and place the crops on the
   grid (offsets are the sums of the preceding crops' extents).
Return on every rank the assembled video (B, 3, sum of time crops, sum of height
crops, sum of width crops) in the working dtype: (1, 3, 24, 720, 720) by default.
Compared with the working dtype's tolerance; all ranks return the same video.

Work split (reference): tiles are sorted by latent numel, descending (stable), and
dealt round-robin: rank r decodes and blends sorted[r::W]; decoded tiles and
blended crops are all-gathered (tile shapes follow from z.shape and the
arguments, so no shape exchange is needed).

Fix relative to the original PKB: each rank drew a different latent, but
tile-parallel decoding assumes a replicated one (the output mixed different
videos); pkb shares z across ranks. The blend loops are vectorised (one rounding
per axis instead of per bf16 operation).
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F

ID = 78
NAME = "magi1_tile_parallel_vae_decode"
CATEGORY = "geometric"
ORIGIN = "MAGI-1 tile-parallel VAE decode (Sand AI)"
WORLD_SIZE = "any W >= 2"
SIZES = {
    "tiny": {"batch": 1, "channels": 4, "frames": 2, "height": 12, "width": 12, "tile_t": 1, "tile_h": 8,
             "tile_w": 8, "overlap_s": 0.25, "overlap_t": 0.0, "up_s": 2, "up_t": 2},
    "default": {"batch": 1, "channels": 16, "frames": 6, "height": 90, "width": 90, "tile_t": 3, "tile_h": 32,
                "tile_w": 32, "overlap_s": 0.25, "overlap_t": 0.0, "up_s": 8, "up_t": 4},
    "large": {"batch": 1, "channels": 16, "frames": 12, "height": 180, "width": 180, "tile_t": 3, "tile_h": 32,
              "tile_w": 32, "overlap_s": 0.25, "overlap_t": 0.0, "up_s": 8, "up_t": 4},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": (
        "z", "tile_latent_min_length", "tile_latent_min_height", "tile_latent_min_width",
        "spatial_tile_overlap_factor", "temporal_tile_overlap_factor", "spatial_upsample",
        "temporal_upsample", "sr_ratio", "first_frame_as_image", "group",
    ),
    "args": ("bf16[1, 16, 6, 90, 90]", "3", "32", "32", "0.25", "0.0", "8", "4", "1", "False", "None"),
    "out": "bf16[1, 3, 24, 720, 720]",
}


def inputs(ctx):
    p = ctx.params
    z = ctx.randn(p["batch"], p["channels"], p["frames"], p["height"], p["width"], shared=True)
    return (z, p["tile_t"], p["tile_h"], p["tile_w"], p["overlap_s"], p["overlap_t"], p["up_s"], p["up_t"], 1, False,
            None)


def _blend(prev, cur, dim, extent):
    extent = min(prev.shape[dim], cur.shape[dim], extent)
    if extent <= 0:
        return cur
    ratio = torch.arange(extent, dtype=torch.float64, device=cur.device) / extent
    shape = [1] * cur.ndim
    shape[dim] = extent
    keep = (1.0 - ratio).to(torch.float32).view(shape)
    take = ratio.to(torch.float32).view(shape)
    head = prev.narrow(dim, prev.shape[dim] - extent, extent).float() * keep + cur.narrow(dim, 0, extent).float() * take
    cur = cur.clone()
    cur.narrow(dim, 0, extent).copy_(head)
    return cur


def _all_gather_tiles(tiles, shapes, owners, world_size, template, group):
    """tiles: {idx: tensor} of this rank; shapes: {idx: shape} of all tiles;
    owners[r]: tile indices of rank r in order. Returns {idx: tensor} for all."""
    numel = lambda s: int(torch.Size(s).numel())
    sizes = [sum(numel(shapes[i]) for i in owned) for owned in owners]
    width = max(sizes)
    mine = [tiles[i].reshape(-1) for i in tiles]
    flat = torch.cat(mine) if mine else template.new_empty(0)
    buf = template.new_zeros(width)
    buf[: flat.numel()] = flat
    out = template.new_empty(world_size * width)
    dist.all_gather_into_tensor(out, buf, group=group)
    result = {}
    for r, owned in enumerate(owners):
        offset = r * width
        for i in owned:
            n = numel(shapes[i])
            result[i] = out[offset: offset + n].view(shapes[i])
            offset += n
    return result


@torch.no_grad()
def reference(z, tile_latent_min_length, tile_latent_min_height, tile_latent_min_width, spatial_tile_overlap_factor,
              temporal_tile_overlap_factor, spatial_upsample, temporal_upsample, sr_ratio=1,
              first_frame_as_image=False, group=None):
    world_size = dist.get_world_size(group)
    rank = dist.get_rank(group)
    lt = tile_latent_min_length + int(first_frame_as_image)
    lh, lw = tile_latent_min_height, tile_latent_min_width
    su, tu = spatial_upsample * sr_ratio, temporal_upsample
    st = int(lt * (1.0 - temporal_tile_overlap_factor))
    sh = int(lh * (1.0 - spatial_tile_overlap_factor))
    sw = int(lw * (1.0 - spatial_tile_overlap_factor))
    if min(st, sh, sw) <= 0:
        raise ValueError("tile overlap factors must leave a positive stride")
    rt, rh, rw = lt * tu, lh * su, lw * su
    blend = (int(rt * temporal_tile_overlap_factor), int(rh * spatial_tile_overlap_factor),
             int(rw * spatial_tile_overlap_factor))
    keep = (rt - blend[0], rh - blend[1], rw - blend[2])
    batch, chans, frames, height, width = z.shape
    grid = (-(-frames // st), -(-height // sh), -(-width // sw))
    starts, extents = [], []
    for a in range(grid[0]):
        for b in range(grid[1]):
            for c in range(grid[2]):
                start = (a * st, b * sh, c * sw)
                starts.append(start)
                extents.append((min(lt, frames - start[0]), min(lh, height - start[1]), min(lw, width - start[2])))
    total = len(starts)
    index = lambda a, b, c: (a * grid[1] + b) * grid[2] + c
    latent_numel = [batch * chans * e[0] * e[1] * e[2] for e in extents]
    ordered = sorted(range(total), key=lambda i: latent_numel[i], reverse=True)
    owners = [ordered[r::world_size] for r in range(world_size)]
    channels = [i % chans for i in range(3)]
    decoded_shape = {i: (batch, 3, e[0] * tu, e[1] * su, e[2] * su) for i, e in enumerate(extents)}

    # 1. decode this rank's tiles, share them.
    decoded = {}
    for i in owners[rank]:
        (t0, h0, w0), (t, h, w) = starts[i], extents[i]
        tile = z[:, channels, t0:t0 + t, h0:h0 + h, w0:w0 + w].float()
        decoded[i] = F.interpolate(tile, scale_factor=(tu, su, su), mode="trilinear", align_corners=False).to(z.dtype)
    decoded = _all_gather_tiles(decoded, decoded_shape, owners, world_size, z, group)

    # 2. blend own tiles with their predecessors, crop, share.
    crops, crop_shape = {}, {}
    for i in range(total):
        s = decoded_shape[i]
        crop_shape[i] = (batch, 3, min(keep[0], s[2]), min(keep[1], s[3]), min(keep[2], s[4]))
    for i in owners[rank]:
        a, rem = divmod(i, grid[1] * grid[2])
        b, c = divmod(rem, grid[2])
        tile = decoded[i]
        if a > 0:
            tile = _blend(decoded[index(a - 1, b, c)], tile, 2, blend[0])
        if b > 0:
            tile = _blend(decoded[index(a, b - 1, c)], tile, 3, blend[1])
        if c > 0:
            tile = _blend(decoded[index(a, b, c - 1)], tile, 4, blend[2])
        crops[i] = tile[:, :, :keep[0], :keep[1], :keep[2]]
    crops = _all_gather_tiles(crops, crop_shape, owners, world_size, z, group)

    # 3. assemble.
    sizes_t = [crop_shape[index(a, 0, 0)][2] for a in range(grid[0])]
    sizes_h = [crop_shape[index(0, b, 0)][3] for b in range(grid[1])]
    sizes_w = [crop_shape[index(0, 0, c)][4] for c in range(grid[2])]
    out = z.new_empty(batch, 3, sum(sizes_t), sum(sizes_h), sum(sizes_w))
    off = lambda sizes, k: sum(sizes[:k])
    for i in range(total):
        a, rem = divmod(i, grid[1] * grid[2])
        b, c = divmod(rem, grid[2])
        _, _, t, h, w = crop_shape[i]
        t0, h0, w0 = off(sizes_t, a), off(sizes_h, b), off(sizes_w, c)
        out[:, :, t0:t0 + t, h0:h0 + h, w0:w0 + w] = crops[i]
    return out


def traffic(params, world_size, itemsize):
    """Approximate: the decoded tiles (about nt nh nw tiles of B 3 (lt tu) (lh su)
    (lw su)) and the cropped video are each all-gathered, so every rank sends its
    1/W share of both to W-1 peers; HBM: decode writes, blend reads/writes, the
    assembly writes the video; about 30 FLOPs per decoded element (trilinear)."""
    p = params
    st = int(p["tile_t"] * (1 - p["overlap_t"]))
    sh = int(p["tile_h"] * (1 - p["overlap_s"]))
    sw = int(p["tile_w"] * (1 - p["overlap_s"]))
    tiles = -(-p["frames"] // st) * -(-p["height"] // sh) * -(-p["width"] // sw)
    tile = p["batch"] * 3 * p["tile_t"] * p["up_t"] * p["tile_h"] * p["up_s"] * p["tile_w"] * p["up_s"]
    video = p["batch"] * 3 * p["frames"] * p["up_t"] * p["height"] * p["up_s"] * p["width"] * p["up_s"]
    decoded = tiles * tile
    return {"link_bytes": (world_size - 1) / world_size * (decoded + video) * itemsize,
            "hbm_bytes": (3 * decoded + 3 * video) * itemsize,
            "flops": 30 * decoded / world_size}
