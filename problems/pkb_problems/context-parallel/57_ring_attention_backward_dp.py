"""Ring attention backward over CP sequence shards, then the gradient mean over DP replicas.

Megatron "cp-dp" rank layout.

Arguments ``(dout, q, k, v, out, softmax_lse, softmax_scale, causal,
cp_group, dp_group)`` = ``(dO, q, k, v, O, lse, None, False, cp, dp)``
(softmax_scale None means 1/sqrt(D)). Layout: DP size d = 2 and CP size
c = W/2 for even W >= 4; at W = 2, d = 1 and c = 2 (the original's d = 2,
c = 1 has no ring). Rank r is replica dp_rank = r // c at CP position
cp_rank = r % c; CP groups are contiguous {p*c, ..., p*c + c-1}, DP groups
strided {i, i+c, ...}; both are built by ``inputs`` and passed in.

Per rank, working dtype unless stated: dO, q, k, v, O of shape (B, S/c, H, D)
(batch, sequence, heads, head dim) are rows [cp_rank*S/c, (cp_rank+1)*S/c)
of its replica's global sequence; lse (B, H, S/c) is fp32. O and lse are the
forward results of the replica's global attention: for local query i,
O_i = sum_j P_ij V_j and lse_i = logsumexp_j(q_i . K_j * scale) over all S
global keys of the replica (causal=False), computed in fp32 from the rounded
q/k/v, O then rounded to the working dtype.

Compute, per replica, the gradients of the global attention for this rank's
shard, in fp32: with S_ij = q_i . K_j * scale, P_ij = exp(S_ij - lse_i)
(using the given lse), dP_ij = dO_i . V_j and delta_i = sum(dO_i * O_i)
(using the given O), dS = P * (dP - delta):

    dq_i = scale * sum_j dS_ij K_j          (j over all S global keys)
    dk_j = scale * sum_i dS_ij q_i          (i over all S global queries:
    dv_j = sum_i P_ij dO_i                   this rank's keys j, every CP peer's queries)

(with causal=True only j <= i would count, the diagonal block masked.) Cast
dq, dk, dv to the working dtype, then average each over the DP group (sum
over the d replicas at the same CP position, divided by d; a no-op at
d = 1). Every rank returns (dq, dk, dv), each (B, S/c, H, D), working dtype
(DP peers return the same values). The original's algorithm: one ring
rotates K/V c-1 times, a second carries the dK/dV accumulators, which come
home after c steps; then three all-reduces over DP. The result equals
autograd of global attention (averaged over replicas).

Compared with the dtype's default tolerances (atol relative to max |leaf|).

Fixes in pkb: the original computed O and lse from the local shard only
(inconsistent with a ring over the global sequence); here they come from the
replica's global attention. At W = 2 pkb runs d = 1, c = 2 so both rings run.
"""
import torch
import torch.distributed as dist

ID = 57
NAME = "ring_attention_backward_dp"
CATEGORY = "context-parallel"
ORIGIN = "ring-flash-attention backward + DP"
WORLD_SIZE = "W = 2 (DP 1 x CP 2) or even W >= 4 (DP 2 x CP W/2); CP size divides S"
SIZES = {
    "tiny": {"b": 1, "s": 8, "h": 8, "d": 8},
    "default": {"b": 16, "s": 16, "h": 8, "d": 64},
    "large": {"b": 4, "s": 32768, "h": 8, "d": 128},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": (
        "dout", "q", "k", "v", "out", "softmax_lse", "softmax_scale", "causal", "cp_group", "dp_group",
    ),
    "args": (
        "bf16[16, 16, 8, 64]", "bf16[16, 16, 8, 64]", "bf16[16, 16, 8, 64]", "bf16[16, 16, 8, 64]",
        "bf16[16, 16, 8, 64]", "fp32[16, 8, 16]", "None", "False", "group(self)", "group(all)",
    ),
    "out": ("bf16[16, 16, 8, 64]", "bf16[16, 16, 8, 64]", "bf16[16, 16, 8, 64]"),
}
# Why this problem differs from the original there (docs/pkb-parity.md).
PKB_DIFFERENCES = {
    "dout": (
        "at W = 2 the original's layout (DP 2, CP 1) has no ring; pkb runs DP 1, CP 2 there, so both rings "
        "run (docstring)"
    ),
    "q": (
        "at W = 2 the original's layout (DP 2, CP 1) has no ring; pkb runs DP 1, CP 2 there, so both rings "
        "run (docstring)"
    ),
    "k": (
        "at W = 2 the original's layout (DP 2, CP 1) has no ring; pkb runs DP 1, CP 2 there, so both rings "
        "run (docstring)"
    ),
    "v": (
        "at W = 2 the original's layout (DP 2, CP 1) has no ring; pkb runs DP 1, CP 2 there, so both rings "
        "run (docstring)"
    ),
    "out": (
        "at W = 2 the original's layout (DP 2, CP 1) has no ring; pkb runs DP 1, CP 2 there, so both rings "
        "run (docstring)"
    ),
    "softmax_lse": (
        "at W = 2 the original's layout (DP 2, CP 1) has no ring; pkb runs DP 1, CP 2 there, so both rings "
        "run (docstring)"
    ),
    "cp_group": (
        "at W = 2 the original's layout (DP 2, CP 1) has no ring; pkb runs DP 1, CP 2 there, so both rings "
        "run (docstring)"
    ),
    "dp_group": (
        "at W = 2 the original's layout (DP 2, CP 1) has no ring; pkb runs DP 1, CP 2 there, so both rings "
        "run (docstring)"
    ),
    "out[0]": (
        "at W = 2 the original's layout (DP 2, CP 1) has no ring; pkb runs DP 1, CP 2 there, so both rings "
        "run (docstring)"
    ),
    "out[1]": (
        "at W = 2 the original's layout (DP 2, CP 1) has no ring; pkb runs DP 1, CP 2 there, so both rings "
        "run (docstring)"
    ),
    "out[2]": (
        "at W = 2 the original's layout (DP 2, CP 1) has no ring; pkb runs DP 1, CP 2 there, so both rings "
        "run (docstring)"
    ),
}


