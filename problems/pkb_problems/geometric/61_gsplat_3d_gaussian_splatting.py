"""Distributed 3-D Gaussian splatting projection: project local Gaussians into every rank's cameras, send visible splats to the camera owners.

Inputs on rank r (all floating tensors fp32, fixed):
- N local Gaussians: ``means`` (N, 3) (x, y uniform in [-0.75, 0.75), z in
  [2, 4)), ``quats`` (N, 4) (w, x, y, z; not normalised), ``scales`` (N, 3) in
  [0, 0.02), ``opacities`` (N,) in [0.1, 0.9), ``colors`` (N, 3) in [0, 1);
- C cameras: ``viewmats`` (C, 4, 4) world-to-camera [R | t] (random rotations up to
  0.6 rad, translations in [-0.5, 0.5)^3, so some Gaussians leave the image; all W C cameras come from a shared seed) and
  ``Ks`` (C, 3, 3) pinhole intrinsics (f = 0.8 min(width, height), principal
  point at the image centre);
- ``image_width``, ``image_height`` (ints), ``eps2d`` = 0.3, ``near_plane`` = 0.01,
  ``far_plane`` = 1e10, ``camera_model`` = "pinhole".

Global cameras: the concatenation of all ranks' cameras in rank order (camera
g = d C + i is camera i of rank d). Each rank projects its Gaussians into all
W C cameras (gsplat's torch projection):
- R_q from the normalised quaternion; Sigma = (R_q diag(s)) (R_q diag(s))^T;
- camera frame: m_c = R m + t, Sigma_c = R Sigma R^T; (tx, ty, tz) = m_c;
- perspective: with fx, fy, cx, cy from K, lim_x+ = (width - cx)/fx +
  0.3 (0.5 width / fx), lim_x- = cx/fx + 0.3 (0.5 width / fx) (same for y with
  height, fy, cy), tx' = tz clamp(tx/tz, -lim_x-, lim_x+), ty' likewise;
  J = [[fx/tz, 0, -fx tx'/tz^2], [0, fy/tz, -fy ty'/tz^2]];
  cov2d = J Sigma_c J^T + eps2d I; means2d = (K[:2, :3] m_c) / tz;
- det = max(c00 c11 - c01 c10, 1e-10); conics = (c11/det, -(c01 + c10)/2/det, c00/det);
  depth = tz;
- radius = (ceil(3.33 sqrt(c00)), ceil(3.33 sqrt(c11))), set to 0 unless
  near < depth < far and the box is inside the image: means2d_x + r_x > 0,
  means2d_x - r_x < width, means2d_y + r_y > 0, means2d_y - r_y < height.
A (camera, Gaussian) pair is visible when both radii are > 0. Visible pairs are
listed camera-major, then by local Gaussian index, and each is sent to the rank
owning its camera.

Return on rank d, for the pairs of its own cameras, ordered by source rank and,
within a source, camera-major then Gaussian index, the tuple
(camera_ids int64 (M,): local camera index i at d;
 gaussian_ids int64 (M,): the Gaussian's index on its source rank PLUS
   N_0 + ... + N_{d-1} (d = this receiving rank; this is gsplat's convention:
   the offset is that of the receiver, not of the source);
 radii int32 (M, 2); means2d (M, 2); depths (M,); conics (M, 3); opacities (M,);
 colors (M, 3)), floats fp32 (the ids are int64 as in the original, where a
cumsum promotes them). Ids and radii compare exactly, floats with the fp32
tolerance. M varies per rank.

Fixes relative to the original PKB: all cameras were the identity; pkb gives each
camera a random pose. The original computed in bf16, where ceil() of borderline
values can change the visible set between correct implementations; pkb uses fp32
and the input builder re-draws any Gaussian whose radius argument lies within
1e-3 of an integer, whose depth lies within 1e-3 of the near plane, or whose
inside-image tests are within 1e-2 pixel of their threshold, in any camera (checked
in fp64), so the visible set and radii are robust to rounding.
"""
import math

import torch
import torch.distributed as dist

