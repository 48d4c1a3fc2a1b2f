"""A barrier on the device, through a symmetric heap: every rank's timed region starts together.

A host barrier releases the ranks within tens of microseconds of each other,
and each then sleeps on its own device: the timed regions of a collective of a
few microseconds start at different moments, and the earliest rank's time
includes the wait for the latest. So before every timed sample (each latency
call, each graph replay, each back-to-back batch) :class:`pkb_core.harness.timing.BatchTimer`
runs this barrier on the rank's timing stream, right after the host barrier
(kept for pacing) and the short hold (which lets the barrier, the start event
and the call queue up behind it).

**The protocol.** Every rank has an epoch (how many barriers it has entered)
and one int32 slot per rank in its signal pad. To pass barrier ``e`` a rank

1. writes ``e`` into its own slot (``rank``) of every rank's pad (release,
   system scope);
2. waits on its own pad until every slot ``p`` holds at least ``e`` (acquire,
   system scope), or its time runs out.

Slots only grow, so nothing is ever reset and a fast rank that enters the next
barrier cannot confuse a slow one. The allocation is the barrier's own (one
small collective allocation per process, never handed to a solution), its pad
zeroed by the heap.

**Engines.** ``kernel``: a one-program Triton kernel
(:mod:`pkb_core.harness.barrier_kernel`, the core's only route to device code)
queued on the current stream; its epoch is a local int32 on the device, so the
launch's arguments never change. All ranks leave within a flag's trip over the
link (about a microsecond over NVLink) and the start events behind it are
already queued. The same kernel runs in Triton's interpreter on the CPU heap
(:mod:`pkb_core.symmetric.shm`, whose atomics are ``std::atomic`` on the shared
mapping): the tests run it there. ``host``: the same protocol on the same
signal pads, with the host as the device: plain aligned int32 stores and loads
on the shared mapping, a real clock for the timeout, polls back to back for
:data:`SPIN_S`, then asleep on the late peer's slot until the peer's store
wakes it (:mod:`pkb_core.harness.host_wake`: a waiting rank takes no core a
late peer needs, and runs again as soon as the peer arrives, where a nap of
:data:`NAP_S` left it up to a nap late; naps remain where there are no futexes).
CPU mode times with ``host``: there the host *is* the device, and an
interpreted launch costs 5-25 ms on a loaded machine, noise that would land in
every batch the launcher times (:mod:`pkb_core.conduct.timed_rounds`). Both
engines interoperate (the tests mix
them), so they are one protocol.

**Timeout.** A barrier that waits for a rank that never comes must not hang
the judge: each wait is bounded (:data:`TIMEOUT_S`: the GPU's global timer,
the host's clock, or in the interpreter a count of spins,
:data:`CPU_SPINS_PER_S` per second, so only roughly), after which the rank
gives up and leaves a mark; :meth:`DeviceBarrier.check` (called after every
batch) raises :class:`pkb_core.harness.timing.DeviceBarrierTimeout`. The
launcher's watchdog remains the last line for anything else.

**Who has one.** Each side makes its own barrier from its own heap (the
judge's from the core's default heap, a candidate's from the core's heap in
its process), lazily, when timing starts (:func:`create`). Where one cannot be
made (ranks on several nodes, whose heaps do not reach each other; Triton
missing on a GPU; a heap that fails) the side times with the host barrier and
the hold alone, and its answers say why.
"""
from __future__ import annotations

import os
import time

import torch

from pkb_core.harness import host_wake
from pkb_core.harness.timing import DeviceBarrierTimeout

#: Seconds a rank waits at the barrier for its peers before it gives up.
TIMEOUT_S = 20.0
#: Spins of the interpreted kernel counted as one second (a loaded host spins
#: slower: that timeout is approximate, within a few times the one asked for).
CPU_SPINS_PER_S = 5000
ENGINES = ("kernel", "host")
#: The host engine polls its pad back to back for this long, then sleeps on the late peer's slot
#: (a waiting rank must not take the core a late peer needs, on a host with fewer cores than ranks;
#: the peer's store wakes it), or naps between polls where there are no futexes.
SPIN_S = 20e-6
NAP_S = 50e-6


