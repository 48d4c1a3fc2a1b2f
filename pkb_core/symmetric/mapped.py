"""Handles over per-rank byte mappings.

Heaps whose allocation is, in every process, one uint8 tensor per rank (that
rank's data buffer followed by its signal pad, reachable from here) share the
same handle arithmetic: the address lists and their tables, and views of a
peer's buffer or pad. :class:`MappedHandle` holds it; the CPU heap
(:mod:`pkb_core.symmetric.shm`) and nvshmem4py's heap add their barrier.
"""
from __future__ import annotations

import math

import torch


class MappedHandle:
    """The torch-named attributes of one allocation mapped once per rank.

    :param mappings: one uint8 tensor per rank; ``mappings[p]`` is rank p's
        whole allocation as this process reaches it (buffer, then pad).
    :param rank: this rank (``mappings[rank]`` is local memory).
    :param buffer_size: bytes of the data buffer; the pad starts there.
    :param signal_pad_size: bytes of the signal pad.

    The address tables live on the local mapping's device, where kernels
    read them.
    """

    #: No multicast object backs these mappings: torch's answer where there is none (a class
    #: attribute, so :mod:`pkb_core.candidate.multicast_gate` can watch its reads).
    multicast_ptr = 0

    def __init__(self, mappings, rank: int, buffer_size: int, signal_pad_size: int):
        self._mappings = mappings
        self.rank = rank
        self.world_size = len(mappings)
        self.buffer_size = buffer_size
        self.signal_pad_size = signal_pad_size
        self.offset = 0
        self.buffer_ptrs = [m.data_ptr() for m in mappings]
        self.signal_pad_ptrs = [p + buffer_size for p in self.buffer_ptrs]
        device = mappings[rank].device
        self._buffer_table = torch.tensor(self.buffer_ptrs, dtype=torch.int64, device=device)
        self._signal_table = torch.tensor(self.signal_pad_ptrs, dtype=torch.int64, device=device)
        self.buffer_ptrs_dev = self._buffer_table.data_ptr()
        self.signal_pad_ptrs_dev = self._signal_table.data_ptr()

    def get_buffer(self, rank, sizes, dtype, storage_offset=0):
        itemsize = torch.empty((), dtype=dtype).element_size()
        start = storage_offset * itemsize
        return self._mappings[rank][start:start + math.prod(sizes) * itemsize].view(dtype).view(tuple(sizes))

    def get_signal_pad(self, rank, sizes=None, dtype=torch.int32):
        pad = self._mappings[rank][self.buffer_size:self.buffer_size + self.signal_pad_size].view(dtype)
        return pad if sizes is None else pad[: math.prod(sizes)].view(tuple(sizes))
