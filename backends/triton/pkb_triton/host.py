"""Host-side helpers for Triton solutions: pointer tables, grid size, workspace."""
from __future__ import annotations

import functools
import sys
from dataclasses import dataclass

import torch

from pkb_core import handle_of

#: Programs per launch under the interpreter (it runs them one after another).
CPU_MAX_PROGRAMS = 8
ALIGNMENT = 16

_TABLES: dict = {}  # (id(handle), byte offset) -> (handle, uint64 table tensor)
_PADS: dict = {}  # id(handle) -> (handle, uint64 table tensor: the ranks' pads, then the slots a pad holds)
_PAD_TABLES: dict = {}  # a pad table's address -> (its pad's slots, world size): what a launch is checked against


class GridTooWide(Exception):
    """A launch with more programs than the barrier's signal pad has slots for."""

    #: The message names the grid and the pad; where in pkb it was raised is no news.
    pkb_refusal = True


@dataclass(frozen=True)
class Peers:
    """What a kernel needs to reach every rank's copy of one symmetric tensor.

    :ivar ptrs: address (int) of a uint64 table: entry p is the address of
        this tensor's copy on rank p, as this process reaches it.
    :ivar pads: address (int) of a uint64 table of the ranks' signal pads
        (int32 slots, zero between barriers), followed by one more entry, the
        number of slots a pad holds: :func:`pkb_triton.barrier` reads it, so
        that it never reaches past a pad.
    :ivar rank: this rank.
    :ivar world_size: number of ranks.
    :ivar pad_slots: int32 slots per pad (1024 on the CPU heap).
    :ivar device: the tensor's device.
    """

    ptrs: int
    pads: int
    rank: int
    world_size: int
    pad_slots: int
    device: torch.device

    def grid(self, numel: int, block: int, channels: int = 1, max_programs: int | None = None) -> int:
        """Programs to launch for ``numel`` elements in blocks of ``block``.

        At least 1; at most one per block of work, one per SM on a GPU
        (:data:`CPU_MAX_PROGRAMS` in the interpreter), ``max_programs`` if
        given, and what the pad holds for ``channels`` barrier channels. Use
        a size that is the same on every rank (the output's, say), so that
        every rank launches the same grid: the barrier pairs program i of
        each rank.
        """
        cap = _device_programs(self.device)
        if max_programs is not None:
            cap = min(cap, max_programs)
        cap = min(cap, _pad_programs(self.world_size, self.pad_slots, channels))
        return max(1, min(cap, -(-numel // block)))


def max_programs(world_size: int, pad_slots: int = 1024, channels: int = 1) -> int:
    """The largest grid the barrier supports: ``pad_slots // (world_size * channels)``.

    :raises ValueError: when the pad cannot hold even one program's slots.
    """
    programs = pad_slots // (world_size * channels)
    if programs < 1:
        raise ValueError(f"a signal pad of {pad_slots} slots has no room for {channels} barrier channel(s) "
                         f"at world size {world_size}")
    return programs


_pad_programs = max_programs


@functools.lru_cache(maxsize=None)
def _device_programs(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return CPU_MAX_PROGRAMS


def peers(tensor: torch.Tensor) -> Peers:
    """The pointer and signal-pad tables of a symmetric tensor.

    :param tensor: an input the harness placed (every tensor argument of
        ``solution``), or a :func:`workspace`. Contiguous.
    :raises LookupError: for a tensor outside the symmetric heap (say one the
        solution made with ``torch.empty``).

    The tables belong to the allocation and stay valid for the whole job.
    Every rank's copy sits at the same byte offset inside its allocation, so
    entry p is ``handle.buffer_ptrs[p] + (tensor.data_ptr() -
    handle.buffer_ptrs[rank])``; for an input (always at offset 0) that is
    the handle's own ``buffer_ptrs_dev`` table, with nothing to build.
    """
    handle = handle_of(tensor)
    offset = tensor.data_ptr() - handle.buffer_ptrs[handle.rank]
    if offset == 0:
        ptrs = handle.buffer_ptrs_dev
        addresses = handle.buffer_ptrs
    else:
        key = (id(handle), offset)
        entry = _TABLES.get(key)
        if entry is None or entry[0] is not handle:
            table = torch.tensor([p + offset for p in handle.buffer_ptrs], dtype=torch.int64, device=tensor.device)
            entry = _TABLES[key] = (handle, table)
        ptrs = entry[1].data_ptr()
        addresses = [p + offset for p in handle.buffer_ptrs]
    if any(a % ALIGNMENT for a in addresses):
        raise ValueError(f"peer addresses of this tensor are not {ALIGNMENT}-byte aligned")
    pad_slots = int(getattr(handle, "signal_pad_size", 4096)) // 4
    entry = _PADS.get(id(handle))
    if entry is None or entry[0] is not handle:
        table = torch.tensor([*handle.signal_pad_ptrs, pad_slots], dtype=torch.int64, device=tensor.device)
        entry = _PADS[id(handle)] = (handle, table)
        _PAD_TABLES[table.data_ptr()] = (pad_slots, handle.world_size)
    return Peers(ptrs=ptrs, pads=entry[1].data_ptr(), rank=handle.rank, world_size=handle.world_size,
                 pad_slots=pad_slots, device=tensor.device)


def check_grid(programs: int, args, other_axes: tuple = ()) -> None:
    """Refuse a launch of ``programs`` programs along axis 0 (and ``other_axes`` along the others)
    handed a pad table among ``args`` (``Peers.pads``) whose barrier would not synchronise it: a
    grid wider than one channel of the pad holds, or one of more than one axis (the barrier's slots
    follow axis 0 alone, so programs along another would share them; :func:`pkb_triton.barrier`
    never reaches past a pad).

    :raises GridTooWide: naming the grid, the pad and the widest grid it holds.
    """
    for arg in args:
        found = _PAD_TABLES.get(arg) if type(arg) is int else None
        if found is not None and any(a != 1 for a in other_axes):
            raise GridTooWide(f"a grid of {(programs, *other_axes)} programs for a kernel handed the barrier's "
                              f"signal pad: the barrier's slots follow axis 0 alone, so launch a one-dimensional grid")
        if found is not None and programs * found[1] > found[0]:
            slots, world = found
            raise GridTooWide(f"a grid of {programs} programs is wider than the barrier's signal pad: at world "
                              f"size {world} it needs {programs * world} slots and the pad has {slots}, room for "
                              f"at most {slots // world} programs a channel (Peers.grid picks a grid that fits)")


_WORKSPACES: dict = {}


def workspace(numel: int, dtype: torch.dtype, tag: str = "") -> torch.Tensor:
    """A symmetric scratch tensor of ``numel`` elements, cached for the launch.

    Peers reach it through :func:`peers` like an input. The first request for
    a given ``(tag, numel, dtype)`` allocates from a heap of the backend's own
    (torch symm_mem on GPU, shared memory on CPU); that is **collective**:
    every rank must make the same requests in the same order, with sizes that
    agree on every rank (derive them from a shape all ranks share). Later
    requests return the same tensor, so contents persist between calls; a
    solution must not assume any initial contents (it starts uninitialised)
    and must guard reuse with :func:`pkb_triton.barrier` like any peer data.

    Only for data that peers must read from you (two-shot algorithms, pushes);
    outputs are plain ``torch.empty`` tensors.
    """
    from pkb_triton import _runtime

    key = (tag, int(numel), dtype)
    tensor = _WORKSPACES.get(key)
    if tensor is None:
        tensor = _runtime.current().heap().empty((int(numel),), dtype)
        _WORKSPACES[key] = tensor
    return tensor


def _reset() -> None:
    """Forget the tables and workspaces (the launch is ending), the push workspaces too."""
    _TABLES.clear()
    _PADS.clear()
    _PAD_TABLES.clear()
    _WORKSPACES.clear()
    push = sys.modules.get("pkb_triton.push")  # loaded only if a solution pushed
    if push is not None:
        push._reset()