def default_engine(device) -> str:
    """``kernel`` on a GPU, ``host`` on CPU (see the module docstring)."""
    return "kernel" if device.type == "cuda" else "host"


class DeviceBarrier:
    """The barrier of one rank, over a fresh allocation of ``heap``.

    Making it allocates (collective: every rank of the heap, in the same
    order) and passes the barrier once (on a GPU that also compiles the kernel).

    :param heap: a symmetric heap (``empty(shape, dtype)``; its tensors have a
        handle: :func:`pkb_core.symmetric.handle_of`).
    :param device: this rank's device.
    :param timeout_s: how long one wait may take before the rank gives up.
    :param engine: ``kernel`` or ``host`` (default: :func:`default_engine`);
        ``host`` needs a heap whose pads this process can read (CPU).
    """

    def __init__(self, heap, device, timeout_s: float = TIMEOUT_S, engine: str | None = None):
        from pkb_core.symmetric import handle_of

        self.device = device
        self.timeout_s = timeout_s
        self.engine = engine or default_engine(device)
        if self.engine not in ENGINES:
            raise ValueError(f"unknown device-barrier engine {self.engine!r} (one of {', '.join(ENGINES)})")
        self._anchor = heap.empty((1,), torch.int32)  # the allocation whose signal pads hold the flags
        handle = handle_of(self._anchor)
        self.rank, self.world_size = handle.rank, handle.world_size
        pad_bytes = int(getattr(handle, "signal_pad_size", 4 * self.world_size))
        if pad_bytes < 4 * self.world_size:
            raise ValueError(f"a signal pad of {pad_bytes} bytes holds no {self.world_size} flags")
        self._handle = handle  # keeps the mappings and the pad table alive
        if self.engine == "kernel":
            self._setup_kernel(handle)
        else:
            self._setup_host(handle)
        self()
        self.check()

    # -- the kernel engine ------------------------------------------------------------------
    def _setup_kernel(self, handle):
        from pkb_core.harness.barrier_kernel import kernel

        cuda = self.device.type == "cuda"
        self._pads = handle.signal_pad_ptrs_dev
        self._counter = torch.zeros(1, dtype=torch.int32, device=self.device)
        self._status = torch.zeros(1, dtype=torch.int32, device=self.device)
        self._run = kernel(interpreted=not cuda)
        self._limit = int(self.timeout_s * 1e9) if cuda else max(1, int(self.timeout_s * CPU_SPINS_PER_S))
        self._options = {"num_warps": 1} if cuda else {}

    def _kernel_pass(self):
        self._run[(1,)](self._pads, self._counter, self._status, self.rank, self._limit,
                        WORLD=self.world_size, CLOCK=self.device.type == "cuda", **self._options)

    # -- the host engine --------------------------------------------------------------------
    def _setup_host(self, handle):
        if self.device.type != "cpu":
            raise ValueError("the host engine needs a heap in host memory (CPU mode)")
        self._views = [handle.get_signal_pad(p, (self.world_size,), torch.int32).numpy()
                       for p in range(self.world_size)]
        self._epoch = 0
        self._late = False

    def _host_pass(self):
        self._epoch += 1
        epoch = self._epoch
        for view in self._views:
            view[self.rank] = epoch  # an aligned int32 store into the shared mapping
            host_wake.wake(view.ctypes.data + 4 * self.rank)
        mine = self._views[self.rank]
        started = time.monotonic()
        deadline = started + self.timeout_s
        for p in range(self.world_size):
            while True:
                seen = int(mine[p])
                if seen >= epoch:
                    break
                now = time.monotonic()
                if now > deadline:
                    self._late = True
                    break
                if now - started < SPIN_S:
                    os.sched_yield()
                elif not host_wake.sleep_on(mine.ctypes.data + 4 * p, seen,
                                            min(deadline - now, host_wake.LONGEST_SLEEP_S)):
                    time.sleep(NAP_S)  # no futexes here: a late peer may need this core to arrive

    # -- both -------------------------------------------------------------------------------
    def __call__(self) -> None:
        """Arrive, and wait for every rank (``kernel`` on a GPU: queued on the
        current stream, the host returns at once; otherwise: returns when all
        arrived or the wait gave up)."""
        if self.engine == "kernel":
            self._kernel_pass()
        else:
            self._host_pass()

    @property
    def count(self) -> int:
        """Barriers this rank has entered (the epoch; reads the device)."""
        return int(self._counter.item()) if self.engine == "kernel" else self._epoch

    def check(self) -> None:
        """Raise :class:`DeviceBarrierTimeout` if any wait so far gave up (reads
        the device: call it where the host synchronises anyway)."""
        late = int(self._status.item()) if self.engine == "kernel" else self._late
        if late:
            raise DeviceBarrierTimeout(
                f"rank {self.rank}: a peer did not reach the device barrier within {self.timeout_s:g} s "
                f"(epoch {self.count})")


