"""MoE expert-parallel dispatch: permute tokens expert-major, all-to-all them, regroup by local expert.

Signature ``reference(hidden_states, expert_mask, num_experts, input_splits,
output_splits, num_global_tokens_per_local_expert, group)``; ``group`` None = WORLD.

E = ``num_experts`` experts, E/W consecutive experts per rank (rank d owns
experts d*E/W .. (d+1)*E/W - 1; local expert l of rank d is expert d*E/W + l).
Rank r holds:

* ``hidden_states`` h_r: (T, H), working dtype (any leading shape; it is used as
  (-1, H));
* ``expert_mask``: (E, K, T) fp32 one-hot, expert_mask[e, j, t] = 1 iff the j-th
  choice of token t is expert e (the K choices of a token are distinct);
* ``input_splits``: list of W ints, [d] = number of (token, expert) pairs of rank
  r whose expert is owned by rank d;
* ``output_splits``: list of W ints, [s] = number of pairs of rank s whose expert
  is owned by rank r;
* ``num_global_tokens_per_local_expert`` C_r: int64 (W, E/W), C_r[s, l] = number
  of tokens of rank s routed to local expert l of rank r.

Steps: routing_map = expert_mask.sum(dim=1), shape (E, T). The permutation
lists, for e = 0..E-1 in order, the tokens t (ascending) with routing_map[e, t]
!= 0: int64 (T*K,) token ids, "expert-major". The permuted rows h_r[perm] are
sent with a variable all-to-all (``input_splits`` out, ``output_splits`` in);
the received buffer holds, per source rank s (ascending), that rank's rows for
local expert 0, 1, ... (chunk sizes C_r[s, l]); these W*E/W chunks are reordered
to local-expert-major order: (l = 0: s = 0..W-1), (l = 1: s = 0..W-1), ...

Return on rank r the tuple (rows (sum(output_splits), H) in the working dtype
in (local expert, source rank) order, routing_map fp32 (E, T), permutation int64
(T*K,), torch.Size([T, H])). All leaves compare exactly.

Fix in pkb: the original used synthetic even splits that sent rows to ranks not
owning their experts; here the splits and counts are the real ones implied by
every rank's mask (drawn from a shared seed, so the builder needs no
communication), and the masks are built vectorised (top-K of random keys).
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F

ID = 28
NAME = "moe_pre_all2all"
CATEGORY = "expert-parallel"
ORIGIN = "VeOmni token_pre_all2all"
WORLD_SIZE = "experts % W == 0 (8 experts: W in {2, 4, 8})"
SIZES = {
    "tiny": {"experts": 8, "top_k": 2, "tokens": 16, "hidden": 8},
    "default": {"experts": 8, "top_k": 2, "tokens": 1024, "hidden": 1024},
    "large": {"experts": 8, "top_k": 2, "tokens": 16384, "hidden": 4096},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": (
        "hidden_states", "expert_mask", "num_experts", "input_splits", "output_splits",
        "num_global_tokens_per_local_expert", "group",
    ),
    "args": (
        "bf16[1024, 1024]", "fp32[8, 2, 1024]", "8", "[1024, 1024]", "[1024, 1024]", "int64[2, 4]", "None",
    ),
    "out": ("bf16[2048, 1024]", "fp32[8, 1024]", "int64[2048]", "Size([1024, 1024])"),
}
# Why this problem differs from the original there (docs/pkb-parity.md).
PKB_DIFFERENCES = {
    "input_splits": (
        "the real splits implied by the random routing masks (the original's were synthetic even splits that "
        "ignored expert ownership)"
    ),
    "output_splits": (
        "the real splits implied by the random routing masks (the original's were synthetic even splits that "
        "ignored expert ownership)"
    ),
    "out[0]": "its row count is the sum of the real output splits, which depend on the routing",
}
# No CUDA-graph capture: the reference syncs with the host; data-dependent shapes: masked_select and split sizes read back with .tolist().
CUDA_GRAPH = False


def world_size_error(world_size, params):
    if params["experts"] % world_size:
        return f"{params['experts']} experts cannot be split evenly over {world_size} ranks"
    return None


def inputs(ctx):
    p = ctx.params
    w, r, e, k, t = ctx.world_size, ctx.rank, p["experts"], p["top_k"], p["tokens"]
    nle = e // w
    # Every rank's routing, from the shared seed: (W, T, K) distinct experts.
    chosen = torch.topk(ctx.rand(w, t, e, dtype=torch.float32, shared=True), k, dim=2).indices
    counts = F.one_hot(chosen, e).sum(dim=(1, 2))  # (W, E) int64
    mask = F.one_hot(chosen[r], e).to(torch.float32).permute(2, 1, 0).contiguous()
    mine = counts[:, r * nle:(r + 1) * nle].contiguous()
    input_splits = counts[r].view(w, nle).sum(dim=1).tolist()
    output_splits = mine.sum(dim=1).tolist()
    h = ctx.randn(t, p["hidden"])
    return (h, mask, e, input_splits, output_splits, mine, None)


@torch.no_grad()
def reference(hidden_states, expert_mask, num_experts, input_splits, output_splits,
              num_global_tokens_per_local_expert, group=None):
    group = group or dist.group.WORLD
    world = dist.get_world_size(group)
    hidden = hidden_states.size(-1)
    h = hidden_states.reshape(-1, hidden)
    shape = h.shape
    routing_map = expert_mask.sum(dim=1)  # (E, T)
    tokens = torch.arange(h.size(0), device=h.device).expand(num_experts, -1)
    perm = tokens.masked_select(routing_map.bool())
    send = h.index_select(0, perm)
    in_splits = [int(v) for v in input_splits]
    out_splits = [int(v) for v in output_splits]
    if sum(in_splits) != send.size(0):
        raise RuntimeError("input_splits do not match the routed tokens")
    recv = torch.empty((sum(out_splits), hidden), dtype=h.dtype, device=h.device)
    dist.all_to_all_single(recv, send, output_split_sizes=out_splits,
                           input_split_sizes=in_splits, group=group)
    # (source, local expert) chunks -> (local expert, source)
    nle = num_experts // world
    chunks = torch.split(recv, num_global_tokens_per_local_expert.reshape(-1).tolist(), dim=0)
    order = [s * nle + l for l in range(nle) for s in range(world)]
    rows = torch.cat([chunks[i] for i in order], dim=0)
    return rows, routing_map, perm, shape


def traffic(params, world_size, itemsize):
    """T*K rows of H per rank, (W-1)/W of them to other ranks on average;
    gather (read T*K rows, write them), send buffer read, receive buffer
    written, regroup read + write: ~5 T*K*H elements through HBM."""
    rows = params["tokens"] * params["top_k"]
    nbytes = rows * params["hidden"] * itemsize
    return {
        "link_bytes": (world_size - 1) / world_size * nbytes,
        "hbm_bytes": 5 * nbytes,
        "flops": 0,
    }
