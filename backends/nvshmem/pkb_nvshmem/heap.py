"""The ``nvshmem`` backend's symmetric heap: torch symm_mem on its NVSHMEM backend.

Each allocation is ``symm_mem.empty`` (``nvshmem_malloc`` underneath, so its
local address is an NVSHMEM *symmetric address* that the device API accepts)
followed by a rendezvous on the world group, which gives the peer pointers
(``nvshmem_ptr``) and signal pads. Allocation is collective: every rank
allocates in the same order with the same size (the very first one also
bootstraps NVSHMEM, pytorch#195501).

The handle is torch's, wrapped so that ``barrier()`` works: in torch 2.11
``barrier``/``put_signal``/``wait_signal`` of the NVSHMEM backend are no-ops
(pytorch#191858). Here ``barrier()`` waits for this rank's stream and then
meets the other ranks on the harness's gloo group: correct, but a host round
trip (tens of microseconds) that cannot be captured in a CUDA graph. Kernels
synchronise with :func:`pkb_nvshmem.barrier` instead.
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist

from pkb_core import register_allocation

#: Bytes of the launch-wide signal area (uint64 words) used by
#: :func:`pkb_nvshmem.lang.barrier`.
SIGNAL_BYTES = 64 * 1024
ALIGN = 16


class NvshmemHandle:
    """torch's symmetric-memory handle with a working host ``barrier``.

    Every other attribute (``rank``, ``world_size``, ``buffer_ptrs``,
    ``signal_pad_ptrs``, ``buffer_ptrs_dev``, ``signal_pad_ptrs_dev``,
    ``buffer_size``, ``signal_pad_size``, ``get_buffer``, ``get_signal_pad``)
    is torch's own.
    """

    #: NVSHMEM's heap gives no multicast address (a class attribute, so pkb's
    #: multicast gate can watch its reads: pkb_core.candidate.multicast_gate).
    multicast_ptr = 0

    def __init__(self, handle, barrier):
        self._handle = handle
        self._barrier = barrier

    def __getattr__(self, name):
        return getattr(self._handle, name)

    def barrier(self, channel=0, timeout_ms=None):
        """Wait for this rank's device work, then for every rank (host side)."""
        self._barrier()

    @staticmethod
    def get_backend(device=None):
        return "NVSHMEM"


class NvshmemHeap:
    """Symmetric tensors from torch symm_mem with ``set_backend("NVSHMEM")``.

    :param device: this rank's CUDA device.
    :param barrier: the job's barrier among ranks (``WorkerContext.barrier``:
        finishes this rank's device work, then meets every rank).
    """

    def __init__(self, device, barrier):
        import torch.distributed._symmetric_memory as symm_mem

        self._symm_mem = symm_mem
        self.device = device
        self.barrier = barrier
        self.buffers = []  # kept alive for the launch: freeing is collective in NVSHMEM
        self.signals = None

    def raw(self, nbytes: int) -> torch.Tensor:
        """``nbytes`` of symmetric memory (uint8), no rendezvous (collective)."""
        buf = self._symm_mem.empty(max(int(nbytes), ALIGN), dtype=torch.uint8, device=self.device)
        self.buffers.append(buf)
        return buf

    def start(self) -> None:
        """Allocate and zero the signal area (the first allocation: it
        bootstraps NVSHMEM), then wait until every rank has zeroed its own."""
        self.signals = self.raw(SIGNAL_BYTES).view(torch.int64)
        self.signals.zero_()
        self.barrier()

    def empty(self, shape, dtype) -> torch.Tensor:
        itemsize = torch.empty((), dtype=dtype).element_size()
        numel = math.prod(shape)
        nbytes = max(numel * itemsize, ALIGN)
        buf = self.raw(nbytes)
        # Always the world group, in the same order on every rank (pytorch#196082).
        handle = NvshmemHandle(self._symm_mem.rendezvous(buf, dist.group.WORLD.group_name), self.barrier)
        self.buffers.append(handle)
        register_allocation(buf.data_ptr(), nbytes, handle)
        return buf[: numel * itemsize].view(dtype).view(tuple(shape))

    def close(self) -> None:
        """Let queued work finish. The buffers stay referenced until the process
        exits: ``nvshmem_free`` is collective, and tensors dropped in different
        orders on different ranks would deadlock it."""
        if torch.cuda.is_available():
            torch.cuda.synchronize(self.device)
        _KEEP.extend(self.buffers)
        self.buffers = []


_KEEP: list = []
