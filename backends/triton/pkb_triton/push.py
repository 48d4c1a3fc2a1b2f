"""Small messages pushed one way, the data its own flag: the Triton side of pkb's push protocol.

A sender writes its data straight into the receiver's slot for it in a symmetric workspace; an
empty slot holds the sentinel (negative zero's bits in every element) and a sender sends every
-0.0 as +0.0 (equal to it in every comparison and sum), so a receiver knows an element has landed
once it is no longer the sentinel: one one-way trip and no barrier. Slots come in three epochs,
used in turn; in call ``e`` a receiver resets its slots of call ``e - 1``, so a sender may write
into them again (in call ``e + 2``) only once the receiver has finished call ``e``. In a collective
where every rank receives from every rank each call that holds by itself (no rank gets a call
ahead of another); in a rooted one (reduce, gather: one receiver; broadcast, scatter: one sender)
a rank that only sends waits for nobody. So there each rank publishes how many calls it has finished
into every rank's ``progress`` word for it (:func:`push_finish` with ``CREDITS``), and a sender
waits, before writing to rank ``p``, until ``p`` has finished every call but the sender's last
(:func:`push_wait_credit`: one local load when, as almost always, it has). Credits cost a
system-scope release and a write across the link per peer at the end of every call, so a
collective in which every rank receives from every rank each call goes without them
(``CREDITS=False``, no :func:`push_wait_credit`): a sender in call ``e + 2`` has received the
receiver's data of call ``e + 1``, sent after the receiver's call ``e``, resets included, ended.
Every rank takes the push path or not alike (decide on what all ranks share: shape, dtype, size,
root). The epoch, the last call's element count and the calls finished
live in a counters tensor on the device, so graph replays advance them as calls do. The cuda
backend's ``pkb_cuda.PUSH_CUH`` is the same protocol without the credits (its samples are
collectives in which every rank receives from every rank).

Host: :func:`push_workspace`, :func:`push_launch`. Device (``@triton.jit``): :func:`push_bits`, :func:`push_slot`,
:func:`push_wait_credit`, :func:`push_receive`, :func:`push_reset_last`, :func:`push_finish`. A
kernel::

    # launched as grid, BLOCK, num_warps = push_launch(n, peers(x))
    epoch = tl.load(counters, volatile=True)
    # send (every block of this program first), to every rank p:
    push_wait_credit(progress, p, counters)  # with CREDITS only
    tl.store(push_slot(slots, ptrs, p, epoch, rank, WORLD, SLOT) + offs, push_bits(v, SIZE, EMPTY), mask=mask)
    # then receive, from every rank p:
    bits = push_receive(push_slot(slots, ptrs, rank, epoch, p, WORLD, SLOT) + offs, mask, EMPTY)
    value = bits.to(x.dtype.element_ty, bitcast=True)
    # last, in every program:
    push_reset_last(slots, ptrs, counters, rank, epoch, WORLD, SLOT, EMPTY, BLOCK)
    push_finish(counters, progress, progress_ptrs, rank, epoch, n, WORLD, CREDITS)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from pkb_triton.lang import peer_ptr

#: Epochs of slots the protocol cycles through.
EPOCHS = 3
#: Per element size: the integer type of its bits and the sentinel (negative zero's bits).
SENTINELS = {2: (torch.int16, -(1 << 15)), 4: (torch.int32, -(1 << 31)), 8: (torch.int64, -(1 << 63))}

_WORKSPACES: dict = {}  # (tag, element size, slot) -> PushWorkspace, for the launch
#: Launch shapes, (BLOCK elements a program, num_warps): the small one while one block a program
#: covers the message, the large one above. Both ranks in one process on one H200, local memory in
#: place of the link (benchmarks/push_pair.py, docs/benchmarks/2026-12-02-h200-push-pair.md): at
#: 4 KiB of bf16 the all-reduce's kernels took 3.39 us a call in (512, 4) against 4.74 in the
#: (2048, 8) the samples had used, and 4.5-4.7 against 5.7-6.0 at 256 KiB in (1024, 8).
SMALL_SHAPE = (512, 4)
LARGE_SHAPE = (1024, 8)


@dataclass(frozen=True)
class PushWorkspace:
    """One rank's push workspace: pass ``slots`` (the tensor, for its element type), ``ptrs``,
    ``counters``, ``progress`` and ``progress_ptrs`` to the kernel, ``slot`` and ``empty`` as
    constexprs."""

    #: the slots, ``EPOCHS * world * slot`` integers of the element's size (symmetric).
    slots: torch.Tensor
    #: ``peers(slots).ptrs``: the address of every rank's copy.
    ptrs: int
    #: this rank's four int32 counters on the device: the epoch, programs done in this call,
    #: elements each slot received in the last call, calls finished.
    counters: torch.Tensor
    #: elements of one slot: the most one sender sends one receiver in a call.
    slot: int
    #: the sentinel, as the slots' integer.
    empty: int
    #: ``progress[p]``: how many calls rank p has finished (p writes it; symmetric int32).
    progress: torch.Tensor
    #: ``peers(progress).ptrs``.
    progress_ptrs: int


def push_workspace(like: torch.Tensor, slot: int, tag: str = "") -> PushWorkspace:
    """The push workspace for tensors like ``like`` (its element size: 2, 4 or 8 bytes of floating
    point), with slots of ``slot`` elements. The first request for a ``(tag, element size, slot)``
    is collective: a :func:`pkb_triton.workspace`, filled with the sentinel, then a barrier among
    the ranks so that no peer writes into a slot before it is empty.

    :raises ValueError: an element size the protocol has no sentinel for, or ``slot`` < 1.
    """
    size = like.element_size()
    if size not in SENTINELS or not like.is_floating_point():
        raise ValueError(f"push_workspace: {like.dtype} has no sentinel (floating point of 2, 4 or 8 bytes)")
    if slot < 1:
        raise ValueError(f"push_workspace: slot {slot} holds no element")
    key = (tag, size, int(slot))
    found = _WORKSPACES.get(key)
    if found is None:  # the first request: everything below runs once a (tag, size, slot)
        import torch.distributed as dist

        from pkb_core import handle_of
        from pkb_triton.host import peers, workspace

        bits, empty = SENTINELS[size]
        world = dist.get_world_size()
        slots = workspace(EPOCHS * world * slot, bits, tag=f"push:{tag}")
        slots.fill_(empty)
        progress = workspace(world, torch.int32, tag=f"push-progress:{tag}")
        progress.zero_()
        counters = torch.zeros(4, dtype=torch.int32, device=like.device)
        handle_of(slots).barrier(channel=0)  # every slot empty, every progress 0, before any peer writes
        found = _WORKSPACES[key] = PushWorkspace(slots, peers(slots).ptrs, counters, int(slot), empty, progress,
                                                 peers(progress).ptrs)
    return found


def push_launch(n: int, peers) -> tuple[int, int, int]:
    """``(grid, BLOCK, num_warps)`` for a push kernel whose slots receive ``n`` elements a call
    (``peers``: :func:`pkb_triton.peers` of a symmetric tensor): :data:`SMALL_SHAPE` while a grid of
    its blocks covers ``n`` at once (``peers.grid``: one program per SM at most), else
    :data:`LARGE_SHAPE`. Pass an ``n`` every rank shares, so every rank launches the same shape."""
    block, warps = SMALL_SHAPE
    if peers.grid(n, block) * block < n:
        block, warps = LARGE_SHAPE
    return peers.grid(n, block), block, warps


def _reset() -> None:
    """Forget the workspaces (the launch is ending; pkb_triton.host forgets the memory)."""
    _WORKSPACES.clear()


@triton.jit
def push_bits(v, SIZE: tl.constexpr, EMPTY: tl.constexpr):
    """``v``'s bits as the slots' integers, every -0.0 made +0.0 (no element sent reads as empty)."""
    if SIZE == 2:
        bits = v.to(tl.int16, bitcast=True)
    elif SIZE == 4:
        bits = v.to(tl.int32, bitcast=True)
    else:
        bits = v.to(tl.int64, bitcast=True)
    return tl.where(bits == EMPTY, 0, bits).to(bits.dtype)


@triton.jit
def push_slot(slots, ptrs, p, epoch, sender, WORLD: tl.constexpr, SLOT: tl.constexpr):
    """Rank ``p``'s slot for ``sender`` in ``epoch`` (``slots``: the workspace tensor, for its type)."""
    return peer_ptr(ptrs, p, slots) + (epoch * WORLD + sender) * SLOT