ID = 61
NAME = "gsplat_3d_gaussian_splatting"
CATEGORY = "geometric"
ORIGIN = "gsplat distributed rasterization (projection + all-to-all of visible splats)"
WORLD_SIZE = "any W >= 2"
SIZES = {
    "tiny": {"gaussians": 64, "cameras": 1, "width": 32, "height": 32},
    "default": {"gaussians": 1024, "cameras": 1, "width": 512, "height": 512},
    "large": {"gaussians": 1048576, "cameras": 4, "width": 1920, "height": 1080},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": (
        "means", "quats", "scales", "opacities", "colors", "viewmats", "Ks", "image_width", "image_height",
        "eps2d", "near_plane", "far_plane", "camera_model",
    ),
    "args": (
        "bf16[1024, 3]", "bf16[1024, 4]", "bf16[1024, 3]", "bf16[1024]", "bf16[1024, 3]", "bf16[1, 4, 4]",
        "bf16[1, 3, 3]", "512", "512", "0.3", "0.01", "10000000000.0", "'pinhole'",
    ),
    "out": (
        "int64[2048]", "int64[2048]", "int32[2048, 2]", "bf16[2048, 2]", "bf16[2048]", "bf16[2048, 3]",
        "bf16[2048]", "bf16[2048, 3]",
    ),
}
# Why this problem differs from the original there (docs/pkb-parity.md).
PKB_DIFFERENCES = {
    "means": (
        "fp32 instead of bf16: in bf16, ceil() of borderline radii changes the visible set between correct "
        "implementations (docstring)"
    ),
    "quats": (
        "fp32 instead of bf16: in bf16, ceil() of borderline radii changes the visible set between correct "
        "implementations (docstring)"
    ),
    "scales": (
        "fp32 instead of bf16: in bf16, ceil() of borderline radii changes the visible set between correct "
        "implementations (docstring)"
    ),
    "opacities": (
        "fp32 instead of bf16: in bf16, ceil() of borderline radii changes the visible set between correct "
        "implementations (docstring)"
    ),
    "colors": (
        "fp32 instead of bf16: in bf16, ceil() of borderline radii changes the visible set between correct "
        "implementations (docstring)"
    ),
    "viewmats": (
        "fp32 instead of bf16: in bf16, ceil() of borderline radii changes the visible set between correct "
        "implementations (docstring)"
    ),
    "Ks": (
        "fp32 instead of bf16: in bf16, ceil() of borderline radii changes the visible set between correct "
        "implementations (docstring)"
    ),
    "out[3]": (
        "fp32 instead of bf16 (see means); one row per visible (camera, Gaussian) pair, whose number depends "
        "on the random camera poses"
    ),
    "out[4]": (
        "fp32 instead of bf16 (see means); one row per visible (camera, Gaussian) pair, whose number depends "
        "on the random camera poses"
    ),
    "out[5]": (
        "fp32 instead of bf16 (see means); one row per visible (camera, Gaussian) pair, whose number depends "
        "on the random camera poses"
    ),
    "out[6]": (
        "fp32 instead of bf16 (see means); one row per visible (camera, Gaussian) pair, whose number depends "
        "on the random camera poses"
    ),
    "out[7]": (
        "fp32 instead of bf16 (see means); one row per visible (camera, Gaussian) pair, whose number depends "
        "on the random camera poses"
    ),
    "out[0]": (
        "one row per visible (camera, Gaussian) pair: their number depends on the random camera poses (the "
        "original's identity cameras saw every Gaussian)"
    ),
    "out[1]": (
        "one row per visible (camera, Gaussian) pair: their number depends on the random camera poses (the "
        "original's identity cameras saw every Gaussian)"
    ),
    "out[2]": (
        "one row per visible (camera, Gaussian) pair: their number depends on the random camera poses (the "
        "original's identity cameras saw every Gaussian)"
    ),
}

_EPS2D, _NEAR, _FAR = 0.3, 0.01, 1e10
_CEIL_MARGIN, _DEPTH_MARGIN, _EDGE_MARGIN = 1e-3, 1e-3, 1e-2


def _draw_gaussians(ctx, n):
    means = torch.stack([ctx.rand(n, dtype=torch.float32, low=-0.75, high=0.75),
                         ctx.rand(n, dtype=torch.float32, low=-0.75, high=0.75),
                         ctx.rand(n, dtype=torch.float32, low=2.0, high=4.0)], dim=1)
    quats = ctx.randn(n, 4, dtype=torch.float32)
    scales = ctx.rand(n, 3, dtype=torch.float32, high=0.02)
    return means, quats, scales


def _cameras(ctx, total, width, height):
    """``total`` random world-to-camera poses and pinhole intrinsics (shared)."""
    axis = torch.nn.functional.normalize(ctx.randn(total, 3, dtype=torch.float32, shared=True), dim=1)
    angle = ctx.rand(total, dtype=torch.float32, shared=True, high=0.6)
    shift = ctx.rand(total, 3, dtype=torch.float32, shared=True, low=-0.5, high=0.5) * torch.tensor(
        [1.0, 1.0, 1.0], device=ctx.device)
    zero = torch.zeros_like(angle)
    cross = torch.stack([zero, -axis[:, 2], axis[:, 1], axis[:, 2], zero, -axis[:, 0],
                         -axis[:, 1], axis[:, 0], zero], dim=1).view(total, 3, 3)
    eye = torch.eye(3, device=ctx.device).expand(total, 3, 3)
    rot = eye + angle.sin()[:, None, None] * cross + (1 - angle.cos())[:, None, None] * (cross @ cross)
    viewmats = torch.zeros(total, 4, 4, device=ctx.device)
    viewmats[:, :3, :3] = rot
    viewmats[:, :3, 3] = shift
    viewmats[:, 3, 3] = 1.0
    focal = 0.8 * min(width, height)
    ks = torch.tensor([[focal, 0.0, width * 0.5], [0.0, focal, height * 0.5], [0.0, 0.0, 1.0]],
                      device=ctx.device).expand(total, 3, 3).contiguous()
    return viewmats, ks


