"""Device-side helpers for ``nvshmem`` solutions (``@triton.jit`` functions).

They use torch's Triton bindings of the NVSHMEM device library
(``torch.distributed._symmetric_memory._nvshmem_triton``, imported here as
``nvshmem``): a kernel that calls them (or any ``nvshmem.*`` function) must
be decorated with :func:`requires_nvshmem` above ``@triton.jit``, which links
``libnvshmem_device.bc`` and initialises the compiled module for NVSHMEM.

The barrier is built from NVSHMEM signals. Each program owns one *slot* of
``W + 1`` uint64 words in the launch-wide symmetric signal area: word ``p``
holds the latest epoch at which rank p arrived at this slot, word ``W`` this
rank's own count of barriers passed on the slot. A barrier computes ``epoch =
count + 1``, sets word ``rank`` to ``epoch`` on every rank (``signal_op`` with
``NVSHMEM_SIGNAL_SET``), waits until every word ``p`` of its own slot is ``>=
epoch`` (``signal_wait_until``), then stores ``count = epoch``. Nothing is
reset, so a fast rank that already arrived at the next barrier cannot erase a
signal (it only raises the epoch), and the counters live on the GPU, so CUDA
graph replays stay in step. Every rank must pass the same sequence of
barriers on each slot (same grid, same calls), which the pull pattern gives.

Triton runs scalar code in every thread of a program, so every thread issues
the same ``signal_op`` (setting the same value: harmless, and a warp's stores
to one address coalesce into one) and every thread waits;
``tl.debug_barrier()`` orders the program's threads around it. On NVLink
peers NVSHMEM's ``SIGNAL_SET`` is a volatile store into the peer's word and
the wait a volatile load loop (seen in the compiled PTX).
"""
from __future__ import annotations

import triton
import triton.language as tl
from torch.distributed._symmetric_memory import _nvshmem_triton as nvshmem

# NVSHMEM's constants, as its headers define them (NVSHMEM 3.4.5:
# device_host_transport/nvshmem_common_transport.h and nvshmem_constants.h).
# The docstrings of torch's _nvshmem_triton give other numbers (SET 0, ADD 5,
# GE 3): with those, signal_op adds instead of setting and a ">=" wait is a
# "<=" wait. tests/backends/test_nvshmem.py checks these against the headers.
#: ``nvshmem.signal_op`` operation: store the value (``NVSHMEM_SIGNAL_SET``).
SIGNAL_SET: tl.constexpr = tl.constexpr(9)
#: ``nvshmem.signal_op`` operation: add the value (``NVSHMEM_SIGNAL_ADD``).
SIGNAL_ADD: tl.constexpr = tl.constexpr(10)
#: ``signal_wait_until`` / ``wait_until`` comparisons (``NVSHMEM_CMP_*``).
CMP_EQ: tl.constexpr = tl.constexpr(0)
CMP_NE: tl.constexpr = tl.constexpr(1)
CMP_GT: tl.constexpr = tl.constexpr(2)
CMP_LE: tl.constexpr = tl.constexpr(3)
CMP_LT: tl.constexpr = tl.constexpr(4)
CMP_GE: tl.constexpr = tl.constexpr(5)

requires_nvshmem = nvshmem.requires_nvshmem


@triton.jit
def barrier(signals, rank, WORLD: tl.constexpr, channel):
    """Wait until program ``tl.program_id(0)`` of every rank has arrived here.

    :param signals: ``Symmetric.signals`` (int address of the signal area).
    :param rank: this rank (its PE number).
    :param WORLD: the world size (constexpr).
    :param channel: which set of slots (0, 1, ...): slot ``channel *
        num_programs + program_id``. Needs ``(channel + 1) * num_programs <=
        Symmetric.signal_slots`` and the same grid on every rank.

    Call it first (every peer's inputs are in place) and last (no rank
    returns, letting the harness overwrite its inputs, while a peer still
    reads them). Reads and ``nvshmem.get`` calls made before it are complete
    when it returns on the peers; ``nvshmem.put`` calls need
    ``nvshmem.quiet()`` (or ``fence()``) before it.
    """
    slot = channel * tl.num_programs(0) + tl.program_id(0)
    base = signals.to(tl.pointer_type(tl.uint64)) + slot * (WORLD + 1)
    tl.debug_barrier()  # the whole program is done with what came before
    epoch = tl.load(base + WORLD, volatile=True) + 1
    for p in tl.static_range(WORLD):
        nvshmem.signal_op((base + rank).to(tl.int64), epoch.to(tl.int64), SIGNAL_SET, p)
    for p in tl.static_range(WORLD):
        nvshmem.signal_wait_until(base + p, CMP_GE, epoch)
    tl.debug_barrier()  # every thread saw every arrival before the count moves on
    tl.store(base + WORLD, epoch)
    tl.debug_barrier()


@triton.jit
def peer_ptr(table, peer, like):
    """Rank ``peer``'s copy of a symmetric tensor as a typed pointer, for
    direct loads and stores over NVLink (``nvshmem_ptr``).

    :param table: ``Symmetric.ptrs``.
    :param peer: the rank to reach (may be this rank).
    :param like: a pointer whose element type the result takes.
    """
    address = tl.load(table.to(tl.pointer_type(tl.uint64)) + peer)
    return tl.multiple_of(address.to(tl.pointer_type(like.dtype.element_ty)), 16)
