"""Reduce (sum) onto ``dst`` in Triton, pushed one way for floating-point messages up to 1 MiB (above
that, the sample's pull).

A candidate for the triton backend's reduce sample (issue 56), not yet run on a GPU (its CPU tests
pass under the interpreter); on two GPUs, ``pkb bench --backend triton --solutions benchmarks/push
--problem 4 --sizes 4K,256K,1M`` beside the sample, whose cuda twin pulled at 0.91x NCCL's calls
at 4 KiB on 2xH200.

Every other rank writes its input straight into ``dst``'s slot for it (:mod:`pkb_triton.push`, the
data its own flag: one one-way trip, no barrier) and returns its own input; ``dst`` puts its input
in its own slot and sums its slots in rank order as they land. Only ``dst`` receives, so a sender
waits for ``dst``'s credit before writing (``push_wait_credit``): it cannot run calls ahead into
slots ``dst`` still reads.
"""
import functools
import runpy

import torch
import triton
import triton.language as tl

from pkb_triton import (peers, push_bits, push_finish, push_receive, push_reset_last, push_slot, push_wait_credit,
                        push_workspace)

BLOCK = 2048
#: The largest message pushed; the workspace holds 3 epochs x W slots of this size.
PUSH_MAX_BYTES = 1024 * 1024


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


@functools.cache
def _pull():
    """The triton sample's pull, for what the push does not take."""
    from pkb_triton.plugin import SAMPLES

    return runpy.run_path(str(SAMPLES / "4_reduce.py"))["solution"]


def solution(tensor, dst=0):
    n, size = tensor.numel(), tensor.element_size()
    if not (tensor.is_floating_point() and size in (2, 4, 8) and 0 < n * size <= PUSH_MAX_BYTES):
        return _pull()(tensor, dst)
    sym = peers(tensor)
    out = torch.empty_like(tensor)
    ws = push_workspace(tensor, PUSH_MAX_BYTES // size, tag="reduce")
    _push_reduce[(sym.grid(n, BLOCK),)](tensor, out, ws.slots, ws.ptrs, ws.counters, ws.progress, ws.progress_ptrs,
                                        sym.rank, int(dst), n, SLOT=ws.slot, WORLD=sym.world_size, SIZE=size,
                                        EMPTY=ws.empty, ROOT=sym.rank == int(dst), BLOCK=BLOCK, num_warps=8)
    return out
