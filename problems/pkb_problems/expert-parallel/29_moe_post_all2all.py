"""MoE expert-parallel combine: regroup by source rank, all-to-all back, weight and scatter-add per token.

Signature ``reference(expert_outputs, routing_weights, selected_experts,
num_experts, input_splits, output_splits, num_global_tokens_per_local_expert,
routing_map, local_input_permutation_mapping, org_hidden_states_shape, group)``;
``group`` None = WORLD. The inverse of problem 28.

E = ``num_experts`` experts, E/W consecutive experts per rank (rank d owns
experts d*E/W .. (d+1)*E/W - 1). Rank r holds, for its T tokens with K distinct
experts each:

* ``selected_experts``: int64 (T, K), the experts of each token;
* ``routing_weights``: (T, K) working dtype, the weight of each choice;
* ``routing_map``: bool (E, T), routing_map[e, t] iff e is among token t's experts;
* ``local_input_permutation_mapping`` perm: int64 (T*K,), the tokens t with
  routing_map[e, t], listed for e = 0..E-1 in order, t ascending within e;
* ``input_splits`` (list of W ints, [d] = pairs of rank r whose expert rank d
  owns), ``output_splits`` ([s] = pairs of rank s whose expert rank r owns) and
  ``num_global_tokens_per_local_expert`` C_r int64 (W, E/W) ([s, l] = tokens of
  rank s routed to local expert l of rank r), as in problem 28;
* ``expert_outputs``: (sum(output_splits), H) working dtype, rows in
  (local expert l, source rank s) order, chunk sizes C_r[s, l];
* ``org_hidden_states_shape``: torch.Size([T, H]).

Steps: reorder the chunks of ``expert_outputs`` to (source s, local expert l)
order; variable all-to-all back (rank r sends ``output_splits``[s] rows to s and
receives ``input_splits``[d] rows from d), giving T*K rows aligned with perm.
Row i belongs to token perm[i] and to the expert e whose segment of perm holds
i; scale it by the routing weight of (perm[i], e) (rounded to the working
dtype), then scatter-add it into a zero (T, H) tensor at row perm[i].
Return that tensor, shape ``org_hidden_states_shape``, working dtype.

Fix in pkb: the original used synthetic even splits that sent rows to ranks not
owning their experts; here the routing of all ranks is drawn from a shared seed
and the splits and counts are the real ones, and the inputs are built
vectorised.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F

ID = 29
NAME = "moe_post_all2all"
CATEGORY = "expert-parallel"
ORIGIN = "VeOmni tokens_post_all2all"
WORLD_SIZE = "experts % W == 0 (8 experts: W in {2, 4, 8})"
SIZES = {
    "tiny": {"experts": 8, "top_k": 2, "tokens": 16, "hidden": 8},
    "default": {"experts": 8, "top_k": 2, "tokens": 1024, "hidden": 1024},
    "large": {"experts": 8, "top_k": 2, "tokens": 16384, "hidden": 4096},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": (
        "expert_outputs", "routing_weights", "selected_experts", "num_experts", "input_splits",
        "output_splits", "num_global_tokens_per_local_expert", "routing_map",
        "local_input_permutation_mapping", "org_hidden_states_shape", "group",
    ),
    "args": (
        "bf16[2048, 1024]", "bf16[1024, 2]", "int64[1024, 2]", "8", "[1024, 1024]", "[1024, 1024]",
        "int64[2, 4]", "bool[8, 1024]", "int64[2048]", "Size([1024, 1024])", "None",
    ),
    "out": "bf16[1024, 1024]",
}
# Why this problem differs from the original there (docs/pkb-parity.md).
PKB_DIFFERENCES = {
    "expert_outputs": "one row per routed (token, expert) pair received under the real, random routing",
    "input_splits": (
        "the real splits implied by the random routing (the original's were synthetic even splits)"
    ),
    "output_splits": (
        "the real splits implied by the random routing (the original's were synthetic even splits)"
    ),
}
# No CUDA-graph capture: the reference syncs with the host; data-dependent shapes: masked_select and split sizes read back with .tolist().
CUDA_GRAPH = False


def world_size_error(world_size, params):
    if params["experts"] % world_size:
        return f"{params['experts']} experts cannot be split evenly over {world_size} ranks"
    return None


def inputs(ctx):
    p = ctx.params
    w, r, e, k, t, hdim = ctx.world_size, ctx.rank, p["experts"], p["top_k"], p["tokens"], p["hidden"]
    nle = e // w
    chosen = torch.topk(ctx.rand(w, t, e, dtype=torch.float32, shared=True), k, dim=2).indices
    counts = F.one_hot(chosen, e).sum(dim=(1, 2))  # (W, E)
    selected = chosen[r].contiguous()  # (T, K)
    routing_map = F.one_hot(selected, e).sum(dim=1).T.bool().contiguous()  # (E, T)
    perm = torch.arange(t, device=ctx.device).expand(e, t).masked_select(routing_map)
    mine = counts[:, r * nle:(r + 1) * nle].contiguous()
    input_splits = counts[r].view(w, nle).sum(dim=1).tolist()
    output_splits = mine.sum(dim=1).tolist()
    weights = torch.softmax(ctx.randn(t, k, dtype=torch.float32), dim=1).to(ctx.dtype)
    expert_outputs = ctx.randn(sum(output_splits), hdim)
    return (expert_outputs, weights, selected, e, input_splits, output_splits, mine,
            routing_map, perm, torch.Size([t, hdim]), None)


@torch.no_grad()
def reference(expert_outputs, routing_weights, selected_experts, num_experts, input_splits,
              output_splits, num_global_tokens_per_local_expert, routing_map,
              local_input_permutation_mapping, org_hidden_states_shape, group=None):
    group = group or dist.group.WORLD
    world = dist.get_world_size(group)
    nle = num_experts // world
    # (local expert, source) chunks -> (source, local expert)
    chunks = torch.split(expert_outputs, num_global_tokens_per_local_expert.T.reshape(-1).tolist(), dim=0)
    order = [l * world + s for s in range(world) for l in range(nle)]
    send = torch.cat([chunks[i] for i in order], dim=0)
    in_splits = [int(v) for v in output_splits]
    out_splits = [int(v) for v in input_splits]
    recv = torch.empty((sum(out_splits), send.size(1)), dtype=send.dtype, device=send.device)
    dist.all_to_all_single(recv, send, output_split_sizes=out_splits,
                           input_split_sizes=in_splits, group=group)
    # weight of each (expert, token) pair, in the expert-major order of perm
    dense = torch.zeros((routing_weights.size(0), num_experts), dtype=routing_weights.dtype,
                        device=routing_weights.device)
    dense.scatter_add_(1, selected_experts, routing_weights)
    pair_weight = dense.T.contiguous().masked_select(routing_map.bool())
    scaled = recv * pair_weight.unsqueeze(-1)
    out = torch.zeros(org_hidden_states_shape, dtype=scaled.dtype, device=scaled.device)
    out.index_add_(0, local_input_permutation_mapping, scaled)
    return out


def traffic(params, world_size, itemsize):
    """T*K rows of H per rank, (W-1)/W of them to other ranks on average;
    regroup read + write, receive write, scale read + write, scatter-add
    read + write of T*K rows, output write: ~7 T*K*H elements; one multiply and
    one add per received element."""
    rows = params["tokens"] * params["top_k"]
    nbytes = rows * params["hidden"] * itemsize
    return {
        "link_bytes": (world_size - 1) / world_size * nbytes,
        "hbm_bytes": 7 * nbytes,
        "flops": 2 * rows * params["hidden"],
    }
