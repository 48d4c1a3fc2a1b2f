"""All-reduce (sum) in Triton, pushed one way for messages up to 1 MiB (above that, the sample's pull).

A candidate for the triton backend's all-reduce sample (issue 56), not yet run on a GPU: its CPU
test (backends/triton/tests/test_triton.py) passes under the interpreter at W=2 and W=3; on two
GPUs, ``pkb bench --backend triton --solutions benchmarks/push --problem 1 --sizes 4K,256K,1M``
beside the sample. The cuda backend's samples push the same way and were measured
(docs/benchmarks/2026-11-30-h200x2-push-samples.md).

The push (:mod:`pkb_triton.push`, the protocol of the cuda backend's ``pkb_cuda.PUSH_CUH``): each
rank writes its input straight into every rank's slot for it in a symmetric workspace, then sums
its own slots in rank order as they land, the data its own flag: one one-way trip across NVLink and
no barrier, where the pull (``1_allreduce.py``) waits on a barrier, reads across the link, and waits
on a barrier again.
"""
import functools
import runpy

import torch
import triton
import triton.language as tl

from pkb_triton import (peers, push_bits, push_finish, push_receive, push_reset_last, push_slot,
                        push_workspace)

BLOCK = 2048
#: The largest message pushed; the workspace holds 3 epochs x W slots of this size.
PUSH_MAX_BYTES = 1024 * 1024


@triton.jit
def _push_allreduce(x, out, slots, ptrs, counters, progress, progress_ptrs, rank, n, SLOT: tl.constexpr,
                    WORLD: tl.constexpr, SIZE: tl.constexpr, EMPTY: tl.constexpr, BLOCK: tl.constexpr):
    epoch = tl.load(counters, volatile=True)
    step = tl.num_programs(0) * BLOCK
    # Send first, every block of this program, so no wait below holds back a send.
    start = tl.program_id(0) * BLOCK
    while start < n:
        offs = start + tl.arange(0, BLOCK)
        bits = push_bits(tl.load(x + offs, mask=offs < n), SIZE, EMPTY)
        for p in tl.static_range(WORLD):
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
    """The triton sample's one-shot pull, for what the push does not take."""
    from pkb_triton.plugin import SAMPLES

    return runpy.run_path(str(SAMPLES / "1_allreduce.py"))["solution"]


def solution(tensor):
    n, size = tensor.numel(), tensor.element_size()
    if not (tensor.is_floating_point() and size in (2, 4, 8) and 0 < n * size <= PUSH_MAX_BYTES):
        return _pull()(tensor)
    sym = peers(tensor)
    out = torch.empty_like(tensor)
    ws = push_workspace(tensor, PUSH_MAX_BYTES // size, tag="allreduce")
    _push_allreduce[(sym.grid(n, BLOCK),)](tensor, out, ws.slots, ws.ptrs, ws.counters, ws.progress, ws.progress_ptrs,
                                           sym.rank, n, SLOT=ws.slot,
                                           WORLD=sym.world_size, SIZE=size, EMPTY=ws.empty, BLOCK=BLOCK, num_warps=8)
    return out
