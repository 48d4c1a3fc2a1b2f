"""All-gather in plain PyTorch, copying each peer's input out of the symmetric heap.

Slot ``p`` of the new (W, M, N) output is rank p's ``tensor``, read through the
heap handle's view of that rank's buffer. Heap barriers before and after the
copies, as in every pull-style solution.
"""
import torch

from pkb_core.symmetric import handle_of


def peer_view(handle, tensor, peer):
    """Rank ``peer``'s copy of ``tensor``. The offset is counted from this rank's
    entry of the handle's buffer table: torch symm_mem's table may hold bases
    that lie before the allocation, and only this difference holds on every rank."""
    offset = (tensor.data_ptr() - handle.buffer_ptrs[handle.rank]) // tensor.element_size()
    return handle.get_buffer(peer, tuple(tensor.shape), tensor.dtype, offset)


def solution(tensor):
    handle = handle_of(tensor)
    world_size = handle.world_size
    out = torch.empty((world_size, *tensor.shape), dtype=tensor.dtype, device=tensor.device)
    handle.barrier()
    for peer in range(world_size):
        out[peer].copy_(peer_view(handle, tensor, peer))
    handle.barrier()
    return out
