"""Peer addresses and signal pads of a symmetric tensor, as plain ints for kernels."""
from __future__ import annotations

from typing import NamedTuple

from pkb_core import handle_of


class Peers(NamedTuple):
    """What a kernel needs to reach every rank's copy of one symmetric tensor.

    The field order is the argument order the samples use, so
    ``ext.fn(tensor, *pkb_cuda.peers(tensor))`` passes them all (declare them
    in C++ as ``int64_t buffers, int64_t pads, int64_t offset, int64_t rank,
    int64_t world, int64_t max_blocks, int64_t align``).
    """

    #: device address of a ``uint64_t[world]`` table: rank p's buffer base
    #: (``handle.buffer_ptrs_dev``). Cast in CUDA: ``(const uint64_t*)buffers``.
    buffer_table: int
    #: device address of a ``uint64_t[world]`` table of signal pads
    #: (``handle.signal_pad_ptrs_dev``). Cast in CUDA: ``(uint32_t* const*)pads``.
    signal_table: int
    #: bytes from a buffer base to the tensor; the same on every rank, so rank
    #: p's copy starts at ``buffers[p] + offset`` (``pkb::peer_ptr<T>``).
    offset: int
    rank: int
    world_size: int
    #: how many blocks a per-block barrier may use: ``signal_pad_size / 4 /
    #: world_size`` slots (``pkb::barrier_block`` with slot = blockIdx.x).
    max_blocks: int
    #: the largest power of two <= 16 dividing the tensor's address on every
    #: rank: 16 means 16-byte vector loads are safe from the tensor's start.
    align: int


def peers(tensor) -> Peers:
    """:class:`Peers` of ``tensor``, which must live in a symmetric heap (every
    tensor input the harness passes to ``solution`` does, at offset 0 of its
    own allocation; a view into one works too).

    ``offset`` is measured from ``handle.buffer_ptrs[rank]`` (this rank's
    entry of the table): with torch symm_mem those are the bases the peers'
    tables hold, which may lie before the tensor's allocation
    (:func:`pkb_core.symmetric.peer_offset` counts from the allocation), so
    ``tensor.data_ptr() - buffer_ptrs[rank]`` is the offset valid on every rank.

    :raises LookupError: the tensor is not in a symmetric heap (e.g. one the
        solution allocated with ``torch.empty``).
    """
    handle = handle_of(tensor)
    rank, world = handle.rank, handle.world_size
    bases = handle.buffer_ptrs
    offset = tensor.data_ptr() - bases[rank]
    if offset < 0:
        raise LookupError(f"tensor at {tensor.data_ptr():#x} lies before its symmetric buffer at {bases[rank]:#x}")
    align = 16
    for base in bases:
        while (base + offset) % align:
            align //= 2
    slots = int(getattr(handle, "signal_pad_size", 4096)) // 4
    return Peers(int(handle.buffer_ptrs_dev), int(handle.signal_pad_ptrs_dev), offset, rank, world,
                 slots // world, align)


def peer_ptrs(tensor) -> list[int]:
    """The address of ``tensor``'s copy on every rank, valid in this process
    (for kernels that take a few pointers as arguments instead of a table)."""
    handle = handle_of(tensor)
    offset = tensor.data_ptr() - handle.buffer_ptrs[handle.rank]
    return [base + offset for base in handle.buffer_ptrs]
