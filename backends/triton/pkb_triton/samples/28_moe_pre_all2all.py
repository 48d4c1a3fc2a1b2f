"""MoE dispatch: route tokens expert-major, exchange them and regroup by local expert, in two kernels.

Rank r holds tokens h_r (T, H), the one-hot routing mask M_r (E, K, T) and
C_r (W, E/W): C_r[s, l] = how many tokens of rank s go to local expert l of r
(expert e = r E/W + l). It returns the routing map M_r summed over K, the
expert-major permutation (for e = 0..E-1, the tokens t routed to e, in
ascending order) and its received rows in (local expert, source rank) order:
chunk (l, s) holds h_s[t] for the tokens t of rank s routed to expert
r E/W + l, ascending, C_r[s, l] rows.

The reference computes the map and the permutation (``masked_select``, which
waits for the device), gathers the rows into a send buffer, runs NCCL's
all_to_all_single into a receive buffer, reads the chunk sizes back to the
host (``tolist``, another wait) and reorders the chunks with ``cat``. Here the
rows move once: each rank pulls them from the owners' h_s into its output.

What a rank needs from peer s is where s's tokens for expert e are: s's
permutation and the offset at which expert e's tokens start in it. Each rank
publishes both in symmetric workspaces (:func:`pkb_triton.workspace`, sized by
T, K and E, the same on every rank):

1. ``_route`` (local, no barrier): one program per expert e. It first counts
   the routed (expert, token) pairs of experts 0..e-1 (one pass over (E, T)
   tiles of the mask: each program recounts the experts before its own, E^2/2
   mask rows in all, which is little next to the rows that move) and stores
   that count, where e's tokens start, into the offset workspace. Then one
   pass over M_r[e]: it writes routing_map[e] (the sum over K, exact for a
   one-hot mask) and places e's tokens with a running ``cumsum`` into the
   permutation output and the permutation workspace. A launch of its own,
   because the permutation is a compaction across experts, and programs of
   one rank must never wait for each other.
2. ``_dispatch``: a barrier (program i of every rank has started it, so that
   rank's ``_route`` is complete and its inputs are in place), then for every
   source rank (its own first, then the next ranks, to spread the link
   traffic) and local expert l, the chunk's C_r[s, l] rows: token ids from
   s's permutation at s's offset of expert r E/W + l, feature rows from h_s,
   stored at the chunk's place in the output (a prefix sum of C_r in (l, s)
   order, computed in the kernel); a grid-stride loop over blocks of rows and
   an inner loop over the columns. A last barrier: no rank returns (so its
   inputs are not overwritten, nor its workspaces by its next ``_route``)
   while a peer still reads them.

Nothing is read back to the host: the output sizes come from the host lists
(``output_splits``, ``input_splits``), the chunk sizes are read on the device.
The grid of ``_dispatch`` is derived from T K H, the same on every rank.
"""
import torch
import triton
import triton.language as tl

from pkb_triton import barrier, peer_ptr, peers, workspace

TILE = 4096  # elements per (rows x columns) block
MAX_BLOCK_H = 512
BLOCK_T = 1024  # tokens per step of the routing scan


@triton.jit
def _route(mask, routing, perm, perm_ws, off_ws, T, routed, E: tl.constexpr, K: tl.constexpr, E_PAD: tl.constexpr,
           BLOCK_T: tl.constexpr):
    tok = tl.arange(0, BLOCK_T)
    exp = tl.arange(0, E_PAD)
    e = tl.program_id(0)
    while e < E:
        # Where expert e's tokens start: the routed (expert, token) pairs of experts 0..e-1.
        at = tl.zeros([], dtype=tl.int64)
        t0 = 0
        while t0 < T:
            t = t0 + tok
            m = (exp < e)[:, None] & (t < T)[None, :]
            hit = tl.zeros([E_PAD, BLOCK_T], dtype=tl.float32)
            for k in tl.static_range(K):
                hit += tl.load(mask + (exp[:, None] * K + k) * T + t[None, :], mask=m, other=0.0)
            at += tl.sum(tl.sum((hit != 0).to(tl.int32), axis=1), axis=0)
            t0 += BLOCK_T
        tl.store(off_ws + e, at)
        # Expert e's row: the routing map, and its tokens' places in the permutation.
        t0 = 0
        while t0 < T:
            t = t0 + tok
            tm = t < T
            acc = tl.zeros([BLOCK_T], dtype=tl.float32)
            for k in tl.static_range(K):
                acc += tl.load(mask + (e * K + k) * T + t, mask=tm, other=0.0)
            tl.store(routing + e * T + t, acc, mask=tm)
            hit = (acc != 0) & tm
            ones = hit.to(tl.int32)
            where = at + (tl.cumsum(ones, axis=0) - ones)
            hit = hit & (where < routed)  # only ever false for a mask that breaks the problem's promise
            tl.store(perm + where, t.to(tl.int64), mask=hit)
            tl.store(perm_ws + where, t.to(tl.int64), mask=hit)
            at += tl.sum(ones, axis=0)
            t0 += BLOCK_T
        e += tl.num_programs(0)


