"""A CPU symmetric heap built from shared-memory files that every rank maps.

Each allocation is one file per rank, ``<folder>/pkb-<run>-<n>-<rank>``,
holding the data buffer followed by a zeroed signal pad. After a gloo barrier
every rank maps every peer's file; the addresses differ per process (as with
CUDA IPC) and are never exchanged. As soon as all ranks have mapped all files,
each owner unlinks its file: the mappings stay valid and a crash can no longer
leave anything behind. The folder is the group's own (``PKB_SHM_DIR``, which
the launcher makes: :mod:`pkb_core.launch.scratch`), so no other job can plant
or open a segment's name; the launcher removes it with its group.

Triton's interpreter performs atomics on raw addresses with ``std::atomic``,
which works across processes for aligned 32/64-bit words, so barriers written
with ``tl.atomic_cas`` on the signal pads work here as on the GPU.
"""
from __future__ import annotations

import math
import os

import torch

from pkb_core.symmetric.handles import register_allocation
from pkb_core.symmetric.mapped import MappedHandle

SHM_DIR = "/dev/shm"
#: The environment variable naming the group's own folder for its segments.
SHM_DIR_ENV = "PKB_SHM_DIR"
PAGE = 4096
SIGNAL_PAD_BYTES = 4096


def segment_prefix(run_id: str) -> str:
    return os.path.join(os.environ.get(SHM_DIR_ENV, SHM_DIR), f"pkb-{run_id}-")


class SharedMemoryHandle(MappedHandle):
    """The handle of one CPU allocation; attribute names follow torch's."""

    def __init__(self, maps, rank, buffer_size, barrier):
        super().__init__(maps, rank, buffer_size, SIGNAL_PAD_BYTES)  # one mapping of each rank's file
        self._barrier = barrier

    def barrier(self, channel=0, timeout_ms=None):
        self._barrier()

    @staticmethod
    def get_backend(device=None):
        return "CPU-EMU"


class SharedMemoryHeap:
    """Allocates :class:`SharedMemoryHandle`-backed CPU tensors (collective).

    :param barrier: a zero-argument barrier among the heap's ranks (the
        harness's store barrier; no process group is involved).
    """

    def __init__(self, rank: int, world_size: int, barrier, run_id: str):
        self.rank = rank
        self.world_size = world_size
        self.barrier = barrier
        self.run_id = run_id
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
        self.barrier()
        maps = [torch.from_file(path, shared=True, size=size, dtype=torch.uint8) for path in paths]
        self.barrier()
        os.unlink(paths[self.rank])
        handle = SharedMemoryHandle(maps, self.rank, buffer_size, self.barrier)
        self.handles.append(handle)
        register_allocation(handle.buffer_ptrs[self.rank], buffer_size, handle)
        return maps[self.rank][:nbytes].view(dtype).view(tuple(shape)) if shape else maps[self.rank][:itemsize].view(dtype)[0]

    def close(self):
        self.handles.clear()
