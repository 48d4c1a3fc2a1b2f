"""Target-token log-probabilities under top-k/top-p filtering, from vocab-parallel logits (NeMo-RL).

The vocabulary of V entries is split into W contiguous slices (rank r owns
[r·V/W, (r+1)·V/W)). There are T = B·S tokens, S = max(``seq``, W) rounded
up to a multiple of W.

Arguments on rank r:

- ``vocab_parallel_logits``: (B, S, V/W), working dtype: this rank's vocab
  slice of every token's logits.
- ``target``: (B, S) int64 in [0, V), identical on every rank.
- ``tp_group`` = None (WORLD), ``top_k`` (int), ``top_p`` (float).

For every token, over its full row x of V logits (in the working dtype):

1. top-k: keep the entries >= the k-th largest value (ties at the threshold are
   all kept);
2. top-p: sort the row ascending with the entries dropped by top-k set to
   -inf, take the softmax (in the working dtype) and its cumulative sum c; keep
   the entries with c > 1 - top_p, and always the largest;
3. filtered = x with every dropped entry set to -inf; in fp32,
   logprob = log_softmax(filtered)[target].

Return a new (B, S) fp32 tensor of these log-probabilities, identical on every
rank. The reference re-shards by one all-to-all (rank r gets the r-th
contiguous block of T/W flattened tokens with all V logits), filters, and
all-gathers the T/W results.

Inputs are built so that filtering is unambiguous in any dtype and summation
order: per token, the k top entries lie at least 0.5 above all others; 2 to
min(k-1, 9) of them survive top-p, each survivor >= 1.4x (in probability) any
dropped one, and the cumulative sums on both sides of the keep/drop boundary
are at least 20 % away from 1 - top_p; the target is always a survivor, so
every output is finite. (Equal logits occur only within the kept or within the
dropped set, where their order does not matter.)

Sizes (B, seq, V, top_k, top_p): tiny (1, 8, 48, 4, 0.9), default
(2, 8, 256, 10, 0.9) as in the original, large (4, 4096, 131072, 10, 0.9).

Fix in pkb: the original boosted the target logit by +8, giving it > 90 % of
the mass, so top-p kept only the target and every log-prob was exactly 0 (an
all-zero answer passed); its targets were a fixed formula. pkb draws shared
random targets and logits with several survivors and decision margins, as
above.
"""
import math

import torch
import torch.distributed as dist

ID = 82
NAME = "vocab_parallel_log_prob_topk"
CATEGORY = "vocab-parallel"
ORIGIN = "NeMo-RL distributed log-probs with top-k/top-p"
WORLD_SIZE = "V % W == 0"
SIZES = {
    "tiny": {"batch": 1, "seq": 8, "vocab": 48, "top_k": 4, "top_p": 0.9},
    "default": {"batch": 2, "seq": 8, "vocab": 256, "top_k": 10, "top_p": 0.9},
    "large": {"batch": 4, "seq": 4096, "vocab": 131072, "top_k": 10, "top_p": 0.9},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("vocab_parallel_logits", "target", "tp_group", "top_k", "top_p"),
    "args": ("bf16[2, 8, 128]", "int64[2, 8]", "None", "10", "0.9"),
    "out": "fp32[2, 8]",
}


