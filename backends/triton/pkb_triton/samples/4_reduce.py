"""Reduce (sum) onto ``dst``: pushed one way up to 1 MiB of floating point, pulled above.

Push (:mod:`pkb_triton.push`): every other rank writes its input straight into ``dst``'s slot for it
and returns its own input; ``dst`` puts its input in its own slot and sums its slots in rank order
as they land. Only ``dst`` receives, so a sender could run calls ahead into slots ``dst`` still
reads: it waits for ``dst``'s credit first (``push_wait_credit``; ``CREDITS=True``).

Pull, for larger messages and integers: between two barriers, ``dst`` loads each block from every
rank's input and sums in fp32; the other ranks copy their input.
"""
import torch
import triton
import triton.language as tl

from pkb_triton import (barrier, peer_ptr, peers, push_bits, push_finish, push_launch, push_receive, push_reset_last,
                        push_slot, push_wait_credit, push_workspace)

#: The largest message pushed; the push workspace holds 3 epochs x W slots of this size.
PUSH_MAX_BYTES = 1024 * 1024
PULL_BLOCK = 4096


@triton.jit
def _push_reduce(x, out, slots, ptrs, counters, progress, progress_ptrs, rank, dst, n, SLOT: tl.constexpr,
                 WORLD: tl.constexpr, SIZE: tl.constexpr, EMPTY: tl.constexpr, ROOT: tl.constexpr,
                 BLOCK: tl.constexpr):
    epoch = tl.load(counters, volatile=True)
    step = tl.num_programs(0) * BLOCK
    if not ROOT:
        push_wait_credit(progress, dst, counters)
    start = tl.program_id(0) * BLOCK
    while start < n:
        offs = start + tl.arange(0, BLOCK)
        v = tl.load(x + offs, mask=offs < n)
        # dst's own input goes into its own slot, so it sums every slot alike, in rank order.
        tl.store(push_slot(slots, ptrs, dst, epoch, rank, WORLD, SLOT) + offs, push_bits(v, SIZE, EMPTY), mask=offs < n)
        if not ROOT:
            tl.store(out + offs, v, mask=offs < n)
        start += step
    if ROOT:
        start = tl.program_id(0) * BLOCK
        while start < n:
            offs = start + tl.arange(0, BLOCK)
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for p in tl.static_range(WORLD):
                bits = push_receive(push_slot(slots, ptrs, rank, epoch, p, WORLD, SLOT) + offs, offs < n, EMPTY)
                acc += bits.to(x.dtype.element_ty, bitcast=True).to(tl.float32)
            tl.store(out + offs, acc.to(out.dtype.element_ty), mask=offs < n)
            start += step
    push_reset_last(slots, ptrs, counters, rank, epoch, WORLD, SLOT, EMPTY, BLOCK)
    push_finish(counters, progress, progress_ptrs, rank, epoch, n, WORLD, CREDITS=True)


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


def _pull(tensor, dst=0):
    """The pull, for what the push does not take."""
    sym = peers(tensor)
    out = torch.empty_like(tensor)
    n = tensor.numel()
    grid = sym.grid(n, PULL_BLOCK)
    _reduce[(grid,)](out, sym.ptrs, sym.pads, sym.rank, n, ROOT=sym.rank == int(dst), WORLD=sym.world_size,
                     BLOCK=PULL_BLOCK, num_warps=8)
    return out


def solution(tensor, dst=0):
    n, size = tensor.numel(), tensor.element_size()
    if not (tensor.is_floating_point() and size in (2, 4, 8) and 0 < n * size <= PUSH_MAX_BYTES):
        return _pull(tensor, dst)
    sym = peers(tensor)
    out = torch.empty_like(tensor)
    ws = push_workspace(tensor, PUSH_MAX_BYTES // size, tag="reduce")
    grid, block, warps = push_launch(n, sym)
    _push_reduce[(grid,)](tensor, out, ws.slots, ws.ptrs, ws.counters, ws.progress, ws.progress_ptrs, sym.rank,
                          int(dst), n, SLOT=ws.slot, WORLD=sym.world_size, SIZE=size, EMPTY=ws.empty,
                          ROOT=sym.rank == int(dst), BLOCK=block, num_warps=warps)
    return out