def _rotation(quats):
    w, x, y, z = torch.nn.functional.normalize(quats, dim=-1).unbind(-1)
    return torch.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
                        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
                        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
                       dim=-1).view(*quats.shape[:-1], 3, 3)


def _project(means, quats, scales, viewmats, ks, width, height, eps2d):
    """Projection of N Gaussians into C cameras (all (C, N, ...)): returns
    (radius argument 3.33 sqrt(diag cov2d) (C, N, 2), means2d, depths, conics)."""
    m = _rotation(quats) * scales[:, None, :]
    cov = m @ m.transpose(-1, -2)
    rot, trans = viewmats[:, :3, :3], viewmats[:, :3, 3]
    mc = torch.einsum("cij,nj->cni", rot, means) + trans[:, None, :]
    cov_c = torch.einsum("cij,njk,clk->cnil", rot, cov, rot)
    tx, ty, tz = mc.unbind(-1)
    fx, fy = ks[:, 0, 0, None], ks[:, 1, 1, None]
    cx, cy = ks[:, 0, 2, None], ks[:, 1, 2, None]
    slack_x, slack_y = 0.3 * (0.5 * width / fx), 0.3 * (0.5 * height / fy)
    tx_c = tz * torch.clamp(tx / tz, min=-(cx / fx + slack_x), max=(width - cx) / fx + slack_x)
    ty_c = tz * torch.clamp(ty / tz, min=-(cy / fy + slack_y), max=(height - cy) / fy + slack_y)
    zero = torch.zeros_like(tz)
    jac = torch.stack([fx / tz, zero, -fx * tx_c / (tz * tz), zero, fy / tz, -fy * ty_c / (tz * tz)],
                      dim=-1).view(*tz.shape, 2, 3)
    cov2d = jac @ cov_c @ jac.transpose(-1, -2)
    cov2d = cov2d + eps2d * torch.eye(2, dtype=cov2d.dtype, device=cov2d.device)
    c00, c01, c10, c11 = cov2d[..., 0, 0], cov2d[..., 0, 1], cov2d[..., 1, 0], cov2d[..., 1, 1]
    det = (c00 * c11 - c01 * c10).clamp(min=1e-10)
    conics = torch.stack([c11 / det, -(c01 + c10) / 2.0 / det, c00 / det], dim=-1)
    means2d = torch.einsum("cij,cnj->cni", ks[:, :2, :3], mc) / tz[..., None]
    radius_arg = 3.33 * torch.stack([c00.sqrt(), c11.sqrt()], dim=-1)
    return radius_arg, means2d, tz, conics


def _radii(radius_arg, means2d, depths, width, height, near, far):
    radius = torch.ceil(radius_arg)
    ok = (depths > near) & (depths < far)
    ok &= (means2d[..., 0] + radius[..., 0] > 0) & (means2d[..., 0] - radius[..., 0] < width)
    ok &= (means2d[..., 1] + radius[..., 1] > 0) & (means2d[..., 1] - radius[..., 1] < height)
    return torch.where(ok[..., None], radius, torch.zeros_like(radius)).int()


def _fragile(means, quats, scales, viewmats, ks, width, height):
    """Gaussians whose visibility or radii sit near a rounding threshold in some camera (fp64)."""
    bad = torch.zeros(means.shape[0], dtype=torch.bool, device=means.device)
    args = [t.double() for t in (means, quats, scales)]
    for cam in range(viewmats.shape[0]):
        arg, m2d, depth, _ = _project(*args, viewmats[cam:cam + 1].double(), ks[cam:cam + 1].double(),
                                      width, height, _EPS2D)
        arg, m2d, depth = arg[0], m2d[0], depth[0]
        bad |= ((arg - arg.round()).abs() < _CEIL_MARGIN).any(-1)
        bad |= (depth - _NEAR).abs() < _DEPTH_MARGIN
        r = torch.ceil(arg)
        edges = torch.stack([m2d[:, 0] + r[:, 0], m2d[:, 0] - r[:, 0] - width,
                             m2d[:, 1] + r[:, 1], m2d[:, 1] - r[:, 1] - height], dim=-1)
        bad |= (depth > _NEAR) & ((edges.abs() < _EDGE_MARGIN).any(-1) | ~torch.isfinite(edges).all(-1))
    return bad