def _seq(params, world_size):
    return -(-max(params["seq"], world_size) // world_size) * world_size


def world_size_error(world_size, params):
    if params["vocab"] % world_size:
        return f"the vocabulary ({params['vocab']}) must split evenly over W ranks"
    return None


def _filtered_logits_and_targets(ctx, batch, seq, vocab, top_k, top_p):
    """Logits whose top-k/top-p decisions have margins (see the docstring)."""
    w, r = ctx.world_size, ctx.rank
    tokens, local = batch * seq, vocab // w
    k = min(top_k, vocab)
    tail = 1.0 - top_p
    n_max = max(1, min(k - 1, math.floor((1.0 - 0.7 * tail) / tail)))
    f32 = torch.float32
    kept_n = ctx.randint(min(2, n_max), n_max + 1, tokens, 1, shared=True)
    kept = torch.arange(k, device=ctx.device) < kept_n  # slots [0, n) survive, [n, k) are dropped by top-p
    weights = ctx.rand(tokens, k, dtype=f32, shared=True, low=0.5, high=1.5)
    dropped_mass = ctx.rand(tokens, 1, dtype=f32, shared=True, low=0.2 * tail, high=0.7 * tail)
    drop_w = weights.masked_fill(kept, 0.0)
    keep_w = weights.masked_fill(~kept, 0.0)
    spare = 1.0 - dropped_mass - tail * kept_n
    probs = torch.where(kept, tail + spare * keep_w / keep_w.sum(1, keepdim=True),
                        dropped_mass * drop_w / drop_w.sum(1, keepdim=True))
    special = probs.log() + ctx.rand(tokens, 1, dtype=f32, shared=True, low=-1.0, high=1.0)
    # k distinct vocab positions per token, in random slot order.
    pos = ctx.randint(0, vocab - k + 1, tokens, k, shared=True).sort(dim=1).values + torch.arange(k, device=ctx.device)
    pos = pos.gather(1, ctx.rand(tokens, k, dtype=f32, shared=True).argsort(dim=1))
    target_slot = (ctx.rand(tokens, 1, dtype=f32, shared=True) * kept_n).long().clamp_max(kept_n - 1)
    target = pos.gather(1, target_slot).reshape(batch, seq)
    # Everything else sits at least 0.5 below the smallest top-k logit.
    floor = special.amin(dim=1, keepdim=True)
    logits = torch.rand(tokens, local, generator=ctx.gen, device=ctx.device, dtype=f32)
    logits.mul_(-4.0).add_(floor - 0.5)  # in place: this is the big tensor at the large size
    mine = (pos >= r * local) & (pos < (r + 1) * local)
    rows = torch.arange(tokens, device=ctx.device).unsqueeze(1).expand(tokens, k)
    logits[rows[mine], pos[mine] - r * local] = special[mine]
    return logits.to(ctx.dtype).reshape(batch, seq, local), target


def inputs(ctx):
    p = ctx.params
    seq = _seq(p, ctx.world_size)
    logits, target = _filtered_logits_and_targets(ctx, p["batch"], seq, p["vocab"], p["top_k"], p["top_p"])
    return (logits, target, None, p["top_k"], p["top_p"])


def _keep_mask(logits, top_k, top_p):
    """Boolean (rows, V) mask of the entries that survive top-k then top-p."""
    vocab = logits.shape[-1]
    use_k = top_k is not None and top_k > 0
    use_p = top_p is not None and top_p < 1.0
    if not use_k and not use_p:
        return torch.ones_like(logits, dtype=torch.bool)
    if not use_p:
        threshold = logits.topk(min(top_k, vocab), dim=-1).values[:, -1:]
        return logits >= threshold
    values, order = logits.sort(dim=-1)  # ascending
    keep = torch.ones_like(values, dtype=torch.bool)
    if use_k:
        k = min(top_k, vocab)
        keep = values >= values[:, vocab - k:vocab - k + 1]
        values = values.masked_fill(~keep, float("-inf"))
    cumulative = values.softmax(dim=-1).cumsum(dim=-1)
    keep_p = cumulative > 1.0 - top_p
    keep_p[:, -1] = True
    return torch.empty_like(keep).scatter_(-1, order, keep & keep_p)


def _to_token_shards(logits_2d, group):
    """(n, V/W) vocab slice of n tokens -> (n/W, V): this rank's block of tokens, all logits."""
    w = dist.get_world_size(group)
    n, local = logits_2d.shape
    recv = torch.empty((w, n // w, local), dtype=logits_2d.dtype, device=logits_2d.device)
    dist.all_to_all_single(recv, logits_2d.contiguous(), group=group)  # recv[s]: vocab slice s
    return recv.transpose(0, 1).reshape(n // w, w * local)


def reference(vocab_parallel_logits, target, tp_group=None, top_k=None, top_p=1.0):
    w = dist.get_world_size(tp_group)
    me = dist.get_rank(tp_group)
    batch, seq, local = vocab_parallel_logits.shape
    tokens = batch * seq
    per_rank = tokens // w
    logits = _to_token_shards(vocab_parallel_logits.reshape(tokens, local), tp_group)
    filtered = logits.masked_fill(~_keep_mask(logits, top_k, top_p), float("-inf"))
    log_probs = torch.log_softmax(filtered.float(), dim=-1)
    mine = target.reshape(-1)[me * per_rank:(me + 1) * per_rank]
    picked = log_probs.gather(-1, mine.unsqueeze(-1)).squeeze(-1).contiguous()
    out = torch.empty(tokens, dtype=picked.dtype, device=picked.device)
    dist.all_gather_into_tensor(out, picked, group=tp_group)
    return out.reshape(batch, seq)


def traffic(params, world_size, itemsize):
    """One all-to-all of the (T, V/W) logit slice ((W-1)/W of it leaves the
    rank) and an all-gather of T/W fp32 results. HBM: the slice read and
    written by the all-to-all, then the T/W x V block read a few times
    (sort, softmax, log-softmax). FLOPs: a sort (~log2 V compare-exchanges
    per logit) plus about ten per logit."""
    seq = _seq(params, world_size)
    tokens = params["batch"] * seq
    local_numel = tokens * params["vocab"] // world_size
    return {
        "link_bytes": (world_size - 1) / world_size * local_numel * itemsize + (world_size - 1) * tokens // world_size * 4,
        "hbm_bytes": 6 * local_numel * itemsize,
        "flops": local_numel * (math.log2(params["vocab"]) + 10),
    }