@triton.jit
def push_wait_credit(progress, p, counters):
    """Before this call's first write to rank ``p``: wait until ``p`` has finished every call but
    this rank's last one, so it has reset the slots this call writes (``progress``: the tensor)."""
    calls = tl.load(counters + 3, volatile=True)
    while tl.load(progress + p, volatile=True) < calls - 1:
        pass


@triton.jit
def push_receive(src, mask, EMPTY: tl.constexpr):
    """The elements at ``src`` once every one of them (under ``mask``) has landed."""
    bits = tl.load(src, mask=mask, other=0, volatile=True)
    while tl.sum((bits == EMPTY).to(tl.int32), axis=0) > 0:
        bits = tl.load(src, mask=mask, other=0, volatile=True)
    return bits


@triton.jit
def push_reset_last(slots, ptrs, counters, rank, epoch, WORLD: tl.constexpr, SLOT: tl.constexpr,
                    EMPTY: tl.constexpr, BLOCK: tl.constexpr):
    """Reset this program's share of this rank's slots of the last call (before :func:`push_finish`)."""
    last = tl.load(counters + 2, volatile=True)
    previous = (epoch + 2) % 3
    empty = tl.full([BLOCK], EMPTY, slots.dtype.element_ty)
    start = tl.program_id(0) * BLOCK
    while start < last:
        offs = start + tl.arange(0, BLOCK)
        for p in tl.static_range(WORLD):
            tl.store(push_slot(slots, ptrs, rank, previous, p, WORLD, SLOT) + offs, empty, mask=offs < last)
        start += tl.num_programs(0) * BLOCK


@triton.jit
def push_finish(counters, progress, progress_ptrs, rank, epoch, n, WORLD: tl.constexpr, CREDITS: tl.constexpr):
    """The last program to get here advances the epoch, records ``n`` (the elements each slot
    received in this call) and, with ``CREDITS``, tells every rank that this rank has finished one
    more call (call last, from every program; ``CREDITS`` alike in every call of a workspace)."""
    tl.debug_barrier()
    if tl.atomic_add(counters + 1, 1, sem="acq_rel", scope="gpu") == tl.num_programs(0) - 1:
        calls = tl.load(counters + 3) + 1
        tl.store(counters + 1, 0)
        tl.store(counters + 2, n)
        tl.store(counters + 3, calls)
        tl.store(counters, (epoch + 1) % 3)
        if CREDITS:
            for p in tl.static_range(WORLD):
                # Release: this rank's resets are visible before a peer that reads the count writes again.
                tl.atomic_xchg(peer_ptr(progress_ptrs, p, progress) + rank, calls, sem="release", scope="sys")