def create(heap_factory, device, *, store, rank: int, world_size: int, local_world_size: int,
           key: str = "pkb-device-barrier", timeout_s: float = TIMEOUT_S,
           engine: str | None = None, required: bool = False) -> tuple[DeviceBarrier | None, str]:
    """``(barrier, "device barrier")``, or ``(None, why not)`` on every rank.

    Collective over the side's ranks, in two steps agreed through ``store``
    (a barrier only some ranks pass would hang the others): first every rank
    gets its heap and the engine's code, and only if all could do they
    allocate and pass the barrier once; if any rank fails either step, none
    uses it.

    :param heap_factory: returns the heap to allocate from (called only when
        all ranks are on this node).
    :param local_world_size: ranks on this node; fewer than ``world_size``
        means several nodes, whose heaps do not reach each other.
    :param required: on one node, a barrier that cannot be made raises
        :class:`DeviceBarrierUnavailable` (on every rank) instead of returning
        ``None``: the judge never times silently without it.
    """
    if local_world_size < world_size:
        return None, "host barrier only: ranks on several nodes (the symmetric heap reaches this node's ranks)"
    engine = engine or default_engine(device)
    heap, why = None, ""
    try:
        heap = heap_factory()
        if engine == "kernel":
            import pkb_core.harness.barrier_kernel  # noqa: F401 - Triton must be there
    except Exception as exc:  # noqa: BLE001 - any failure means: time with the host barrier
        why = _one_line(exc)
    failed = _agree(store, f"{key}/ready", rank, world_size, why)
    if failed and required:
        raise DeviceBarrierUnavailable(failed)
    if failed:
        return None, failed
    barrier = None
    try:
        barrier = DeviceBarrier(heap, device, timeout_s, engine)
    except Exception as exc:  # noqa: BLE001
        why = _one_line(exc)
    failed = _agree(store, f"{key}/made", rank, world_size, why)
    if failed and required:
        raise DeviceBarrierUnavailable(failed)
    if failed:
        return None, failed
    return barrier, "device barrier"


class DeviceBarrierUnavailable(RuntimeError):
    """A required device barrier could not be made (the reason says on which rank and why)."""


def _agree(store, key: str, rank: int, world_size: int, why: str) -> str:
    """Post this rank's outcome; ``""`` when every rank succeeded, else the first failure in words.

    A custom-kernel candidate's store exchanges no values after the lockdown:
    there the ranks vote (any failure, not its words, reaches the others)."""
    vote = getattr(store, "vote", None)
    if vote is not None:
        if vote("pkb-agree", range(world_size), bool(why)):
            return f"host barrier only: {'this rank' if why else 'a peer'} could not make the device barrier" + (
                f" ({why})" if why else "")
        return ""
    store.set(f"{key}/{rank}", why or "ok")
    for r in range(world_size):
        answer = store.get(f"{key}/{r}").decode()
        if answer != "ok":
            return f"host barrier only: rank {r} could not make the device barrier ({answer})"
    return ""


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"
