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

import torch
import torch.distributed as dist

from pkb_core.symmetric import register_allocation

SIGNAL_PAD_BYTES = 4096
ALIGN = 256


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def current_stream():
    """torch's current CUDA stream in the form nvshmem4py's on-stream calls take."""
    import nvshmem.core as nvs

    return nvs.NvshmemStream(torch.cuda.current_stream())


def stream_barrier() -> None:
    """``nvshmemx_barrier_on_stream`` over every PE, on torch's current stream:
    work queued before it on every rank completes (puts included) before work
    queued after it starts."""
    import nvshmem.core as nvs

    nvs.barrier(nvs.Teams.TEAM_WORLD, stream=current_stream())


class Nvshmem4pyHandle:
    """One allocation's handle, with torch's attribute names."""

    def __init__(self, base: torch.Tensor, peers: list, buffer_size: int, rank: int):
        self._base = base
        self._peers = peers  # one uint8 tensor per rank: that rank's whole allocation, mapped here
        self.rank = rank
        self.world_size = len(peers)
        self.buffer_size = buffer_size
        self.signal_pad_size = SIGNAL_PAD_BYTES
        self.offset = 0
        self.multicast_ptr = 0
        self.buffer_ptrs = [p.data_ptr() for p in peers]
        self.signal_pad_ptrs = [p.data_ptr() + buffer_size for p in peers]
        device = base.device
        self._buffer_table = torch.tensor(self.buffer_ptrs, dtype=torch.int64, device=device)
        self._signal_table = torch.tensor(self.signal_pad_ptrs, dtype=torch.int64, device=device)
        self.buffer_ptrs_dev = self._buffer_table.data_ptr()
        self.signal_pad_ptrs_dev = self._signal_table.data_ptr()

    def get_buffer(self, rank, sizes, dtype, storage_offset=0):
        itemsize = torch.empty((), dtype=dtype).element_size()
        numel = 1
        for s in sizes:
            numel *= s
        start = storage_offset * itemsize
        return self._peers[rank][start:start + numel * itemsize].view(dtype).view(tuple(sizes))

    def get_signal_pad(self, rank, sizes=None, dtype=torch.int32):
        pad = self._peers[rank][self.buffer_size:self.buffer_size + SIGNAL_PAD_BYTES].view(dtype)
        if sizes is None:
            return pad
        numel = 1
        for s in sizes:
            numel *= s
        return pad[:numel].view(tuple(sizes))

    def barrier(self, channel=0, timeout_ms=None):
        """NVSHMEM's barrier over every PE, on torch's current stream."""
        stream_barrier()

    @staticmethod
    def get_backend(device=None):
        return "NVSHMEM4PY"


class Nvshmem4pyHeap:
    """Symmetric tensors from nvshmem4py (collective: same order and size everywhere)."""

    def __init__(self, device, rank: int, world_size: int, control_group):
        self.device = device
        self.rank = rank
        self.world_size = world_size
        self.control_group = control_group
        self.tensors = []  # freed collectively, in allocation order, by close()

    def empty(self, shape, dtype) -> torch.Tensor:
        import nvshmem.core as nvs

        from pkb_core.guards import harness_call

        itemsize = torch.empty((), dtype=dtype).element_size()
        numel = 1
        for s in shape:
            numel *= s
        nbytes = max(numel * itemsize, 16)
        buffer_size = _round_up(nbytes, ALIGN)
        base = nvs.tensor((buffer_size + SIGNAL_PAD_BYTES,), dtype=torch.uint8)
        self.tensors.append(base)
        base[buffer_size:].zero_()
        peers = [base if p == self.rank else nvs.get_peer_tensor(base, p) for p in range(self.world_size)]
        handle = Nvshmem4pyHandle(base, peers, buffer_size, self.rank)
        register_allocation(base.data_ptr(), nbytes, handle)
        # Every pad is zero before any rank can signal into it.
        torch.cuda.current_stream().synchronize()
        with harness_call():
            dist.barrier(group=self.control_group)
        return base[: numel * itemsize].view(dtype).view(tuple(shape))

    def close(self) -> None:
        """Free every tensor (collective, the same order on every rank)."""
        import nvshmem.core as nvs

        torch.cuda.synchronize(self.device)
        for t in self.tensors:
            nvs.free_tensor(t)
        self.tensors = []
