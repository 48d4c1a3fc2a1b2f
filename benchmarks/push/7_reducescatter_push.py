"""Reduce-scatter (sum) in Triton, pushed one way for row blocks up to 1 MiB (above that, the sample's pull).

A candidate for the triton backend's reduce-scatter sample (issue 56), not yet run on a GPU (its CPU
tests pass under the interpreter); on two GPUs, ``pkb bench --backend triton --solutions
benchmarks/push --problem 7 --sizes 4K,256K,1M`` beside the sample.

Each rank's input is (W*M, ...): W row blocks. Rank r writes its block p straight into rank p's slot
for r (:mod:`pkb_triton.push`, the data its own flag: one one-way trip, no barrier), then sums its
own slots in rank order as they land, in fp32.
"""
import functools
import runpy

import torch
import triton
import triton.language as tl

from pkb_triton import (peers, push_bits, push_finish, push_receive, push_reset_last, push_slot,
                        push_workspace)

BLOCK = 2048
#: The largest row block pushed; the workspace holds 3 epochs x W slots of this size.
PUSH_MAX_BYTES = 1024 * 1024


@triton.jit
def _push_reducescatter(x, out, slots, ptrs, counters, progress, progress_ptrs, rank, n, SLOT: tl.constexpr,
                        WORLD: tl.constexpr, SIZE: tl.constexpr, EMPTY: tl.constexpr, BLOCK: tl.constexpr):
    epoch = tl.load(counters, volatile=True)
    step = tl.num_programs(0) * BLOCK
    start = tl.program_id(0) * BLOCK
    while start < n:  # n: elements of one row block
        offs = start + tl.arange(0, BLOCK)
        for i in tl.static_range(WORLD):
            p = (rank + i) % WORLD  # stagger: ranks start on different peers
            bits = push_bits(tl.load(x + p * n + offs, mask=offs < n), SIZE, EMPTY)
            tl.store(push_slot(slots, ptrs, p, epoch, rank, WORLD, SLOT) + offs, bits, mask=offs < n)
        start += step
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
    push_finish(counters, progress, progress_ptrs, rank, epoch, n, WORLD, CREDITS=False)


@functools.cache
def _pull():
    """The triton sample's pull, for what the push does not take."""
    from pkb_triton.plugin import SAMPLES

    return runpy.run_path(str(SAMPLES / "7_reducescatter.py"))["solution"]


def solution(tensor):
    sym = peers(tensor)
    size = tensor.element_size()
    n = tensor.numel() // sym.world_size
    fits = tensor.shape[0] % sym.world_size == 0 and 0 < n * size <= PUSH_MAX_BYTES
    if not (tensor.is_floating_point() and size in (2, 4, 8) and fits):
        return _pull()(tensor)
    out = torch.empty((tensor.shape[0] // sym.world_size, *tensor.shape[1:]), dtype=tensor.dtype,
                      device=tensor.device)
    ws = push_workspace(tensor, PUSH_MAX_BYTES // size, tag="reducescatter")
    _push_reducescatter[(sym.grid(n, BLOCK),)](tensor, out, ws.slots, ws.ptrs, ws.counters, ws.progress, ws.progress_ptrs,
                                           sym.rank, n,
                                               SLOT=ws.slot, WORLD=sym.world_size, SIZE=size, EMPTY=ws.empty,
                                               BLOCK=BLOCK, num_warps=8)
    return out
