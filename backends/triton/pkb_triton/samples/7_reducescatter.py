"""Reduce-scatter (sum): rank r sums row block r of every rank's (W*M, N) input.

Each rank reads only its own block from each peer (1/W of every input) and
accumulates in fp32 (exact for the problem's integer inputs).
"""
import torch
import triton
import triton.language as tl

from pkb_triton import barrier, peer_ptr, peers

BLOCK = 4096


@triton.jit
def _reducescatter(out, ptrs, pads, rank, n, WORLD: tl.constexpr, BLOCK: tl.constexpr):
    barrier(pads, rank, WORLD, 0)
    mine = tl.cast(rank, tl.int64) * n  # where block `rank` starts in every input
    start = tl.program_id(0) * BLOCK
    while start < n:
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for i in tl.static_range(WORLD):
            src = peer_ptr(ptrs, (rank + i) % WORLD, out) + mine
            acc += tl.load(src + offs, mask=mask).to(tl.float32)
        tl.store(out + offs, acc.to(out.dtype.element_ty), mask=mask)
        start += tl.num_programs(0) * BLOCK
    barrier(pads, rank, WORLD, 0)


def solution(tensor):
    sym = peers(tensor)
    out = torch.empty((tensor.shape[0] // sym.world_size, *tensor.shape[1:]), dtype=tensor.dtype,
                      device=tensor.device)
    n = out.numel()
    grid = sym.grid(n, BLOCK)
    _reducescatter[(grid,)](out, sym.ptrs, sym.pads, sym.rank, n, WORLD=sym.world_size, BLOCK=BLOCK,
                            num_warps=8)
    return out
