"""Wide EP fused MoE forward (E = 2W, two experts per rank): route, dispatch, SwiGLU expert, combine.

Signature ``reference(hidden_states, gate_weight, gate_bias, gate_proj, up_proj,
down_proj, num_experts, top_k, group)``; ``group`` None = WORLD. Problem 31 with
``num_experts`` E = 2W: rank d hosts experts 2d and 2d+1 (G = W ranks in the
group, E/G = 2 local experts; local expert l of group rank d is expert 2d + l).
K = ``top_k`` = 2. Rank r holds, in the working dtype:

* ``hidden_states`` x_r: (T, H), its own tokens;
* ``gate_weight`` (E, H) and ``gate_bias`` (E,): the router, identical on all ranks;
* ``gate_proj``, ``up_proj``: ``torch.nn.Linear(H, I)`` with bias, and
  ``down_proj``: ``torch.nn.Linear(I, H)`` with bias: this rank's expert MLP
  (different on every rank); the one MLP serves every local expert of the rank.

Computation on rank r (all in the working dtype):

1. probs = softmax(x_r @ gate_weight^T + gate_bias) (T, E); (weights, experts) =
   torch.topk(probs, K): K distinct experts per token and their probabilities
   (not renormalised).
2. c_r[e] = number of tokens of rank r routed to e; the (E,) counts of all ranks
   of the group are all-gathered into C (G, E). Rank r sends send[d] = sum of
   c_r over group rank d's experts rows to d and receives recv[s] = sum of C[s]
   over its own experts from group rank s.
3. Dispatch: the (expert, token) pairs of rank r, sorted by expert then token,
   give the rows x_r[t] to send (so each destination gets its rows ordered by
   local expert, then token); variable all-to-all within the group. The
   received rows (per source s ascending, per local expert l, C[s, g*E/G + l]
   rows, g = this rank's group rank) are regrouped to (local expert, source) order.
4. Expert: y = down_proj(silu(gate_proj(z)) * up_proj(z)) for every received row z.
5. Combine: regroup y back to (source, local expert) order, variable all-to-all
   back (the inverse splits), so rank r gets one row per (expert, token) pair in
   the order of step 3. Each row is multiplied by that pair's routing weight and
   added into row t of a zero (T, H) output.

Return on rank r the (T, H) output in the working dtype.

Fix in pkb: the router is shared by all ranks (the original drew one per rank).
The inputs are built so that every token's router logits are separated by gaps
>= 0.25 (random expert order; x_r = noise orthogonal to the router rows + a
component in their span), so the top-K choice does not depend on rounding: the
router rows are orthonormal (logits ~ O(1), where the original's N(0, 1) router
gave logits of std sqrt(H) and a one-hot softmax). A shared per-expert
popularity skews the routing, so expert loads and all-to-all splits are uneven.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F

ID = 50
NAME = "moe_ep_wide"
CATEGORY = "expert-parallel"
ORIGIN = "VeOmni MoE (wide EP: two experts per rank)"
WORLD_SIZE = "any W >= 2 (E = 2W experts)"
SIZES = {
    "tiny": {"top_k": 2, "tokens": 16, "hidden": 16, "inter": 8},
    "default": {"top_k": 2, "tokens": 1024, "hidden": 1024, "inter": 128},
    "large": {"top_k": 2, "tokens": 8192, "hidden": 4096, "inter": 1024},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": (
        "hidden_states", "gate_weight", "gate_bias", "gate_proj", "up_proj", "down_proj", "num_experts",
        "top_k", "group",
    ),
    "args": (
        "bf16[1024, 1024]", "bf16[4, 1024]", "bf16[4]", "Linear(1024, 128, bf16)", "Linear(1024, 128, bf16)",
        "Linear(128, 1024, bf16)", "4", "2", "None",
    ),
    "out": "bf16[1024, 1024]",
}
# No CUDA-graph capture: the reference syncs with the host; routing-dependent split sizes read back with .tolist().
CUDA_GRAPH = False


def _experts(world_size):
    return 2 * world_size


def world_size_error(world_size, params):
    e = _experts(world_size)
    if e > params["hidden"]:
        return f"{e} experts exceed the hidden size {params['hidden']} (router rows must be orthonormal)"
    if params["top_k"] > e:
        return f"top_k {params['top_k']} exceeds the {e} experts"
    return None


# ---------------------------------------------------------------- inputs

_SKEW = 0.5  # std of the shared expert popularity: uneven expert loads


def _separated_logits(ctx, tokens, experts):
    """(tokens, experts) fp32 logits: each row a random expert order (skewed by
    a shared popularity of std _SKEW) mapped to strictly decreasing levels, gaps
    in [0.25, 1)."""
    popularity = ctx.randn(experts, dtype=torch.float32, shared=True, scale=_SKEW)
    u = ctx.rand(tokens, experts, dtype=torch.float32).clamp_(1e-6, 1 - 1e-6)
    order = torch.argsort(popularity - torch.log(-torch.log(u)), dim=1, descending=True)
    gaps = ctx.rand(tokens, experts - 1, dtype=torch.float32, low=0.25, high=1.0)
    top = ctx.rand(tokens, 1, dtype=torch.float32, low=0.0, high=2.0)
    levels = torch.cat([top, top - torch.cumsum(gaps, dim=1)], dim=1)
    return torch.empty_like(levels).scatter_(1, order, levels)


def _router_and_tokens(ctx, tokens, hidden, experts):
    """Shared router with orthonormal rows and tokens whose logits are exactly
    the separated logits above (up to rounding)."""
    q = torch.linalg.qr(ctx.randn(hidden, experts, dtype=torch.float32, shared=True)).Q  # (H, E)
    bias = ctx.randn(experts, dtype=torch.float32, shared=True, scale=0.5)
    target = _separated_logits(ctx, tokens, experts)
    noise = ctx.randn(tokens, hidden, dtype=torch.float32)
    x = noise - (noise @ q) @ q.T + (target - bias) @ q.T
    return x.to(ctx.dtype), q.T.contiguous().to(ctx.dtype), bias.to(ctx.dtype)


def _linear(ctx, fan_in, fan_out):
    """nn.Linear(fan_in, fan_out) on ctx.device in ctx.dtype, weights from ctx's
    generator (no global RNG), frozen."""
    lin = torch.nn.utils.skip_init(torch.nn.Linear, fan_in, fan_out, device=ctx.device, dtype=ctx.dtype)
    lin.requires_grad_(False)
    lin.weight.copy_(ctx.randn(fan_out, fan_in, scale=fan_in ** -0.5))
    lin.bias.copy_(ctx.randn(fan_out, scale=0.1))
    return lin


def inputs(ctx):
    p = ctx.params
    e, h, i = _experts(ctx.world_size), p["hidden"], p["inter"]
    x, gate_weight, gate_bias = _router_and_tokens(ctx, p["tokens"], h, e)
    return (x, gate_weight, gate_bias, _linear(ctx, h, i), _linear(ctx, h, i), _linear(ctx, i, h),
            e, p["top_k"], None)


# ---------------------------------------------------------------- reference


def _all_to_all(rows, send_splits, recv_splits, group):
    out = torch.empty((sum(recv_splits), rows.size(1)), dtype=rows.dtype, device=rows.device)
    dist.all_to_all_single(out, rows.contiguous(), output_split_sizes=recv_splits,
                           input_split_sizes=send_splits, group=group)
    return out


def _reorder_chunks(rows, sizes, order):
    chunks = torch.split(rows, sizes, dim=0)
    return torch.cat([chunks[i] for i in order], dim=0)


def _expert(z, gate_proj, up_proj, down_proj):
    return down_proj(F.silu(gate_proj(z)) * up_proj(z))


@torch.no_grad()
def reference(hidden_states, gate_weight, gate_bias, gate_proj, up_proj, down_proj,
              num_experts, top_k, group=None):
    group = group or dist.group.WORLD
    world = dist.get_world_size(group)
    me = dist.get_rank(group)
    nle = num_experts // world
    x = hidden_states.reshape(-1, hidden_states.size(-1))
    tokens = x.size(0)

    # 1. route
    probs = torch.softmax(F.linear(x, gate_weight, gate_bias), dim=-1)
    weights, experts = torch.topk(probs, top_k, dim=-1)
    onehot = F.one_hot(experts, num_experts)  # (T, K, E)

    # 2. counts and splits
    counts = onehot.sum(dim=(0, 1))  # (E,) int64
    gathered = torch.empty(world * num_experts, dtype=counts.dtype, device=counts.device)
    dist.all_gather_into_tensor(gathered, counts, group=group)
    per_local = gathered.view(world, num_experts)[:, me * nle:(me + 1) * nle]  # (W, E/W)
    send_splits = counts.view(world, nle).sum(dim=1).tolist()
    recv_splits = per_local.sum(dim=1).tolist()

    # 3. dispatch
    routing_map = onehot.sum(dim=1).T.bool()  # (E, T)
    perm = torch.arange(tokens, device=x.device).expand(num_experts, tokens).masked_select(routing_map)
    recv = _all_to_all(x.index_select(0, perm), send_splits, recv_splits, group)
    rows = _reorder_chunks(recv, per_local.reshape(-1).tolist(),
                           [s * nle + l for l in range(nle) for s in range(world)])

    # 4. expert MLP
    y = _expert(rows, gate_proj, up_proj, down_proj)

    # 5. combine
    back = _reorder_chunks(y, per_local.T.reshape(-1).tolist(),
                           [l * world + s for s in range(world) for l in range(nle)])
    returned = _all_to_all(back, recv_splits, send_splits, group)
    dense = torch.zeros((tokens, num_experts), dtype=weights.dtype, device=weights.device)
    dense.scatter_add_(1, experts, weights)
    pair_weight = dense.T.contiguous().masked_select(routing_map)
    out = torch.zeros((tokens, returned.size(1)), dtype=returned.dtype, device=returned.device)
    out.index_add_(0, perm, returned * pair_weight.unsqueeze(-1))
    return out


def traffic(params, world_size, itemsize):
    """Per rank, with G = W ranks in the EP group: dispatch and combine each move
    T*K rows of H, (G-1)/G of them over links, plus the all-gather of E int64
    counts. HBM (approximate): x read and output written (2 T H), ~8 T K H for
    gather / send / receive / regroup in both directions, ~2 T K H + 5 T K I in
    the MLP, 3 H I weights. FLOPs: router 2 T H E, MLP 6 T K H I, combine 2 T K H."""
    t, k, h, i, e = params["tokens"], params["top_k"], params["hidden"], params["inter"], _experts(world_size)
    g = world_size
    rows = t * k
    return {
        "link_bytes": 2 * (g - 1) / g * rows * h * itemsize + (g - 1) * e * 8,
        "hbm_bytes": itemsize * (2 * t * h + 10 * rows * h + 5 * rows * i + 3 * h * i),
        "flops": 2 * t * h * e + 6 * rows * h * i + 2 * rows * h,
    }