def _layout(world_size):
    dp = 1 if world_size == 2 else 2
    return dp, world_size // dp


def world_size_error(world_size, params):
    if world_size % 2:
        return "needs an even W (DP size 2 x CP size W/2; W = 2 runs DP 1 x CP 2)"
    _, cp = _layout(world_size)
    if params["s"] % cp:
        return f"CP size {cp} does not divide the sequence length {params['s']}"
    return None


def _chunk_rows(b, h, sk, tensors=1):
    """Query rows per chunk so that `tensors` (B, H, rows, Sk) fp32 score-like
    matrices stay under ~1 GiB together."""
    return max(1, (1 << 28) // max(1, b * h * sk * tensors))


def inputs(ctx):
    p = ctx.params
    w = ctx.world_size
    dp, cp = _layout(w)
    cp_group = ctx.groups([list(range(i * cp, (i + 1) * cp)) for i in range(dp)])
    dp_group = ctx.groups([list(range(j, w, cp)) for j in range(cp)])
    dp_rank, cp_rank = ctx.rank // cp, ctx.rank % cp
    b, s, h, d = p["b"], p["s"], p["h"], p["d"]
    sl = s // cp
    # Global K and V of every replica from the shared stream (drawn one replica
    # at a time; every rank draws all of them to stay in step), q and dO local.
    k_glob = v_glob = None
    for replica in range(dp):
        kr = ctx.randn(b, s, h, d, shared=True)
        vr = ctx.randn(b, s, h, d, shared=True)
        if replica == dp_rank:
            k_glob, v_glob = kr, vr
        del kr, vr
    q = ctx.randn(b, sl, h, d)
    dout = ctx.randn(b, sl, h, d)
    k = k_glob[:, cp_rank * sl:(cp_rank + 1) * sl].contiguous()
    v = v_glob[:, cp_rank * sl:(cp_rank + 1) * sl].contiguous()
    # Forward of the replica's global (non-causal) attention for the local queries.
    scale = d ** -0.5
    qh = q.transpose(1, 2).float()
    kt = k_glob.transpose(1, 2).float().transpose(-2, -1)
    vh = v_glob.transpose(1, 2).float()
    del k_glob, v_glob
    chunk = _chunk_rows(b, h, s, 2)
    outs, lses = [], []
    for start in range(0, sl, chunk):
        scores = torch.matmul(qh[:, :, start:start + chunk], kt) * scale
        lse = torch.logsumexp(scores, dim=-1)
        outs.append(torch.matmul(torch.exp(scores - lse.unsqueeze(-1)), vh))
        lses.append(lse)
        del scores
    out = torch.cat(outs, dim=2).transpose(1, 2).contiguous().to(ctx.dtype)
    softmax_lse = torch.cat(lses, dim=2).contiguous()
    return (dout, q, k, v, out, softmax_lse, None, False, cp_group, dp_group)


def _block_backward(dout, q, k, v, out, lse, scale, diagonal):
    """fp32 gradients of one (query shard, K/V block) pair; inputs (B, S*, H, D),
    lse (B, H, Sq). Returns dq (B, Sq, H, D), dk and dv (B, Sk, H, D)."""
    qh = q.transpose(1, 2).float()
    kh = k.transpose(1, 2).float()
    vh = v.transpose(1, 2).float()
    doh = dout.transpose(1, 2).float()
    delta = (doh * out.transpose(1, 2).float()).sum(dim=-1)
    b, h, sq, _ = qh.shape
    sk = kh.shape[2]
    chunk = _chunk_rows(b, h, sk, 3)
    dq_parts = []
    dk = torch.zeros_like(kh)
    dv = torch.zeros_like(vh)
    for start in range(0, sq, chunk):
        end = min(sq, start + chunk)
        q_c, do_c = qh[:, :, start:end], doh[:, :, start:end]
        scores = torch.matmul(q_c, kh.transpose(-2, -1)) * scale
        if diagonal:
            rows = torch.arange(start, end, device=q.device)
            cols = torch.arange(sk, device=q.device)
            scores.masked_fill_(cols[None, :] > rows[:, None], float("-inf"))
        probs = torch.exp(scores - lse[:, :, start:end].unsqueeze(-1))
        del scores
        ds = probs * (torch.matmul(do_c, vh.transpose(-2, -1)) - delta[:, :, start:end].unsqueeze(-1))
        dq_parts.append(torch.matmul(ds, kh) * scale)
        dk += torch.matmul(ds.transpose(-2, -1), q_c) * scale
        dv += torch.matmul(probs.transpose(-2, -1), do_c)
    dq = torch.cat(dq_parts, dim=2)
    return dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)


