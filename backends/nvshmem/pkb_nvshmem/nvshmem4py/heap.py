"""The ``nvshmem4py`` backend's symmetric heap: ``nvshmem.core.tensor``.

Each allocation is one NVSHMEM tensor (``nvshmem_malloc``, collective) that
holds the data buffer followed by a zeroed 4096-byte signal pad, so the
handle has the attribute names of torch's symmetric-memory handle
(``pkb_core.symmetric``) and solutions written against that contract work
here too. Peer views come from ``nvshmem.core.get_peer_tensor``
(``nvshmem_ptr``); ``barrier()`` is NVSHMEM's own team barrier, enqueued on
torch's current stream.
"""
from __future__ import annotations

import math

import torch

from pkb_core import register_allocation
from pkb_core import MappedHandle

SIGNAL_PAD_BYTES = 4096
ALIGN = 256


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


#: NvshmemStream wrappers by CUDA stream handle, made once rather than on
#: every barrier: eager calls are host-bound (docs/benchmarks/2026-11-22-h200x2-c.md).
#: A wrapper holds its torch stream object, so its handle cannot be reused.
_STREAMS: dict = {}


def current_stream():
    """torch's current CUDA stream in the form nvshmem4py's on-stream calls take."""
    stream = torch.cuda.current_stream()
    wrapped = _STREAMS.get(stream.cuda_stream)
    if wrapped is None:
        import nvshmem.core as nvs

        wrapped = _STREAMS[stream.cuda_stream] = nvs.NvshmemStream(stream)
    return wrapped


def stream_barrier() -> None:
    """``nvshmemx_barrier_on_stream`` over every PE, on torch's current stream:
    work queued before it on every rank completes (puts included) before work
    queued after it starts."""
    import nvshmem.core as nvs

    nvs.barrier(nvs.Teams.TEAM_WORLD, stream=current_stream())


class Nvshmem4pyHandle(MappedHandle):
    """One allocation's handle, with torch's attribute names."""

    def __init__(self, base: torch.Tensor, peers: list, buffer_size: int, rank: int):
        # peers: one uint8 tensor per rank, that rank's whole allocation (nvshmem_ptr views)
        super().__init__(peers, rank, buffer_size, SIGNAL_PAD_BYTES)
        self._base = base

    def barrier(self, channel=0, timeout_ms=None):
        """NVSHMEM's barrier over every PE, on torch's current stream."""
        stream_barrier()

    @staticmethod
    def get_backend(device=None):
        return "NVSHMEM4PY"


class Nvshmem4pyHeap:
    """Symmetric tensors from nvshmem4py (collective: same order and size everywhere)."""

    def __init__(self, device, rank: int, world_size: int, barrier):
        self.device = device
        self.rank = rank
        self.world_size = world_size
        self.barrier = barrier
        self.tensors = []  # freed collectively, in allocation order, by close()

    def empty(self, shape, dtype) -> torch.Tensor:
        import nvshmem.core as nvs

        itemsize = torch.empty((), dtype=dtype).element_size()
        numel = math.prod(shape)
        nbytes = max(numel * itemsize, 16)
        buffer_size = _round_up(nbytes, ALIGN)
        base = nvs.tensor((buffer_size + SIGNAL_PAD_BYTES,), dtype=torch.uint8)
        self.tensors.append(base)
        base[buffer_size:].zero_()
        peers = [base if p == self.rank else nvs.get_peer_tensor(base, p) for p in range(self.world_size)]
        handle = Nvshmem4pyHandle(base, peers, buffer_size, self.rank)
        register_allocation(base.data_ptr(), nbytes, handle)
        # Every pad is zero before any rank can signal into it.
        self.barrier()
        return base[: numel * itemsize].view(dtype).view(tuple(shape))

    def close(self) -> None:
        """Free every tensor (collective, the same order on every rank)."""
        import nvshmem.core as nvs

        torch.cuda.synchronize(self.device)
        for t in self.tensors:
            nvs.free_tensor(t)
        self.tensors = []
