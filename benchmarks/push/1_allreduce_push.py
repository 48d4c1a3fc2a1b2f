"""All-reduce (sum) in Triton, pushed one way for messages up to 1 MiB (above that, the sample's pull).

A candidate for the triton backend's all-reduce sample (issue 56), not yet run on a GPU: its CPU
test (backends/triton/tests/test_triton.py) passes under the interpreter at W=2 and W=3; on two
GPUs, ``pkb bench --backend triton --solutions benchmarks/push --problem 1 --sizes 4K,256K,1M``
beside the sample. The cuda backend's samples push the same way and were measured
(docs/benchmarks/2026-11-30-h200x2-push-samples.md).

The push: each rank writes its input straight into every rank's slot for it in a symmetric
workspace (:func:`pkb_triton.workspace`), then sums its own slots in rank order as they land. The
data is its own flag: an empty slot holds negative zero's bits in every element, and a sender
sends every -0.0 as +0.0 (the same in a sum), so a receiver knows an element has landed once it is
no longer the sentinel: one one-way trip across NVLink and no barrier, where the pull
(``1_allreduce.py``) waits on a barrier, reads across the link, and waits on a barrier again.

The workspace has three epochs of slots, used in turn. In call ``e`` a rank resets its slots of
call ``e - 1``; a peer writes into them again only in call ``e + 2``, which it cannot begin before
it has read this rank's data of call ``e + 1``, sent after this call ended. The epoch, and how many
elements the last call received, live in a counters tensor on the device, so graph replays advance
them as calls do (the protocol of the cuda backend's ``pkb_cuda.PUSH_CUH``).
"""
import functools
import runpy

import torch
import triton
import triton.language as tl

from pkb_core import handle_of
from pkb_triton import peer_ptr, peers, workspace

BLOCK = 2048
#: The largest message pushed; the workspace holds 3 epochs x W slots of this size.
PUSH_MAX_BYTES = 1024 * 1024
EPOCHS = 3
#: Per element size: the integer type of its bits, and the sentinel (negative zero's bits).
BITS = {2: (torch.int16, -(1 << 15)), 4: (torch.int32, -(1 << 31)), 8: (torch.int64, -(1 << 63))}

_COUNTERS: dict = {}  # (workspace address) -> the counters tensor: epoch, programs done, last elements


@triton.jit
def _bits(v, SIZE: tl.constexpr):
    if SIZE == 2:
        return v.to(tl.int16, bitcast=True)
    elif SIZE == 4:
        return v.to(tl.int32, bitcast=True)
    else:
        return v.to(tl.int64, bitcast=True)


@triton.jit
def _push_allreduce(x, out, slots, like, counters, rank, n, SLOT: tl.constexpr, WORLD: tl.constexpr,
                    SIZE: tl.constexpr, EMPTY: tl.constexpr, BLOCK: tl.constexpr):
    epoch = tl.load(counters, volatile=True)
    last = tl.load(counters + 2, volatile=True)
    step = tl.num_programs(0) * BLOCK
    # Send first, every block of this program, so no wait below holds back a send.
    start = tl.program_id(0) * BLOCK
    while start < n:
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        bits = _bits(tl.load(x + offs, mask=mask), SIZE)
        bits = tl.where(bits == EMPTY, 0, bits)
        for p in tl.static_range(WORLD):
            dst = peer_ptr(slots, p, like) + (epoch * WORLD + rank) * SLOT
            tl.store(dst + offs, bits, mask=mask)
        start += step
    start = tl.program_id(0) * BLOCK
    while start < n:
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        mine = peer_ptr(slots, rank, like)
        for p in tl.static_range(WORLD):
            src = mine + (epoch * WORLD + p) * SLOT + offs
            bits = tl.load(src, mask=mask, other=0, volatile=True)
            while tl.sum((bits == EMPTY).to(tl.int32), axis=0) > 0:
                bits = tl.load(src, mask=mask, other=0, volatile=True)
            acc += bits.to(x.dtype.element_ty, bitcast=True).to(tl.float32)
        tl.store(out + offs, acc.to(out.dtype.element_ty), mask=mask)
        start += step
    # Reset what the last call received (its epoch is the one before this call's).
    previous = (epoch + 2) % 3
    start = tl.program_id(0) * BLOCK
    while start < last:
        offs = start + tl.arange(0, BLOCK)
        mask = offs < last
        mine = peer_ptr(slots, rank, like)
        for p in tl.static_range(WORLD):
            tl.store(mine + (previous * WORLD + p) * SLOT + offs, tl.full([BLOCK], EMPTY, like.dtype.element_ty),
                     mask=mask)
        start += step
    # The last program to get here advances the epoch for the next call.
    tl.debug_barrier()
    if tl.atomic_add(counters + 1, 1, sem="acq_rel", scope="gpu") == tl.num_programs(0) - 1:
        tl.store(counters + 1, 0)
        tl.store(counters + 2, n)
        tl.store(counters, (epoch + 1) % 3)


def _push_workspace(tensor, world):
    """The slots for ``tensor``'s element size, and their counters; the first request is collective
    (every rank's first call asks for it): the slots are filled with the sentinel, then a barrier,
    so no peer writes into a slot before it is empty."""
    bits, empty = BITS[tensor.element_size()]
    slot = PUSH_MAX_BYTES // tensor.element_size()
    slots = workspace(EPOCHS * world * slot, bits, tag="allreduce-push")
    counters = _COUNTERS.get(slots.data_ptr())
    if counters is None:
        slots.fill_(empty)
        counters = _COUNTERS[slots.data_ptr()] = torch.zeros(3, dtype=torch.int32, device=tensor.device)
        handle_of(slots).barrier(channel=0)
    return slots, counters, slot, empty


@functools.cache
def _pull():
    """The triton sample's one-shot pull, for what the push does not take."""
    from pkb_triton.plugin import SAMPLES

    return runpy.run_path(str(SAMPLES / "1_allreduce.py"))["solution"]


def solution(tensor):
    n = tensor.numel()
    size = tensor.element_size()
    if not (tensor.is_floating_point() and size in BITS and 0 < n * size <= PUSH_MAX_BYTES):
        return _pull()(tensor)
    sym = peers(tensor)
    out = torch.empty_like(tensor)
    slots, counters, slot, empty = _push_workspace(tensor, sym.world_size)
    _push_allreduce[(sym.grid(n, BLOCK),)](tensor, out, peers(slots).ptrs, slots, counters, sym.rank, n, SLOT=slot,
                                           WORLD=sym.world_size, SIZE=size, EMPTY=empty, BLOCK=BLOCK, num_warps=8)
    return out
