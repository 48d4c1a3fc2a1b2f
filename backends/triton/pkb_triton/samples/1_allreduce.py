"""All-reduce (sum), one-shot: every rank reads every rank's input and sums.

Each program takes blocks of BLOCK elements in turn (a grid-stride loop) and,
for each block, loads it from all W inputs through the pointer table, starting
with its own rank so that the ranks spread their reads over different peers,
accumulates in fp32 (exact for the problem's integer inputs) and stores one
block of the output. A barrier before (every rank's input is in place) and
after (no rank returns while a peer still reads its input).
"""
import torch
import triton
import triton.language as tl

from pkb_triton import barrier, peer_ptr, peers

BLOCK = 4096


@triton.jit
def _allreduce(out, ptrs, pads, rank, n, WORLD: tl.constexpr, BLOCK: tl.constexpr):
    barrier(pads, rank, WORLD, 0)
    start = tl.program_id(0) * BLOCK
    while start < n:  # grid-stride loop (a runtime `range` fails in the interpreter)
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for i in tl.static_range(WORLD):
            src = peer_ptr(ptrs, (rank + i) % WORLD, out)
            acc += tl.load(src + offs, mask=mask).to(tl.float32)
        tl.store(out + offs, acc.to(out.dtype.element_ty), mask=mask)
        start += tl.num_programs(0) * BLOCK
    barrier(pads, rank, WORLD, 0)


def solution(tensor):
    sym = peers(tensor)
    out = torch.empty_like(tensor)
    n = tensor.numel()
    grid = sym.grid(n, BLOCK)
    _allreduce[(grid,)](out, sym.ptrs, sym.pads, sym.rank, n, WORLD=sym.world_size, BLOCK=BLOCK, num_warps=8)
    return out
