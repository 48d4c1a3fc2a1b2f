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

import math
import os

import torch
import torch.distributed as dist

from pkb_core.symmetric import register_allocation
from pkb_core.symmetric.mapped import MappedHandle

SHM_DIR = "/dev/shm"
PAGE = 4096
SIGNAL_PAD_BYTES = 4096


def segment_prefix(run_id: str) -> str:
    return os.path.join(SHM_DIR, f"pkb-{run_id}-")


class SharedMemoryHandle(MappedHandle):
    """The handle of one CPU allocation; attribute names follow torch's."""

    def __init__(self, maps, rank, buffer_size, group):
        super().__init__(maps, rank, buffer_size, SIGNAL_PAD_BYTES)  # one mapping of each rank's file
        self._group = group

    def barrier(self, channel=0, timeout_ms=None):
        from pkb_core.guards import harness_call

        with harness_call():  # a heap barrier, not a solution's NCCL call
            dist.barrier(group=self._group)

    @staticmethod
    def get_backend(device=None):
        return "CPU-EMU"


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
        nbytes = max(math.prod(shape) * itemsize, 1)
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
