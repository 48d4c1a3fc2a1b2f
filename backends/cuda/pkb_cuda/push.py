"""Scratch for the push helpers of ``pkb_push.cuh`` (:data:`pkb_cuda.PUSH_CUH`)."""
from __future__ import annotations

from typing import NamedTuple

#: Epochs of slots the protocol cycles through (pkb_push.cuh says why three).
EPOCHS = 3

#: Per (tag, device, element size, slot bytes): the heap, the scratch, the counters, the fields.
_SCRATCH: dict = {}


class PushScratch(NamedTuple):
    """What a kernel's ``pkb::PushScratch`` holds, as ints, in its field order, so
    ``ext.fn(x, *pkb_cuda.push_scratch(x, slot_bytes))`` passes them all (declare them in C++
    as ``int64_t table, int64_t offset, int64_t slot_bytes, int64_t counters, int64_t rank,
    int64_t world``)."""

    #: device address of the scratch's ``uint64_t[world]`` pointer table (``pkb_cuda.peers``).
    table: int
    #: bytes from each table entry to the scratch.
    offset: int
    #: bytes of one slot: the most one sender sends one receiver in a call.
    slot_bytes: int
    #: device address of this rank's three ``uint32`` counters (epoch, blocks done, last vectors).
    counters: int
    rank: int
    world: int


def push_scratch(like, slot_bytes: int, tag: str = "") -> PushScratch:
    """The push scratch for tensors like ``like`` (its device and element size: the sentinel is
    per element size), with slots of ``slot_bytes`` (a multiple of 16), made on the first request
    and the same one after.

    The first request is **collective**: it allocates from a symmetric heap (torch symm_mem) and
    waits at a device barrier until every rank's slots hold the sentinel, so every rank must make
    the same first requests in the same order (as it does when each rank's solution asks on its
    first call, with a size all ranks share). Floating-point element sizes only (2, 4, 8 bytes).
    """
    size = like.element_size()
    if size not in (2, 4, 8):
        raise ValueError(f"push_scratch: elements of {size} bytes have no sentinel (2, 4 or 8)")
    if slot_bytes <= 0 or slot_bytes % 16:
        raise ValueError(f"push_scratch: slot_bytes {slot_bytes} is not a positive multiple of 16")
    key = (tag, str(like.device), size, int(slot_bytes))
    entry = _SCRATCH.get(key)
    if entry is None:  # the first request: everything below runs once a (tag, device, size, slot)
        import torch
        import torch.distributed as dist

        from pkb_core import TorchSymmetricHeap, handle_of
        from pkb_cuda.peers import peers

        world = dist.get_world_size()
        heap = TorchSymmetricHeap(like.device)
        scratch = heap.empty((EPOCHS * world * slot_bytes,), torch.uint8)
        bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[size]
        scratch.view(bits).fill_(torch.iinfo(bits).min)  # negative zero's bits: every slot empty
        counters = torch.zeros(3, dtype=torch.int32, device=like.device)
        handle_of(scratch).barrier(channel=0)  # no peer writes into a slot before it is empty
        where = peers(scratch)
        fields = PushScratch(where.buffer_table, where.offset, int(slot_bytes), counters.data_ptr(), where.rank,
                             where.world_size)
        entry = _SCRATCH[key] = (heap, scratch, counters, fields)
    return entry[3]