def _exchange(send_to, recv_from, group, *tensors):
    """Post send-to-next / receive-from-previous for each tensor; returns the
    receive buffers and the requests."""
    bufs = [torch.empty_like(t) for t in tensors]
    ops = []
    for t, buf in zip(tensors, bufs):
        ops.append(dist.P2POp(dist.isend, t, send_to, group=group))
        ops.append(dist.P2POp(dist.irecv, buf, recv_from, group=group))
    return bufs, dist.batch_isend_irecv(ops)


def _ring_backward(dout, q, k, v, out, lse, scale, causal, group):
    group = group if group is not None else dist.group.WORLD
    size = dist.get_world_size(group)
    rank = dist.get_rank(group)
    if size == 1:
        return _block_backward(dout, q, k, v, out, lse, scale, causal)
    send_to = dist.get_global_rank(group, (rank + 1) % size)
    recv_from = dist.get_global_rank(group, (rank - 1) % size)
    k, v = k.contiguous(), v.contiguous()
    dq = acc_k = acc_v = None
    acc_pending = None
    for step in range(size):
        if step + 1 < size:
            (next_k, next_v), kv_reqs = _exchange(send_to, recv_from, group, k, v)
        # At step s this rank holds the K/V block of CP rank (rank - s) mod size,
        # and the dK/dV accumulator of that same block arrives from rank - 1.
        used = not causal or step <= rank
        if used:
            bdq, bdk, bdv = _block_backward(dout, q, k, v, out, lse, scale, causal and step == 0)
            dq = bdq if dq is None else dq + bdq
        if step == 0:
            acc_k, acc_v = bdk.contiguous(), bdv.contiguous()
        else:
            (recv_k, recv_v), reqs = acc_pending
            for req in reqs:
                req.wait()
            acc_k, acc_v = (recv_k + bdk, recv_v + bdv) if used else (recv_k, recv_v)
            acc_k, acc_v = acc_k.contiguous(), acc_v.contiguous()
        acc_pending = _exchange(send_to, recv_from, group, acc_k, acc_v)
        if step + 1 < size:
            for req in kv_reqs:
                req.wait()
            k, v = next_k, next_v
    (dk, dv), reqs = acc_pending
    for req in reqs:
        req.wait()
    return dq, dk, dv


def reference(dout, q, k, v, out, softmax_lse, softmax_scale=None, causal=False,
              cp_group=None, dp_group=None):
    scale = float(softmax_scale) if softmax_scale is not None else q.shape[-1] ** -0.5
    grads = _ring_backward(dout, q, k, v, out, softmax_lse, scale, causal, cp_group)
    dq, dk, dv = (g.to(t.dtype).contiguous() for g, t in zip(grads, (q, k, v)))
    if dp_group is not None and dist.get_world_size(dp_group) > 1:
        dp_size = dist.get_world_size(dp_group)
        for g in (dq, dk, dv):
            dist.all_reduce(g, group=dp_group)
            g.div_(dp_size)
    return dq, dk, dv


def traffic(params, world_size, itemsize):
    """K/V ring: c-1 hops of two (B, S/c, H, D) blocks; dK/dV ring: c hops of
    two fp32 accumulators; DP all-reduce of three blocks (ring, 2 (d-1)/d).
    HBM: the five inputs, K/V and accumulators per step, three outputs.
    FLOPs: backward = 2.5x forward (5 matmuls of the S/c x S/c block per step)."""
    dp, cp = _layout(world_size)
    b, s, h, d = params["b"], params["s"], params["h"], params["d"]
    block = b * s // cp * h * d
    return {
        "link_bytes": 2 * (cp - 1) * block * itemsize + 2 * cp * block * 4
        + 3 * 2 * (dp - 1) / dp * block * itemsize,
        "hbm_bytes": 5 * block * itemsize + cp * (2 * block * itemsize + 4 * block * 4) + 3 * block * itemsize,
        "flops": 10 * b * h * (s // cp) * s * d,
    }
