"""The CUDA symmetric heap: torch symm_mem (CUDA backend, no multicast).

Every allocation is ``symm_mem.empty`` of bytes followed by a rendezvous on
the world group, so its handle carries peer pointers, signal pads and a device
barrier. Rendezvous order must be the same on every rank (pytorch#196082), so
the harness allocates in one fixed order; never on a subgroup.
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist

from pkb_core.symmetric.handles import register_allocation


class TorchSymmetricHeap:
    """Allocates symm_mem tensors on ``device``; collective over ``group``."""

    def __init__(self, device, group=None):
        import torch.distributed._symmetric_memory as symm_mem

        self._symm_mem = symm_mem
        self.device = device
        self.group_name = (group or dist.group.WORLD).group_name
        self.handles = []

    def empty(self, shape, dtype):
        itemsize = torch.empty((), dtype=dtype).element_size()
        numel = math.prod(shape)
        nbytes = max(numel * itemsize, 16)
        buf = self._symm_mem.empty(nbytes, dtype=torch.uint8, device=self.device)
        handle = self._symm_mem.rendezvous(buf, self.group_name)
        self.handles.append((buf, handle))
        register_allocation(buf.data_ptr(), nbytes, handle)
        return buf[: numel * itemsize].view(dtype).view(tuple(shape))

    def close(self):
        self.handles.clear()
