"""Gather onto rank ``dst``: slot s of dst's (W, M, N) output is rank s's input;
every other rank returns a copy of its own input."""
import torch
import triton
import triton.language as tl

from pkb_triton import barrier, peer_ptr, peers

BLOCK = 4096


@triton.jit
def _gather(out, ptrs, pads, rank, n, ROOT: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
    barrier(pads, rank, WORLD, 0)
    start = tl.program_id(0) * BLOCK
    while start < n:
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        if ROOT:
            for i in tl.static_range(WORLD):
                peer = (rank + i) % WORLD
                src = peer_ptr(ptrs, peer, out)
                dst = out + tl.cast(peer, tl.int64) * n
                tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)
        else:
            src = peer_ptr(ptrs, rank, out)
            tl.store(out + offs, tl.load(src + offs, mask=mask), mask=mask)
        start += tl.num_programs(0) * BLOCK
    barrier(pads, rank, WORLD, 0)


def solution(tensor, dst=0):
    sym = peers(tensor)
    root = sym.rank == int(dst)
    shape = (sym.world_size, *tensor.shape) if root else tensor.shape
    out = torch.empty(shape, dtype=tensor.dtype, device=tensor.device)
    n = tensor.numel()
    grid = sym.grid(n, BLOCK)
    _gather[(grid,)](out, sym.ptrs, sym.pads, sym.rank, n, ROOT=root, WORLD=sym.world_size, BLOCK=BLOCK,
                     num_warps=8)
    return out
