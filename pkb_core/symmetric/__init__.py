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
from pkb_core.symmetric.handles import forget_allocations, handle_of, peer_offset, register_allocation
from pkb_core.symmetric.heaps import default_heap

__all__ = ["default_heap", "forget_allocations", "handle_of", "peer_offset", "register_allocation"]
