"""Reduce (sum) onto rank ``dst``; every other rank returns a copy of its input.

Rank dst sums the block from all W inputs (in fp32, exact for the problem's
integer inputs); the others copy their own input. All ranks run both
barriers, since dst reads everybody's input.
"""
import torch
import triton
import triton.language as tl

from pkb_triton import barrier, peer_ptr, peers

BLOCK = 4096


@triton.jit
def _reduce(out, ptrs, pads, rank, n, ROOT: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
    barrier(pads, rank, WORLD, 0)
    start = tl.program_id(0) * BLOCK
    while start < n:
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        if ROOT:
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for i in tl.static_range(WORLD):
                src = peer_ptr(ptrs, (rank + i) % WORLD, out)
                acc += tl.load(src + offs, mask=mask).to(tl.float32)
            tl.store(out + offs, acc.to(out.dtype.element_ty), mask=mask)
        else:
            src = peer_ptr(ptrs, rank, out)
            tl.store(out + offs, tl.load(src + offs, mask=mask), mask=mask)
        start += tl.num_programs(0) * BLOCK
    barrier(pads, rank, WORLD, 0)


def solution(tensor, dst=0):
    sym = peers(tensor)
    out = torch.empty_like(tensor)
    n = tensor.numel()
    grid = sym.grid(n, BLOCK)
    _reduce[(grid,)](out, sym.ptrs, sym.pads, sym.rank, n, ROOT=sym.rank == int(dst), WORLD=sym.world_size,
                     BLOCK=BLOCK, num_warps=8)
    return out