def inputs(ctx):
    p = ctx.params
    n, cams, width, height = p["gaussians"], p["cameras"], p["width"], p["height"]
    viewmats_all, ks_all = _cameras(ctx, ctx.world_size * cams, width, height)
    means, quats, scales = _draw_gaussians(ctx, n)
    for _ in range(200):
        bad = _fragile(means, quats, scales, viewmats_all, ks_all, width, height)
        if not bool(bad.any()):
            break
        new_means, new_quats, new_scales = _draw_gaussians(ctx, n)
        means = torch.where(bad[:, None], new_means, means)
        quats = torch.where(bad[:, None], new_quats, quats)
        scales = torch.where(bad[:, None], new_scales, scales)
    else:
        raise RuntimeError("could not draw Gaussians away from rounding thresholds")
    opacities = ctx.rand(n, dtype=torch.float32, low=0.1, high=0.9)
    colors = ctx.rand(n, 3, dtype=torch.float32)
    mine = slice(ctx.rank * cams, (ctx.rank + 1) * cams)
    return (means, quats, scales, opacities, colors, viewmats_all[mine].contiguous(), ks_all[mine].contiguous(),
            width, height, _EPS2D, _NEAR, _FAR, "pinhole")


@torch.no_grad()
def reference(means, quats, scales, opacities, colors, viewmats, Ks, image_width, image_height, eps2d=0.3,
              near_plane=0.01, far_plane=1e10, camera_model="pinhole"):
    if camera_model != "pinhole":
        raise ValueError("only the pinhole camera model is supported")
    world_size = dist.get_world_size()
    rank = dist.get_rank()
    device = means.device
    n, cams = means.shape[0], viewmats.shape[0]
    # Gaussian counts and cameras of every rank.
    count = torch.tensor([n], dtype=torch.int64, device=device)
    counts = count.new_empty(world_size)
    dist.all_gather_into_tensor(counts, count)
    cam_data = torch.cat([viewmats.reshape(cams, 16), Ks.reshape(cams, 9)], dim=1).contiguous()
    all_cams = cam_data.new_empty(world_size * cams, 25)
    dist.all_gather_into_tensor(all_cams, cam_data)
    all_viewmats, all_ks = all_cams[:, :16].reshape(-1, 4, 4), all_cams[:, 16:].reshape(-1, 3, 3)
    # Project into every camera, keep visible pairs (camera-major).
    radius_arg, means2d, depths, conics = _project(means, quats, scales, all_viewmats, all_ks, image_width,
                                                   image_height, eps2d)
    radii = _radii(radius_arg, means2d, depths, image_width, image_height, near_plane, far_plane)
    cam_ids, gauss_ids = torch.where((radii > 0).all(dim=-1))
    dest = cam_ids // cams
    send_counts = torch.bincount(dest, minlength=world_size)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)
    send_splits, recv_splits = send_counts.tolist(), recv_counts.tolist()
    offsets = torch.cumsum(counts, 0) - counts            # gsplat: offset of the receiving rank
    ints = torch.stack([cam_ids - dest * cams, gauss_ids + offsets[dest],
                        radii[cam_ids, gauss_ids, 0].long(), radii[cam_ids, gauss_ids, 1].long()], dim=1)
    floats = torch.cat([means2d[cam_ids, gauss_ids], depths[cam_ids, gauss_ids, None],
                        conics[cam_ids, gauss_ids], opacities[gauss_ids, None], colors[gauss_ids]], dim=1)
    total = sum(recv_splits)
    got_ints = ints.new_empty(total, 4)
    dist.all_to_all_single(got_ints, ints.contiguous(), recv_splits, send_splits)
    got_floats = floats.new_empty(total, floats.shape[1])
    dist.all_to_all_single(got_floats, floats.contiguous(), recv_splits, send_splits)
    return (got_ints[:, 0].contiguous(), got_ints[:, 1].contiguous(), got_ints[:, 2:].to(torch.int32),
            got_floats[:, 0:2].contiguous(), got_floats[:, 2].contiguous(), got_floats[:, 3:6].contiguous(),
            got_floats[:, 6].contiguous(), got_floats[:, 7:10].contiguous())


def traffic(params, world_size, itemsize):
    """fp32/int. Assumes about half of the (camera, Gaussian) pairs are visible:
    each rank sends (W-1)/W of them, 14 four-byte words per pair; HBM: the
    per-camera projection writes and reads ~30 words per pair; ~250 FLOPs per pair."""
    pairs = world_size * params["cameras"] * params["gaussians"]
    visible = pairs / 2
    return {"link_bytes": (world_size - 1) / world_size * visible * 14 * 4,
            "hbm_bytes": pairs * 30 * 4 + params["gaussians"] * 14 * 4,
            "flops": 250 * pairs}
