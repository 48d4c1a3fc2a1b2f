"""The Triton backend's state on one rank: what ``pkb_backend_init`` returns and every later
hook receives, and the heap behind :func:`pkb_triton.workspace`, made on first use.

A solution calls :func:`pkb_triton.workspace` without the state in hand (pkb
calls a solution with its inputs only), so init also registers the state as
this process's :func:`current` runtime; finalize closes the state it is given
and forgets it.
"""
from __future__ import annotations


class Runtime:
    """One rank's runtime: the worker context and, once asked for, the workspace heap."""

    def __init__(self, ctx, run_id: str):
        self.ctx = ctx
        #: Names the CPU heap's shared-memory files (the launcher sweeps them with the job's).
        self.run_id = run_id
        self._heap = None

    def heap(self):
        """The workspace heap (collective to create allocations in; see ``workspace``)."""
        if self._heap is None:
            if self.ctx.device.type == "cuda":
                from pkb_core import TorchSymmetricHeap

                self._heap = TorchSymmetricHeap(self.ctx.device)
            else:
                from pkb_core import SharedMemoryHeap

                self._heap = SharedMemoryHeap(self.ctx.rank, self.ctx.world_size, self.ctx.barrier, self.run_id)
        return self._heap

    def close(self) -> None:
        if self._heap is not None:
            self._heap.close()
            self._heap = None


_CURRENT: Runtime | None = None


def start(ctx, run_id: str) -> Runtime:
    """A new runtime for this rank, registered as :func:`current`."""
    global _CURRENT
    _CURRENT = Runtime(ctx, run_id)
    return _CURRENT


def current() -> Runtime:
    """The runtime init registered in this process."""
    if _CURRENT is None:
        raise RuntimeError("pkb_triton.workspace needs a pkb worker (the triton backend was not initialised)")
    return _CURRENT


def stop(state: Runtime | None) -> None:
    """Close ``state`` (what init returned) and forget the current runtime."""
    global _CURRENT
    if state is not None:
        state.close()
    _CURRENT = None
