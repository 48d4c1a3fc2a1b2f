"""All-gather in Triton, pushed one way for floating-point inputs up to 1 MiB (above that, the sample's pull).

A candidate for the triton backend's all-gather sample (issue 56), not yet run on a GPU (its CPU
tests pass under the interpreter); on two GPUs, ``pkb bench --backend triton --solutions
benchmarks/push --problem 2 --sizes 4K,256K,1M`` beside the sample.

Each rank writes its input straight into every peer's slot for it (:mod:`pkb_triton.push`, the data
its own flag: one one-way trip, no barrier), puts its own input in its output's block, and copies
each peer's slot into the peer's block as it lands. A peer's -0.0 arrives as +0.0 (the protocol's
sentinel is negative zero), equal to it in every comparison.
"""
import functools
import runpy

import torch
import triton
import triton.language as tl

from pkb_triton import (peers, push_bits, push_finish, push_receive, push_reset_last, push_slot,
                        push_workspace)

BLOCK = 2048
#: The largest input pushed; the workspace holds 3 epochs x W slots of this size.
PUSH_MAX_BYTES = 1024 * 1024


@triton.jit
def _push_allgather(x, out, slots, ptrs, counters, progress, progress_ptrs, rank, n, SLOT: tl.constexpr,
                    WORLD: tl.constexpr, SIZE: tl.constexpr, EMPTY: tl.constexpr, BLOCK: tl.constexpr):
    epoch = tl.load(counters, volatile=True)
    step = tl.num_programs(0) * BLOCK
    start = tl.program_id(0) * BLOCK
    while start < n:
        offs = start + tl.arange(0, BLOCK)
        v = tl.load(x + offs, mask=offs < n)
        bits = push_bits(v, SIZE, EMPTY)
        for i in tl.static_range(1, WORLD):
            p = (rank + i) % WORLD  # stagger: ranks start on different peers
            tl.store(push_slot(slots, ptrs, p, epoch, rank, WORLD, SLOT) + offs, bits, mask=offs < n)
        tl.store(out + rank * n + offs, v, mask=offs < n)
        start += step
    start = tl.program_id(0) * BLOCK
    while start < n:
        offs = start + tl.arange(0, BLOCK)
        for i in tl.static_range(1, WORLD):
            p = (rank + i) % WORLD
            bits = push_receive(push_slot(slots, ptrs, rank, epoch, p, WORLD, SLOT) + offs, offs < n, EMPTY)
            tl.store(out + p * n + offs, bits.to(x.dtype.element_ty, bitcast=True), mask=offs < n)
        start += step
    push_reset_last(slots, ptrs, counters, rank, epoch, WORLD, SLOT, EMPTY, BLOCK)
    push_finish(counters, progress, progress_ptrs, rank, epoch, n, WORLD, CREDITS=False)


@functools.cache
def _pull():
    """The triton sample's pull, for what the push does not take."""
    from pkb_triton.plugin import SAMPLES

    return runpy.run_path(str(SAMPLES / "2_allgather.py"))["solution"]


def solution(tensor):
    n, size = tensor.numel(), tensor.element_size()
    if not (tensor.is_floating_point() and size in (2, 4, 8) and 0 < n * size <= PUSH_MAX_BYTES):
        return _pull()(tensor)
    sym = peers(tensor)
    out = torch.empty((sym.world_size, *tensor.shape), dtype=tensor.dtype, device=tensor.device)
    ws = push_workspace(tensor, PUSH_MAX_BYTES // size, tag="allgather")
    _push_allgather[(sym.grid(n, BLOCK),)](tensor, out, ws.slots, ws.ptrs, ws.counters, ws.progress, ws.progress_ptrs,
                                           sym.rank, n, SLOT=ws.slot,
                                           WORLD=sym.world_size, SIZE=size, EMPTY=ws.empty, BLOCK=BLOCK, num_warps=8)
    return out
