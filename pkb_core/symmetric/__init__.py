"""The symmetric allocator contract.

A *symmetric heap* allocates tensors that every peer can reach: each rank calls
``heap.empty(shape, dtype)`` in the same order (it is collective), gets a tensor
on its own device, and can look up the allocation's *handle* with
:func:`handle_of`. A handle has the attribute names of torch's
``_SymmetricMemory`` so one solution runs on every heap:

``rank``, ``world_size``
    This rank and the number of ranks.
``buffer_ptrs`` / ``signal_pad_ptrs``
    Lists of ints, one per rank: the address at which *this process* reaches
    rank p's buffer / signal pad (never send these to another rank).
``buffer_ptrs_dev`` / ``signal_pad_ptrs_dev``
    Ints: the address of a uint64 table of the above, readable by kernels.
``buffer_size`` / ``signal_pad_size``
    Bytes per rank.
``get_buffer(rank, sizes, dtype, storage_offset=0)``
    A tensor view of rank p's buffer, usable locally.
``get_signal_pad(rank, sizes=None, dtype=None)``
    A view of rank p's signal pad (zeroed at allocation; int32 words).
``barrier(channel=0)``
    A host-visible barrier among the ranks of the allocation.

Heaps: :class:`pkb_core.symmetric.torch_heap.TorchSymmetricHeap` (CUDA, torch
symm_mem) and :class:`pkb_core.symmetric.shm.SharedMemoryHeap` (CPU: shared
memory segments mapped by every rank, so Triton kernels run unchanged under
``TRITON_INTERPRET=1``). Backends with their own heap (NVSHMEM) provide
another through ``pkb_backend_allocate`` and register their handles here.
"""
from __future__ import annotations

_HANDLES: dict[int, tuple[int, object]] = {}


def register_allocation(base_ptr: int, nbytes: int, handle) -> None:
    """Record that ``[base_ptr, base_ptr + nbytes)`` belongs to ``handle``."""
    _HANDLES[base_ptr] = (nbytes, handle)


def forget_allocations() -> None:
    """Drop every record (the heap that made them is closing)."""
    _HANDLES.clear()


def handle_of(tensor):
    """The symmetric handle of the allocation that holds ``tensor``.

    Raises ``LookupError`` for a tensor that is not in a symmetric heap (for
    example one the solution allocated itself with ``torch.empty``).
    """
    ptr = tensor.data_ptr()
    for base, (nbytes, handle) in _HANDLES.items():
        if base <= ptr < base + nbytes:
            return handle
    raise LookupError("tensor is not in a symmetric heap: only inputs placed by the harness (or "
                      "tensors from the backend's allocator) have peers")


def peer_offset(tensor) -> int:
    """Byte offset of ``tensor`` inside its allocation (the same on every rank)."""
    ptr = tensor.data_ptr()
    for base, (nbytes, _) in _HANDLES.items():
        if base <= ptr < base + nbytes:
            return ptr - base
    raise LookupError("tensor is not in a symmetric heap")


def default_heap(device, barrier, run_id: str, rank: int, world_size: int):
    """The core's heap for ``device``: torch symm_mem over the world group on
    CUDA; on CPU, shared memory coordinated through ``barrier`` (a zero-argument
    barrier among the ranks)."""
    if device.type == "cuda":
        from pkb_core.symmetric.torch_heap import TorchSymmetricHeap

        return TorchSymmetricHeap(device)
    from pkb_core.symmetric.shm import SharedMemoryHeap

    return SharedMemoryHeap(rank, world_size, barrier, run_id)
