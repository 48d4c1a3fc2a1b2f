"""Device-side helpers for Triton solutions (``@triton.jit`` functions).

Both functions take *addresses as ints* (from :func:`pkb_triton.peers`): a
peer's copy has no tensor in this process, only an address, and the same ints
work on the GPU (device addresses) and in the interpreter (addresses of the
shared-memory mappings).

The barrier is the pairwise compare-and-swap handshake: rank r's pad holds one
int32 slot per (sync point, source rank); slot ``s * W + src`` = 1 means "src
has arrived at sync point s and r has not consumed that yet". Arrive: for each
rank p, CAS p's slot ``s * W + r`` from 0 to 1 (release, system scope), retrying
while the previous signal is unconsumed. Wait: for each p, CAS our own slot
``s * W + p`` from 1 back to 0 (acquire, system scope). Every slot returns to
0, so the barrier can be called any number of times, also on one slot: the
k-th wait of a rank consumes exactly the k-th arrival of each peer.

No inline assembly, so the same code runs in the interpreter (where the
atomics are ``std::atomic`` operations on the shared mapping).
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def barrier(pads, rank, WORLD: tl.constexpr, channel):
    """Wait until program ``tl.program_id(0)`` of every rank has arrived here.

    :param pads: ``Peers.pads``: address of the uint64 table of signal pads.
    :param rank: this rank.
    :param WORLD: the world size (constexpr).
    :param channel: which set of slots (0, 1, ...): slot
        ``(channel * num_programs + program_id) * WORLD + src``. The grid must
        be one-dimensional, the same on every rank, and fit the pad:
        ``(channel + 1) * num_programs * WORLD <= Peers.pad_slots``
        (:meth:`Peers.grid` picks one that does), with ``0 <= channel`` and
        ``0 <= rank < WORLD``. One that does not touches no pad: in CPU mode
        the launch is refused, naming the grid and the pad (channel 0's room
        and the grid's axes; a later or negative channel, or a rank out of
        range, faults like the GPU); on a GPU the kernel faults (an illegal
        memory access) instead of spinning on, or writing into, memory
        outside the pad.

    Only the same program id of other ranks is waited for, so programs never
    wait on a later program of their own rank (the interpreter runs them one
    after another; a GPU keeps the grid co-resident when it is at most one
    program per SM).
    """
    slot = (channel * tl.num_programs(0) + tl.program_id(0)) * WORLD
    table = pads.to(tl.pointer_type(tl.uint64))
    # The table's entry after the W pads is a pad's slot count. A slot past it (or before it: a
    # negative channel or rank) is other memory, this rank's or a peer's: a handshake there can
    # spin forever on a word nobody clears, or write into a peer's data. Programs along a second
    # or third axis would share their slots and pair at random. Every program of the launch takes
    # the same branch; the channel and rank are compared as 64-bit numbers (no product of them
    # can wrap around).
    c = channel + tl.zeros([], tl.int64)
    r = rank + tl.zeros([], tl.int64)
    slots = tl.load(table + WORLD).to(tl.int64)
    fits = (c >= 0) & (c < slots // (tl.num_programs(0) * WORLD)) & (r >= 0) & (r < WORLD) \
        & (tl.num_programs(1) == 1) & (tl.num_programs(2) == 1)
    # Every thread of the program is done with what came before (its peer
    # reads, in the closing barrier) before one thread signals.
    tl.debug_barrier()
    if fits:
        for p in tl.static_range(WORLD):
            pad = tl.load(table + p).to(tl.pointer_type(tl.int32))
            while tl.atomic_cas(pad + slot + rank, 0, 1, sem="release", scope="sys") != 0:
                pass
        mine = tl.load(table + rank).to(tl.pointer_type(tl.int32))
        for p in tl.static_range(WORLD):
            while tl.atomic_cas(mine + slot + p, 1, 0, sem="acquire", scope="sys") != 1:
                pass
    else:
        # Unsynchronised, the kernel would race its peers: fault at once instead (address 0 is
        # mapped nowhere). pkb's launch check refuses such a grid, in words, before it runs in
        # CPU mode; a channel past the pad's room is caught here only.
        tl.atomic_xchg(tl.full([], 0, tl.uint64).to(tl.pointer_type(tl.int32)), 0, sem="relaxed")
    tl.debug_barrier()


@triton.jit
def peer_ptr(table, peer, like):
    """Rank ``peer``'s copy of a symmetric tensor, as a typed pointer.

    :param table: ``Peers.ptrs`` (address of a uint64 table, one entry per rank).
    :param peer: the rank to reach (may be this rank).
    :param like: any pointer whose element type the result takes (the output).

    The addresses are 16-byte aligned (``peers`` checks it), which lets the
    compiler use wide loads.
    """
    address = tl.load(table.to(tl.pointer_type(tl.uint64)) + peer)
    return tl.multiple_of(address.to(tl.pointer_type(like.dtype.element_ty)), 16)
