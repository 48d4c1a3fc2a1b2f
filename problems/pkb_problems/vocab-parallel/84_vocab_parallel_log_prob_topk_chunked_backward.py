"""Backward of the chunked top-k/top-p target log-probability (problem 83) to vocab-parallel logits (NeMo-RL).

The vocabulary of V entries is split into W contiguous slices (rank r owns
[r·V/W, (r+1)·V/W)). There are T = B·S tokens, S = max(``seq``, W) rounded
up to a multiple of W.

Arguments on rank r:

- ``vocab_parallel_logits``: (B, S, V/W), working dtype: this rank's vocab
  slice of every token's logits.
- ``target``: (B, S) int64 in [0, V), identical on every rank.
- ``grad_output``: (B, S), working dtype, identical on every rank: the upstream
  gradient g of each token's log-probability.
- ``tp_group`` = None (WORLD), ``top_k`` (int), ``top_p`` (float),
  ``chunk_size`` (int): chunks are B·chunk_size consecutive flattened tokens
  (the last may be shorter); B·chunk_size is a multiple of W.

For every token, over its full row x of V logits (in the working dtype),
filtering as in problem 83:

1. top-k: keep the entries >= the k-th largest value (ties at the threshold are
   all kept);
2. top-p: sort the row ascending with the entries dropped by top-k set to
   -inf, take the softmax (in the working dtype) and its cumulative sum c; keep
   the entries with c > 1 - top_p, and always the largest;
3. keep = the surviving entries, filtered = x with the others set to -inf;
   in fp32, p = softmax(filtered) and

       grad[v] = g · (onehot(target)[v] - p[v]) · keep[v]

   (the gradient of g · log_softmax(filtered)[target], with the filter held fixed).

Return a new (B, S, V/W) fp32 tensor: this rank's vocab slice of grad for every
token. Per chunk, the reference re-shards by all-to-all (rank r gets the r-th
contiguous 1/W of the chunk's tokens with all V logits), computes the
gradient, and returns each vocab slice to its owner with a second
all-to-all; the chunks only bound memory.

Inputs are built so that filtering is unambiguous in any dtype and summation
order: per token, the k top entries lie at least 0.5 above all others; 2 to
min(k-1, 9) of them survive top-p, each survivor >= 1.4x (in probability) any
dropped one, and the cumulative sums on both sides of the keep/drop boundary
are at least 20 % away from 1 - top_p; the target is always a survivor, so
every output is finite. (Equal logits occur only within the kept or within the
dropped set, where their order does not matter.)

Sizes (B, seq, V, top_k, top_p, chunk_size): tiny (1, 8, 48, 4, 0.9, auto),
default (2, 8, 256, 10, 0.9, auto) as in the original, large
(8, 4096, 131072, 10, 0.9, 512). "auto" (``chunk: 0``) is the original's rule:
max(W, S // 4) rounded up to a multiple of W, at most S.

Fix in pkb: the original boosted the target logit by +8, giving it > 90 % of
the mass, so top-p kept only the target and every gradient was exactly 0 (an
all-zero answer passed); its targets were a fixed formula and its upstream
gradient a constant linspace. pkb draws shared random targets and gradients,
and logits with several survivors and decision margins, as above.
"""
import math

import torch
import torch.distributed as dist

ID = 84
NAME = "vocab_parallel_log_prob_topk_chunked_backward"
CATEGORY = "vocab-parallel"
ORIGIN = "NeMo-RL distributed log-probs with top-k/top-p, chunked backward"
WORLD_SIZE = "V % W == 0, B·chunk_size % W == 0"
SIZES = {
    "tiny": {"batch": 1, "seq": 8, "vocab": 48, "top_k": 4, "top_p": 0.9, "chunk": 0},
    "default": {"batch": 2, "seq": 8, "vocab": 256, "top_k": 10, "top_p": 0.9, "chunk": 0},
    "large": {"batch": 8, "seq": 4096, "vocab": 131072, "top_k": 10, "top_p": 0.9, "chunk": 512},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("vocab_parallel_logits", "target", "grad_output", "tp_group", "top_k", "top_p", "chunk_size"),
    "args": ("bf16[2, 8, 128]", "int64[2, 8]", "bf16[2, 8]", "None", "10", "0.9", "2"),
    "out": "fp32[2, 8, 128]",
}


def _seq(params, world_size):
    return -(-max(params["seq"], world_size) // world_size) * world_size


def _chunk(params, world_size):
    seq = _seq(params, world_size)
    if params["chunk"]:
        return params["chunk"]
    return min(-(-max(world_size, seq // 4) // world_size) * world_size, seq)


def world_size_error(world_size, params):
    if params["vocab"] % world_size:
        return f"the vocabulary ({params['vocab']}) must split evenly over W ranks"
    if params["batch"] * _chunk(params, world_size) % world_size:
        return f"a chunk of B·chunk_size = {params['batch'] * _chunk(params, world_size)} tokens must split over W ranks"
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
    grad_output = ctx.randn(p["batch"], seq, shared=True)
    return (logits, target, grad_output, None, p["top_k"], p["top_p"], _chunk(p, ctx.world_size))


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


def _to_vocab_shards(grad, group):
    """(n/W, V) rows of this rank's tokens -> (n, V/W): every token, this rank's vocab slice."""
    w = dist.get_world_size(group)
    rows, vocab = grad.shape
    send = grad.reshape(rows, w, vocab // w).transpose(0, 1).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)  # recv[s]: tokens of rank s
    return recv.reshape(w * rows, vocab // w)


def reference(vocab_parallel_logits, target, grad_output, tp_group=None, top_k=None, top_p=1.0, chunk_size=1):
    w = dist.get_world_size(tp_group)
    me = dist.get_rank(tp_group)
    batch, seq, local = vocab_parallel_logits.shape
    tokens = batch * seq
    step = batch * max(1, int(chunk_size))
    logits_2d = vocab_parallel_logits.reshape(tokens, local)
    targets = target.reshape(-1)
    grads = grad_output.reshape(-1)
    pieces = []
    for start in range(0, tokens, step):
        stop = min(start + step, tokens)
        per_rank = (stop - start) // w
        mine = slice(start + me * per_rank, start + (me + 1) * per_rank)
        logits = _to_token_shards(logits_2d[start:stop], tp_group)
        keep = _keep_mask(logits, top_k, top_p)
        probs = torch.softmax(logits.masked_fill(~keep, float("-inf")).float(), dim=-1)
        onehot = torch.zeros_like(probs).scatter_(-1, targets[mine].unsqueeze(-1), 1.0)
        grad = (onehot - probs) * grads[mine].unsqueeze(-1) * keep
        pieces.append(_to_vocab_shards(grad, tp_group))
    return torch.cat(pieces).reshape(batch, seq, local)


def traffic(params, world_size, itemsize):
    """Per chunk, one all-to-all of the chunk's (n, V/W) logit slice and one
    of the fp32 gradient slice back ((W-1)/W of each leaves the rank); summed
    over chunks. HBM: logits read and written by the first all-to-all and read
    a few times (sort, softmax), the fp32 gradient written and moved. FLOPs: a
    sort (~log2 V compare-exchanges per logit) plus about ten per logit."""
    seq = _seq(params, world_size)
    tokens = params["batch"] * seq
    local_numel = tokens * params["vocab"] // world_size
    return {
        "link_bytes": (world_size - 1) / world_size * local_numel * (itemsize + 4),
        "hbm_bytes": local_numel * (6 * itemsize + 3 * 4),
        "flops": local_numel * (math.log2(params["vocab"]) + 10),
    }
