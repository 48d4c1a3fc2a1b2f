"""Host-side helpers for ``nvshmem`` solutions (Triton kernels with NVSHMEM calls)."""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from pkb_core import handle_of

#: Words of one barrier slot: W arrival epochs plus this rank's own epoch.
def slot_words(world_size: int) -> int:
    return world_size + 1


@dataclass(frozen=True)
class Symmetric:
    """What a kernel needs to work on one symmetric tensor.

    :ivar ptrs: address (int) of a uint64 table: entry p is this tensor's
        address on rank p as this process reaches it (``nvshmem_ptr``), for
        direct loads and stores over NVLink (:func:`pkb_nvshmem.peer_ptr`).
    :ivar signals: address (int) of this rank's launch-wide signal area, a
        *symmetric* array of uint64 words (for :func:`pkb_nvshmem.barrier`).
    :ivar signal_slots: how many barrier slots the area holds at this world
        size (one per program and channel).
    :ivar rank: this rank (its NVSHMEM PE number).
    :ivar world_size: number of ranks (PEs).
    :ivar device: the tensor's device.

    The tensor itself is a symmetric address too: pass it to the kernel and
    give it to ``nvshmem.get/put`` with a PE number.
    """

    ptrs: int
    signals: int
    signal_slots: int
    rank: int
    world_size: int
    device: torch.device

    def grid(self, numel: int, block: int, channels: int = 1, max_programs: int | None = None) -> int:
        """Programs to launch for ``numel`` elements in blocks of ``block``.

        At least 1; at most one per block of work, one per SM, ``max_programs``
        if given, and what the signal area holds for ``channels`` barrier
        channels. Derive ``numel`` from a size every rank shares so that every
        rank launches the same grid: the barrier pairs program i of each rank.
        """
        cap = _sm_count(self.device)
        if max_programs is not None:
            cap = min(cap, max_programs)
        cap = min(cap, self.signal_slots // channels)
        return max(1, min(cap, -(-numel // block)))

    def chunk(self, numel: int, grid: int, itemsize: int) -> int:
        """Elements per program when ``grid`` programs split ``numel`` elements
        of ``itemsize`` bytes: every program's part starts 256 bytes after the
        previous one's (:func:`pkb_nvshmem.common.aligned_share`), so NVSHMEM
        copies it with wide words. Programs past the end get nothing."""
        from pkb_nvshmem.common import aligned_share

        return aligned_share(numel, grid, itemsize)


@functools.lru_cache(maxsize=None)
def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def peers(tensor: torch.Tensor) -> Symmetric:
    """:class:`Symmetric` of a tensor in the symmetric heap: every tensor
    argument of ``solution`` (each at offset 0 of its own allocation), or a
    view of one (``ptrs`` then points at the view on every rank).

    :raises LookupError: the tensor is not in the symmetric heap (say one the
        solution made with ``torch.empty``).
    :raises RuntimeError: outside a worker of the ``nvshmem`` backend.
    """
    from pkb_nvshmem import _runtime

    handle = handle_of(tensor)
    signals = _runtime.signals()
    slots = signals.numel() // slot_words(handle.world_size)
    return Symmetric(ptrs=_pointer_table(handle, tensor), signals=signals.data_ptr(), signal_slots=slots,
                     rank=handle.rank, world_size=handle.world_size, device=tensor.device)


_TABLES: dict = {}  # (id(handle), byte offset) -> (handle, uint64 table tensor)


def _pointer_table(handle, tensor) -> int:
    """``handle.buffer_ptrs_dev`` when the tensor starts a buffer; else a cached
    device table of ``buffer_ptrs[p] + offset`` (symm_mem's memory pool may
    hand out tensors inside a larger segment: the offset is the same on every
    rank)."""
    offset = tensor.data_ptr() - handle.buffer_ptrs[handle.rank]
    if offset == 0:
        return int(handle.buffer_ptrs_dev)
    if offset < 0:
        raise LookupError("tensor lies before its symmetric buffer")
    key = (id(handle), offset)
    entry = _TABLES.get(key)
    if entry is None or entry[0] is not handle:
        table = torch.tensor([p + offset for p in handle.buffer_ptrs], dtype=torch.int64, device=tensor.device)
        entry = _TABLES[key] = (handle, table)
    return entry[1].data_ptr()


def _reset() -> None:
    _TABLES.clear()
