"""All-reduce (sum), one-shot, on torch's NVSHMEM heap.

Every rank's input is an NVSHMEM symmetric object, so ``nvshmem_ptr``
addresses (the ``ptrs`` table) reach each peer's copy over NVLink. Each
program sums its blocks of the W inputs directly from the peers' memory, in
rank order starting with its own rank, in fp32 (exact for the problem's
integer inputs), and writes a new output. NVSHMEM signals meet the peers
before (every input is in place) and after (no rank returns while a peer
still reads its input).
"""
import torch
import triton
import triton.language as tl

from pkb_nvshmem import barrier, peer_ptr, peers, requires_nvshmem

BLOCK = 4096


@requires_nvshmem
@triton.jit
def _allreduce(out, ptrs, signals, rank, n, WORLD: tl.constexpr, BLOCK: tl.constexpr):
    barrier(signals, rank, WORLD, 0)
    start = tl.program_id(0) * BLOCK
    while start < n:
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for i in tl.static_range(WORLD):
            src = peer_ptr(ptrs, (rank + i) % WORLD, out)
            acc += tl.load(src + offs, mask=mask).to(tl.float32)
        tl.store(out + offs, acc.to(out.dtype.element_ty), mask=mask)
        start += tl.num_programs(0) * BLOCK
    barrier(signals, rank, WORLD, 0)


def solution(tensor):
    sym = peers(tensor)
    out = torch.empty_like(tensor)
    n = tensor.numel()
    grid = sym.grid(n, BLOCK)
    _allreduce[(grid,)](out, sym.ptrs, sym.signals, sym.rank, n, WORLD=sym.world_size, BLOCK=BLOCK, num_warps=8)
    return out
