"""DeePMD-kit Kalman-filter optimizer step: global gain by all-reduce, per-block weight and covariance updates, all-gather of weights.

Signature ``reference(H, error, weights, P, kalman_lambda, kalman_nue=0.9987)``.
Everything is fp64 (fixed dtype, whatever the working dtype).

Each rank holds B blocks (i = 0..B-1) of size n: ``H`` and ``weights`` are lists
of B tensors of shape (n, 1), ``P`` a list of B symmetric positive-definite
(n, n) tensors, ``error`` a 0-dim tensor (this rank's error), and the Python
floats ``kalman_lambda`` (lam) and ``kalman_nue`` (nu).

1. s = sum over all ranks and blocks of (lam + H_i^T P_i H_i) (each term (1, 1);
   lam is added B*W times); one all-reduce; A = 1 / s.
2. For each block, with the P_i of the call's start: K_i = P_i H_i (n, 1);
   w_i' = w_i + A * error * K_i; P_i' = (P_i - A * K_i K_i^T) / lam.
3. All-gather the updated weights of every rank (block shapes exchanged with
   ``all_gather_object``, values with ``all_gather`` of each rank's flattened
   blocks).

Return on every rank the tuple (list of W*B tensors (n, 1): rank 0's B updated
weight blocks, then rank 1's, ...; list of this rank's B updated P_i' (n, n);
lam' = nu * lam + 1 - nu as a 0-dim fp64 tensor), in new tensors: the input
tensors are unchanged after the call. (The original rebinds the elements of the
``weights`` and ``P`` lists it was given, which changes no tensor; a solution
may do the same.)

Fixes in pkb: P is a random SPD matrix (0.5 I + U U^T / 32, U (n, 32) normal)
instead of the identity, and lam is drawn per trial in [0.97, 0.99) (the
original fixed 0.98). H_i ~ N(0, 0.01^2), w_i ~ N(0, 1), error ~ N(0, 1) as in
the original.
"""
import torch
import torch.distributed as dist

ID = 63
NAME = "deepmd_kalman_filter_optimizer"
CATEGORY = "other"
ORIGIN = "DeePMD-kit Kalman-filter optimizer (distributed)"
WORLD_SIZE = "any W >= 2"
SIZES = {
    "tiny": {"blocks": 2, "block": 16},
    "default": {"blocks": 8, "block": 1024},
    "large": {"blocks": 8, "block": 4096},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("H", "error", "weights", "P", "kalman_lambda", "kalman_nue"),
    "args": (
        "[fp64[1024, 1] ×8]", "fp64[]", "[fp64[1024, 1] ×8]", "[fp64[1024, 1024] ×8]", "0.98", "0.9987",
    ),
    "out": ("[fp64[1024, 1] ×16]", "[fp64[1024, 1024] ×8]", "fp64[]"),
}
# Why this problem differs from the original there (docs/pkb-parity.md).
PKB_DIFFERENCES = {
    "kalman_lambda": "drawn per trial in [0.97, 0.99) instead of the constant 0.98",
}
# No CUDA-graph capture: the reference syncs with the host; all_gather_object (host pickling).
CUDA_GRAPH = False

_RANK_U = 32  # rank of the random part of P


def inputs(ctx):
    p = ctx.params
    b, n = p["blocks"], p["block"]
    f64 = torch.float64
    h = ctx.randn(b, n, 1, dtype=f64, scale=0.01)
    w = ctx.randn(b, n, 1, dtype=f64)
    u = ctx.randn(b, n, _RANK_U, dtype=f64)
    cov = torch.baddbmm(torch.eye(n, dtype=f64, device=ctx.device).expand(b, n, n), u, u.transpose(1, 2),
                        beta=0.5, alpha=1.0 / _RANK_U)
    error = ctx.randn(1, dtype=f64).reshape(())
    lam = float(ctx.rand(1, dtype=f64, shared=True, low=0.97, high=0.99))
    return (list(h.unbind(0)), error, [t.clone() for t in w.unbind(0)], [t.clone() for t in cov.unbind(0)],
            lam, 0.9987)


@torch.no_grad()
def reference(H, error, weights, P, kalman_lambda, kalman_nue=0.9987):
    dtype, device = weights[0].dtype, weights[0].device
    lam = torch.as_tensor(kalman_lambda, dtype=dtype, device=device)
    err = error.to(device=device, dtype=dtype)

    total = torch.zeros((1, 1), dtype=dtype, device=device)
    for h, p in zip(H, P):
        total = total + (lam + h.T @ (p @ h))
    dist.all_reduce(total)
    a = 1.0 / total

    weights, P = list(weights), list(P)
    for i in range(len(weights)):
        k = P[i] @ H[i]
        weights[i] = weights[i] + a * err * k
        P[i] = torch.addmm(P[i], a * k, k.T, alpha=-1.0).div_(lam)

    shapes = [None] * dist.get_world_size()
    dist.all_gather_object(shapes, [t.shape[0] for t in weights])
    flat = torch.cat([t.reshape(-1) for t in weights])
    gathered = [torch.empty(sum(s), dtype=dtype, device=device) for s in shapes]
    dist.all_gather(gathered, flat)
    all_weights = [blk.reshape(-1, 1) for g, s in zip(gathered, shapes) for blk in torch.split(g, s)]

    nue = torch.as_tensor(kalman_nue, dtype=dtype, device=device)
    return all_weights, P, nue * lam + 1 - nue


def traffic(params, world_size, itemsize):
    """fp64 throughout (itemsize ignored). Links: the 8-byte all-reduce, the
    small shape exchange (ignored) and the all-gather of B*n weights
    ((W-1) B n * 8 bytes sent). HBM: each P_i read three times (H^T P H, K = P H,
    the rank-1 update) and written once. FLOPs per block: 2 n^2 (P H) twice,
    2 n^2 rank-1 update, n^2 scaling."""
    b, n = params["blocks"], params["block"]
    return {
        "link_bytes": 2 * (world_size - 1) / world_size * 8 + (world_size - 1) * b * n * 8,
        "hbm_bytes": 4 * b * n * n * 8,
        "flops": 7 * b * n * n,
    }
