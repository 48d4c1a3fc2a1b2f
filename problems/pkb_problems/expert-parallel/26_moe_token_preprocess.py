"""MoE expert-parallel preprocessing: token counts, all-to-all splits and per-expert totals.

Signature ``reference(expert_mask, num_experts, group)``; ``group`` None = WORLD.

E = ``num_experts`` experts are spread over the W ranks of the group, E/W
consecutive experts per rank (rank d owns experts d*E/W .. (d+1)*E/W - 1).
Each rank r holds ``expert_mask`` of shape (E, K, T), fp32 (fixed dtype), laid
out (expert, slot, token): a one-hot encoding of each of its T tokens' top-K
expert choices (expert_mask[e, j, t] = 1 iff the j-th choice of token t is e;
the K choices of a token are distinct experts). Let c_r[e] = sum over (j, t) of
expert_mask[e, j, t] (tokens of rank r routed to expert e).

Return on rank r a tuple of four tensors, all on the CPU:

* ``input_splits``: int64 (W,), [d] = sum of c_r over the experts owned by rank d
  (rows rank r will send to rank d);
* ``output_splits``: int64 (W,), [s] = sum of c_s over the experts owned by rank r
  (rows rank r will receive from rank s);
* ``counts``: fp32 (W, E/W), [s, l] = c_s[r*E/W + l];
* ``totals``: fp32 (E/W,), column sums of ``counts`` (tokens per local expert).

One all-gather of the (E,) count vectors. All outputs are integers and compare
exactly. The two splits may also be lists of W Python ints: PKB's first published
commit (dab0830) returned them so, its later ones as int64 tensors, and either form
is the same answer (pkb_core.judge.check). Fix in pkb: the original drew the K choices independently, so a slot
could repeat an expert; here they are distinct (top-K of random keys).
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F

ID = 26
NAME = "moe_token_preprocess"
CATEGORY = "expert-parallel"
ORIGIN = "VeOmni MoE preprocess"
WORLD_SIZE = "experts % W == 0 (8 experts: W in {2, 4, 8})"
SIZES = {
    "tiny": {"experts": 8, "top_k": 2, "tokens": 16},
    "default": {"experts": 8, "top_k": 2, "tokens": 1024},
    "large": {"experts": 8, "top_k": 2, "tokens": 262144},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("expert_mask", "num_experts", "group"),
    "args": ("fp32[8, 2, 1024]", "8", "None"),
    "out": ("int64[2]", "int64[2]", "fp32[2, 4]", "fp32[4]"),
}
# No CUDA-graph capture: the reference syncs with the host; returns CPU tensors (device-to-host copies).
CUDA_GRAPH = False


def world_size_error(world_size, params):
    if params["experts"] % world_size:
        return f"{params['experts']} experts cannot be split evenly over {world_size} ranks"
    return None


def inputs(ctx):
    p = ctx.params
    keys = ctx.rand(p["tokens"], p["experts"], dtype=torch.float32)
    chosen = torch.topk(keys, p["top_k"], dim=1).indices  # (T, K), distinct experts
    mask = F.one_hot(chosen, p["experts"]).to(torch.float32).permute(2, 1, 0).contiguous()
    return (mask, p["experts"], None)


@torch.no_grad()
def reference(expert_mask, num_experts, group=None):
    group = group or dist.group.WORLD
    world = dist.get_world_size(group)
    me = dist.get_rank(group)
    local_experts = num_experts // world
    counts = expert_mask.sum(dim=(1, 2))  # (E,)
    input_splits = counts.view(world, local_experts).sum(dim=1)
    gathered = torch.empty(world * num_experts, dtype=counts.dtype, device=counts.device)
    dist.all_gather_into_tensor(gathered, counts.contiguous(), group=group)
    mine = gathered.view(world, num_experts)[:, me * local_experts:(me + 1) * local_experts]
    output_splits = mine.sum(dim=1)
    return (
        input_splits.to(device="cpu", dtype=torch.int64),
        output_splits.to(device="cpu", dtype=torch.int64),
        mine.contiguous().cpu(),
        mine.sum(dim=0).cpu(),
    )


def traffic(params, world_size, itemsize):
    """All-gather of E fp32 counts (W-1 blocks sent); reads the fp32 mask once;
    one add per mask element."""
    e = params["experts"]
    n = e * params["top_k"] * params["tokens"]
    return {
        "link_bytes": (world_size - 1) * e * 4,
        "hbm_bytes": n * 4,
        "flops": n,
    }
