"""Ring attention (forward) over contiguous sequence shards.

Arguments ``(q, k, v, softmax_scale, causal, group)`` =
``(q, k, v, None, True, None)`` (group None means WORLD; softmax_scale None
means 1/sqrt(D)). Rank r holds q_r, k_r, v_r of shape (B, S/W, H, D)
(batch, sequence, heads, head dim), working dtype: rows [r*S/W, (r+1)*S/W) of
the global sequence (contiguous, rank-ordered shards). Rank r returns a NEW
tensor of shape (B, S/W, H, D), working dtype:

    out_r[b, i, h] = sum_j softmax_j(q_r[b, i, h] . K[b, j, h] * scale) V[b, j, h]

over the global keys j of the W ranks (K, V = all shards concatenated in rank
order); with causal=True, global query position r*S/W + i attends to global
key positions j <= r*S/W + i only (causal=False: all S keys). Scores,
softmax and accumulation in fp32, cast to the working dtype at the end.

The original's algorithm (a reference, not a requirement): K/V blocks travel
W-1 times round the ring (send to r+1, receive from r-1); at step s rank r
holds rank (r-s)'s block and, if causal, uses it only when s <= r (the
diagonal mask at s = 0); partial results merge through the log-sum-exp
update. Causal contiguous sharding is unbalanced: rank r processes r+1 blocks
(rank 0 one, rank W-1 all W), so the slowest rank sets the time.

Compared with the dtype's default tolerances (atol relative to max |out|).
"""
import torch
import torch.distributed as dist

ID = 54
NAME = "ring_attention"
CATEGORY = "context-parallel"
ORIGIN = "zhuzilin ring-flash-attention (RingComm, LSE merge)"
WORLD_SIZE = "S % W == 0 (16 % W == 0 at default)"
SIZES = {
    "tiny": {"b": 1, "s": 8, "h": 8, "d": 8},
    "default": {"b": 16, "s": 16, "h": 8, "d": 64},
    "large": {"b": 4, "s": 32768, "h": 8, "d": 128},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("q", "k", "v", "softmax_scale", "causal", "group"),
    "args": ("bf16[16, 8, 8, 64]", "bf16[16, 8, 8, 64]", "bf16[16, 8, 8, 64]", "None", "True", "None"),
    "out": "bf16[16, 8, 8, 64]",
}


def world_size_error(world_size, params):
    if params["s"] % world_size:
        return f"sequence length {params['s']} does not split into {world_size} shards"
    return None


def inputs(ctx):
    p = ctx.params
    shape = (p["b"], p["s"] // ctx.world_size, p["h"], p["d"])
    return (ctx.randn(*shape), ctx.randn(*shape), ctx.randn(*shape), None, True, None)


def _block_attention(q, k, v, scale, diagonal):
    """fp32 attention of q (B, Sq, H, D) over one K/V block (B, Sk, H, D);
    returns out (B, Sq, H, D) and lse (B, H, Sq). Query rows are processed in
    chunks so the score matrix stays under ~1 GiB."""
    qh = q.transpose(1, 2).float()
    kt = k.transpose(1, 2).float().transpose(-2, -1)
    vh = v.transpose(1, 2).float()
    b, h, sq, _ = qh.shape
    sk = kt.shape[-1]
    chunk = max(1, (1 << 28) // max(1, b * h * sk))
    outs, lses = [], []
    for start in range(0, sq, chunk):
        scores = torch.matmul(qh[:, :, start:start + chunk], kt) * scale
        if diagonal:
            rows = torch.arange(start, start + scores.shape[2], device=q.device)
            cols = torch.arange(sk, device=q.device)
            scores.masked_fill_(cols[None, :] > rows[:, None], float("-inf"))
        lse = torch.logsumexp(scores, dim=-1)
        outs.append(torch.matmul(torch.exp(scores - lse.unsqueeze(-1)), vh))
        lses.append(lse)
    return torch.cat(outs, dim=2).transpose(1, 2), torch.cat(lses, dim=2)


def _ring_attention(q, k, v, scale, causal, group):
    group = group if group is not None else dist.group.WORLD
    size = dist.get_world_size(group)
    rank = dist.get_rank(group)
    send_to = dist.get_global_rank(group, (rank + 1) % size)
    recv_from = dist.get_global_rank(group, (rank - 1) % size)
    k, v = k.contiguous(), v.contiguous()
    out = lse = None
    for step in range(size):
        if step + 1 < size:
            next_k, next_v = torch.empty_like(k), torch.empty_like(v)
            reqs = dist.batch_isend_irecv([
                dist.P2POp(dist.isend, k, send_to, group=group),
                dist.P2POp(dist.irecv, next_k, recv_from, group=group),
                dist.P2POp(dist.isend, v, send_to, group=group),
                dist.P2POp(dist.irecv, next_v, recv_from, group=group),
            ])
        if not causal or step <= rank:
            block_out, block_lse = _block_attention(q, k, v, scale, causal and step == 0)
            if out is None:
                out, lse = block_out, block_lse
            else:
                new_lse = torch.logaddexp(lse, block_lse)
                w_old = torch.exp(lse - new_lse).transpose(1, 2).unsqueeze(-1)
                w_new = torch.exp(block_lse - new_lse).transpose(1, 2).unsqueeze(-1)
                out = out * w_old + block_out * w_new
                lse = new_lse
        if step + 1 < size:
            for req in reqs:
                req.wait()
            k, v = next_k, next_v
    return out


def reference(q, k, v, softmax_scale=None, causal=False, group=None):
    scale = float(softmax_scale) if softmax_scale is not None else q.shape[-1] ** -0.5
    return _ring_attention(q, k, v, scale, causal, group).to(q.dtype)


def traffic(params, world_size, itemsize):
    """K and V go W-1 hops round the ring. HBM: q, out, and every K/V block
    read once per step (score matrices assumed on chip). FLOPs: causal
    attention 4*B*H*S^2*D/2, averaged over ranks (rank r does r+1 blocks)."""
    b, s, h, d = params["b"], params["s"], params["h"], params["d"]
    block = b * s // world_size * h * d * itemsize
    return {
        "link_bytes": 2 * (world_size - 1) * block,
        "hbm_bytes": 2 * block + 2 * world_size * block + 2 * (world_size - 1) * block,
        "flops": 2 * b * h * s * s * d / world_size,
    }
