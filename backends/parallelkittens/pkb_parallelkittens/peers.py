"""Per-rank addresses and signal pads of a symmetric tensor, for ThunderKittens pgls."""
from __future__ import annotations

from typing import NamedTuple

from pkb_core import handle_of

_TABLES: dict = {}  # (id(handle), byte offset) -> (handle, CPU int64 tensor)


class PglArgs(NamedTuple):
    """What a ThunderKittens solution passes to C++ for one symmetric tensor.

    The field order is the argument order the samples use:
    ``ext.fn(tensor, *pkb_parallelkittens.pgl_args(tensor))`` with the C++
    parameters ``torch::Tensor ptrs, int64_t pads, int64_t rank, int64_t
    world, int64_t max_blocks``.
    """

    #: CPU int64 tensor of ``world_size`` addresses: this tensor's copy on each
    #: rank, as this process reaches it. ``pkb::pk::make_pgl<PGL>(ptrs, b, d,
    #: r, c)`` turns it into a ``kittens::pgl<GL, W, false>``.
    ptrs: object
    #: device address of the ``uint64_t[W]`` signal-pad table
    #: (``handle.signal_pad_ptrs_dev``); in CUDA ``reinterpret_cast<uint32_t*
    #: const*>(pads)`` for ``pkb::pk::barrier``.
    pads: int
    rank: int
    world_size: int
    #: blocks a per-block barrier may use: the pad's 32-bit slots / world size.
    max_blocks: int


def pgl_args(tensor) -> PglArgs:
    """:class:`PglArgs` of a tensor in the symmetric heap (every tensor argument
    of ``solution``, or a view of one: the addresses then point at the view).

    :raises LookupError: the tensor is not in a symmetric heap.
    """
    import torch

    handle = handle_of(tensor)
    rank, world = handle.rank, handle.world_size
    offset = tensor.data_ptr() - handle.buffer_ptrs[rank]
    if offset < 0:
        raise LookupError("tensor lies before its symmetric buffer")
    key = (id(handle), offset)
    entry = _TABLES.get(key)
    if entry is None or entry[0] is not handle:
        table = torch.tensor([base + offset for base in handle.buffer_ptrs], dtype=torch.int64)
        entry = _TABLES[key] = (handle, table)
    slots = int(getattr(handle, "signal_pad_size", 4096)) // 4
    return PglArgs(entry[1], int(handle.signal_pad_ptrs_dev), rank, world, slots // world)


def _reset() -> None:
    _TABLES.clear()
