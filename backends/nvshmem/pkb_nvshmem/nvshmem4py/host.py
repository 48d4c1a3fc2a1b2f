"""Host-side helpers for ``nvshmem4py`` solutions (Numba-CUDA kernels)."""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from pkb_core import handle_of


@dataclass(frozen=True)
class Peers:
    """Where a symmetric tensor lives, for a kernel that moves it with NVSHMEM.

    :ivar rank: this rank, which is also its NVSHMEM PE number.
    :ivar world_size: number of ranks (PEs).
    :ivar device: the tensor's device.

    The tensor itself is the symmetric address NVSHMEM wants: pass
    :func:`as_bytes` of it (or ``numba.cuda.as_cuda_array``) to the kernel
    and name the PE in ``nvd.get_block(dst, src, pe)``.
    """

    rank: int
    world_size: int
    device: torch.device

    def blocks(self, nbytes: int, per_block: int = 1 << 16) -> int:
        """Thread blocks for moving ``nbytes`` per peer: at least 1, at most
        one per ``per_block`` bytes and one per SM. Derive ``nbytes`` from a
        size every rank shares, so every rank launches the same grid."""
        return max(1, min(sm_count(self.device), -(-nbytes // per_block)))

    def share(self, nbytes: int, blocks: int) -> int:
        """Bytes per block when ``blocks`` blocks split ``nbytes``: each block's
        part starts 256 bytes after the previous one's, so NVSHMEM's block
        copies use wide words (:func:`pkb_nvshmem.common.aligned_share`).
        Blocks past the end get nothing."""
        from pkb_nvshmem.common import aligned_share

        return aligned_share(nbytes, blocks)


@functools.lru_cache(maxsize=None)
def sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def peers(tensor: torch.Tensor) -> Peers:
    """:class:`Peers` of a tensor in the symmetric heap (every tensor argument
    of ``solution``). Raises ``LookupError`` for any other tensor."""
    handle = handle_of(tensor)
    return Peers(rank=handle.rank, world_size=handle.world_size, device=tensor.device)


def as_bytes(tensor: torch.Tensor):
    """A 1-D uint8 Numba device array over ``tensor``'s bytes (any dtype,
    bfloat16 included, which Numba cannot type). Contiguous tensors only."""
    from numba import cuda

    if not tensor.is_contiguous():
        raise ValueError("as_bytes needs a contiguous tensor")
    return cuda.as_cuda_array(tensor.reshape(-1).view(torch.uint8))


def stream():
    """torch's current CUDA stream as a Numba stream: launch kernels on it
    (``kernel[blocks, threads, stream()](...)``) so they stay in order with
    torch's work and with :func:`barrier`. One Numba stream per CUDA stream
    is kept: the profile of an eager call showed ~100 µs of host time where
    a new one was made on every call (docs/benchmarks/2026-11-22-h200x2-c.md)."""
    return _numba_stream(torch.cuda.current_stream().cuda_stream)


@functools.lru_cache(maxsize=None)
def _numba_stream(handle: int):
    # The Numba stream holds only the handle's value, which is what the launch
    # and torch both name the stream by: keeping it cannot go stale.
    from numba import cuda

    return cuda.external_stream(handle)


def barrier() -> None:
    """NVSHMEM's barrier over every PE, enqueued on torch's current stream
    (``nvshmem.core.barrier(Teams.TEAM_WORLD, stream)``): what every rank
    queued before it, NVSHMEM puts included, is complete before anything
    queued after it runs. Call it before a kernel reads peers (their inputs
    are in place) and after (nobody overwrites an input a peer still reads)."""
    from pkb_nvshmem.nvshmem4py.heap import stream_barrier

    stream_barrier()
