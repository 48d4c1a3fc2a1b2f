"""A CPU symmetric heap built from shared-memory files that every rank maps.

Each allocation is one file per rank, ``/dev/shm/pkb-<run>-<n>-<rank>``,
holding the data buffer followed by a zeroed signal pad. After a gloo barrier
every rank maps every peer's file; the addresses differ per process (as with
CUDA IPC) and are never exchanged. As soon as all ranks have mapped all files,
each owner unlinks its file: the mappings stay valid and a crash can no longer
leave anything behind in /dev/shm. The launcher also sweeps ``pkb-<run>-*``
after every launch for the short window before the unlink.

Triton's interpreter performs atomics on raw addresses with ``std::atomic``,
which works across processes for aligned 32/64-bit words, so barriers written
with ``tl.atomic_cas`` on the signal pads work here as on the GPU.
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist

from pkb_core.symmetric import register_allocation

SHM_DIR = "/dev/shm"
PAGE = 4096
SIGNAL_PAD_BYTES = 4096


def segment_prefix(run_id: str) -> str:
    return os.path.join(SHM_DIR, f"pkb-{run_id}-")


class SharedMemoryHandle:
    """The handle of one CPU allocation; attribute names follow torch's."""

    def __init__(self, maps, rank, buffer_size, group):
        self._maps = maps  # one uint8 tensor per rank, each mapping a whole file
        self._group = group
        self.rank = rank
        self.world_size = len(maps)
        self.buffer_size = buffer_size
        self.signal_pad_size = SIGNAL_PAD_BYTES
        self.offset = 0
        self.multicast_ptr = 0
        self.buffer_ptrs = [m.data_ptr() for m in maps]
        self.signal_pad_ptrs = [m.data_ptr() + buffer_size for m in maps]
        # uint64 tables readable by (interpreted) kernels.
        self._buffer_table = torch.tensor(self.buffer_ptrs, dtype=torch.int64)
        self._signal_table = torch.tensor(self.signal_pad_ptrs, dtype=torch.int64)
        self.buffer_ptrs_dev = self._buffer_table.data_ptr()
        self.signal_pad_ptrs_dev = self._signal_table.data_ptr()

    def get_buffer(self, rank, sizes, dtype, storage_offset=0):
        itemsize = torch.empty((), dtype=dtype).element_size()
        numel = 1
        for s in sizes:
            numel *= s
        start = storage_offset * itemsize
        return self._maps[rank][start:start + numel * itemsize].view(dtype).view(tuple(sizes))

    def get_signal_pad(self, rank, sizes=None, dtype=torch.int32):
        pad = self._maps[rank][self.buffer_size:self.buffer_size + SIGNAL_PAD_BYTES].view(dtype)
        return pad if sizes is None else pad[: _numel(sizes)].view(tuple(sizes))

    def barrier(self, channel=0, timeout_ms=None):
        from pkb_core.guards import harness_call

        with harness_call():  # a heap barrier, not a solution's NCCL call
            dist.barrier(group=self._group)

    @staticmethod
    def get_backend(device=None):
        return "CPU-EMU"


def _numel(sizes):
    n = 1
    for s in sizes:
        n *= s
    return n


class SharedMemoryHeap:
    """Allocates :class:`SharedMemoryHandle`-backed CPU tensors (collective)."""

    def __init__(self, group, run_id: str):
        self.group = group
        self.run_id = run_id
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.count = 0
        self.handles = []

    def empty(self, shape, dtype):
        itemsize = torch.empty((), dtype=dtype).element_size()
        nbytes = max(_numel(shape) * itemsize, 1)
        buffer_size = -(-nbytes // PAGE) * PAGE
        size = buffer_size + SIGNAL_PAD_BYTES
        paths = [f"{segment_prefix(self.run_id)}{self.count}-{p}" for p in range(self.world_size)]
        self.count += 1
        fd = os.open(paths[self.rank], os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, size)  # a fresh file reads as zeros: the pad starts zeroed
        finally:
            os.close(fd)
        dist.barrier(group=self.group)
        maps = [torch.from_file(path, shared=True, size=size, dtype=torch.uint8) for path in paths]
        dist.barrier(group=self.group)
        os.unlink(paths[self.rank])
        handle = SharedMemoryHandle(maps, self.rank, buffer_size, self.group)
        self.handles.append(handle)
        register_allocation(handle.buffer_ptrs[self.rank], buffer_size, handle)
        return maps[self.rank][:nbytes].view(dtype).view(tuple(shape)) if shape else maps[self.rank][:itemsize].view(dtype)[0]

    def close(self):
        self.handles.clear()