@triton.jit
def _dispatch(out, h_ptrs, counts, perm_ws, perm_ptrs, off_ws, off_ptrs, pads, rank,
              H: tl.constexpr, WORLD: tl.constexpr, NLE: tl.constexpr, NC_PAD: tl.constexpr,
              BLOCK_R: tl.constexpr, BLOCK_H: tl.constexpr):
    # Every peer's inputs, permutation and offsets are in place (its _route finished before this kernel).
    barrier(pads, rank, WORLD, 0)
    # C_r flattened: entry i = s * NLE + l; its chunk comes at position l * W + s of the output.
    i = tl.arange(0, NC_PAD)
    c = tl.load(counts + i, mask=i < WORLD * NLE, other=0)
    order = (i % NLE) * WORLD + i // NLE
    rows = tl.arange(0, BLOCK_R)
    cols = tl.arange(0, BLOCK_H)
    for step in tl.static_range(WORLD):
        src = (rank + step) % WORLD
        src_perm = peer_ptr(perm_ptrs, src, perm_ws)
        src_off = peer_ptr(off_ptrs, src, off_ws)
        src_h = peer_ptr(h_ptrs, src, out)
        for l in tl.static_range(NLE):
            n = tl.load(counts + src * NLE + l)
            dst_start = tl.sum(tl.where(order < l * WORLD + src, c, 0), axis=0)
            ids = src_perm + tl.load(src_off + rank * NLE + l)  # src's tokens for expert rank * NLE + l
            dst = out + dst_start * H
            start = tl.program_id(0) * BLOCK_R
            while start < n:
                r = start + rows
                rmask = r < n
                idx = tl.load(ids + r, mask=rmask, other=0)
                for h in tl.static_range(0, H, BLOCK_H):
                    hh = h + cols
                    m = rmask[:, None] & (hh < H)[None, :]
                    vals = tl.load(src_h + idx[:, None] * H + hh[None, :], mask=m)
                    tl.store(dst + r[:, None] * H + hh[None, :], vals, mask=m)
                start += tl.num_programs(0) * BLOCK_R
    # No peer reads this rank's inputs or workspaces any more.
    barrier(pads, rank, WORLD, 0)


def solution(hidden_states, expert_mask, num_experts, input_splits, output_splits,
             num_global_tokens_per_local_expert, group=None):
    hidden = hidden_states.size(-1)
    h = hidden_states.reshape(-1, hidden)
    tokens = h.size(0)
    experts, top_k, _ = expert_mask.shape
    sym = peers(hidden_states)
    world, rank = sym.world_size, sym.rank
    nle = num_experts // world
    device = h.device

    # Collective on first use, then cached: sizes from T, K, E (the same on every rank).
    perm_ws = workspace(tokens * top_k, torch.int64, "moe_perm")
    off_ws = workspace(experts, torch.int64, "moe_expert_offsets")
    routed = sum(int(v) for v in input_splits)
    if routed > tokens * top_k:
        raise RuntimeError("input_splits do not match the routed tokens")

    routing_map = torch.empty((experts, tokens), dtype=expert_mask.dtype, device=device)
    perm = torch.empty((routed,), dtype=torch.int64, device=device)
    _route[(sym.grid(experts, 1),)](  # local work only: no barrier, any grid
        expert_mask, routing_map, perm, perm_ws, off_ws, tokens, routed, E=experts, K=top_k,
        E_PAD=triton.next_power_of_2(experts), BLOCK_T=min(BLOCK_T, triton.next_power_of_2(tokens)), num_warps=4)

    rows = torch.empty((sum(int(v) for v in output_splits), hidden), dtype=h.dtype, device=device)
    block_h = min(triton.next_power_of_2(hidden), MAX_BLOCK_H)
    block_r = max(1, TILE // block_h)
    grid = sym.grid(tokens * top_k * hidden, TILE)  # T, K, H are the same on every rank
    _dispatch[(grid,)](rows, sym.ptrs, num_global_tokens_per_local_expert, perm_ws, peers(perm_ws).ptrs,
                       off_ws, peers(off_ws).ptrs, sym.pads, rank, H=hidden, WORLD=world, NLE=nle,
                       NC_PAD=triton.next_power_of_2(world * nle), BLOCK_R=block_r, BLOCK_H=block_h, num_warps=8)
    return rows, routing_map, perm, h.shape
