"""A barrier on the device, through a symmetric heap: every rank's timed region starts together.

A host barrier releases the ranks within tens of microseconds of each other,
and each then sleeps on its own device: the timed regions of a collective of a
few microseconds start at different moments, and the earliest rank's time
includes the wait for the latest. So before every timed sample (each latency
call, each graph replay, each back-to-back batch) :class:`pkb_core.judge.timing.BatchTimer`
launches this barrier on the rank's timing stream, right after the host
barrier and the short hold (the hold lets the barrier, the start event and the
call queue up behind it): a one-program kernel that

1. adds 1 to its own epoch counter (a local int32 on the device, so the
   launch's arguments never change and a replayed graph could hold it too);
2. writes the epoch into slot ``rank`` of every rank's signal pad (atomic
   exchange, release, system scope);
3. spins on its own pad until every slot ``p`` holds at least the epoch
   (atomic reads, acquire, system scope), or its time runs out.

Slots only grow, so no slot is ever reset and a fast rank that enters the next
barrier cannot confuse a slow one. The allocation is the barrier's own (one
small collective allocation per process, never handed to a solution), its pad
zeroed by the heap. All ranks leave within the time a flag takes to cross the
link (about a microsecond over NVLink), and the start events that follow are
already queued.

**Timeout.** A barrier that waits for a rank that never comes must not hang
the judge: each wait is bounded (:data:`TIMEOUT_S`: on a GPU by the global
timer, in the interpreter by a count of spins, :data:`CPU_SPINS_PER_S` per
second, so there only roughly), after which the kernel gives up, leaves a mark
in a status word and returns; :meth:`DeviceBarrier.check` (called after every
batch) raises :class:`pkb_core.judge.timing.DeviceBarrierTimeout`. The launcher's watchdog remains
the last line for anything else.

**Where it runs.** The kernel is Triton (the core's only route to a device
kernel; :mod:`pkb_core.judge.barrier_kernel`): compiled for the GPU on CUDA, run by Triton's interpreter on CPU,
where the heap is :mod:`pkb_core.symmetric.shm` and the interpreter's atomics
are ``std::atomic`` operations on the shared mapping, so the CPU path runs the
same code on the same protocol. Each side makes its own barrier from its own
heap (the judge's from the core's default heap, a candidate's from the core's
heap in its process), lazily, when timing starts (:func:`create`). Where one
cannot be made (ranks on several nodes, whose heaps do not reach each other;
Triton missing; a heap that fails) the side times with the host barrier and
the hold alone, and its answers say why.
"""
from __future__ import annotations

import torch

from pkb_core.judge.timing import DeviceBarrierTimeout

#: Seconds a rank waits at the barrier for its peers before it gives up.
TIMEOUT_S = 20.0
#: Spins of the interpreted kernel counted as one second (a loaded host spins
#: slower: the CPU timeout is approximate, within a few times TIMEOUT_S).
CPU_SPINS_PER_S = 5000


class DeviceBarrier:
    """The barrier of one rank, over a fresh allocation of ``heap``.

    Making it allocates (collective: every rank of the heap, in the same
    order) and passes the barrier once (on a GPU that also compiles the kernel).

    :param heap: a symmetric heap (``empty(shape, dtype)``; its tensors have a
        handle: :func:`pkb_core.symmetric.handle_of`).
    :param device: this rank's device.
    :param timeout_s: how long one wait may take before the kernel gives up.
    """

    def __init__(self, heap, device, timeout_s: float = TIMEOUT_S):
        from pkb_core.symmetric import handle_of

        self.device = device
        self.timeout_s = timeout_s
        self._anchor = heap.empty((1,), torch.int32)  # the allocation whose signal pads hold the flags
        handle = handle_of(self._anchor)
        self.rank, self.world_size = handle.rank, handle.world_size
        pad_bytes = int(getattr(handle, "signal_pad_size", 4 * self.world_size))
        if pad_bytes < 4 * self.world_size:
            raise ValueError(f"a signal pad of {pad_bytes} bytes holds no {self.world_size} flags")
        self._handle = handle  # keeps the mappings and the pad table alive
        self._pads = handle.signal_pad_ptrs_dev
        self._counter = torch.zeros(1, dtype=torch.int32, device=device)
        self._status = torch.zeros(1, dtype=torch.int32, device=device)
        from pkb_core.judge.barrier_kernel import kernel

        cuda = device.type == "cuda"
        self._run = kernel(interpreted=not cuda)
        self._limit = int(timeout_s * 1e9) if cuda else int(timeout_s * CPU_SPINS_PER_S)
        self._extra = {"num_warps": 1} if cuda else {}
        self()
        self.check()

    def __call__(self) -> None:
        """Arrive, and wait for every rank (on a GPU: queued on the current
        stream, the host returns at once; on CPU: returns when all arrived)."""
        self._run[(1,)](self._pads, self._counter, self._status, self.rank, self._limit,
                        WORLD=self.world_size, CLOCK=self.device.type == "cuda", **self._extra)

    @property
    def count(self) -> int:
        """Barriers this rank has passed (the epoch; reads the device)."""
        return int(self._counter.item())

    def check(self) -> None:
        """Raise :class:`DeviceBarrierTimeout` if any wait so far gave up (reads
        the device: call it where the host synchronises anyway)."""
        if int(self._status.item()):
            raise DeviceBarrierTimeout(
                f"rank {self.rank}: a peer did not reach the device barrier within {self.timeout_s:g} s "
                f"(epoch {self.count})")


def create(heap_factory, device, *, store, rank: int, world_size: int, local_world_size: int,
           key: str = "pkb-device-barrier", timeout_s: float = TIMEOUT_S) -> tuple[DeviceBarrier | None, str]:
    """``(barrier, "device barrier")``, or ``(None, why not)`` on every rank.

    Collective over the side's ranks. The ranks agree through ``store``: if
    one cannot make it, none uses it (a barrier only some ranks pass would
    hang the others).

    :param heap_factory: returns the heap to allocate from (called only when
        all ranks are on this node).
    :param local_world_size: ranks on this node; fewer than ``world_size``
        means several nodes, whose heaps do not reach each other.
    """
    if local_world_size < world_size:
        return None, "host barrier only: ranks on several nodes (the symmetric heap reaches this node's ranks)"
    try:
        barrier, why = DeviceBarrier(heap_factory(), device, timeout_s), ""
    except Exception as exc:  # noqa: BLE001 - any failure means: time with the host barrier
        barrier, why = None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    store.set(f"{key}/{rank}", why or "ok")
    answers = [store.get(f"{key}/{r}").decode() for r in range(world_size)]
    failed = [(r, a) for r, a in enumerate(answers) if a != "ok"]
    if failed:
        r, reason = failed[0]
        return None, f"host barrier only: rank {r} could not make the device barrier ({reason})"
    return barrier, "device barrier"
