"""The core's default symmetric heap for a device."""
from __future__ import annotations


def default_heap(device, barrier, run_id: str, rank: int, world_size: int):
    """The core's heap for ``device``: torch symm_mem over the world group on
    CUDA; on CPU, shared memory coordinated through ``barrier`` (a zero-argument
    barrier among the ranks)."""
    if device.type == "cuda":
        from pkb_core.symmetric.torch_heap import TorchSymmetricHeap

        return TorchSymmetricHeap(device)
    from pkb_core.symmetric.shm import SharedMemoryHeap

    return SharedMemoryHeap(rank, world_size, barrier, run_id)
