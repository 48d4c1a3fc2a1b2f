"""Per-worker state of the Triton backend: the context from ``pkb_backend_init``
and, made on first use, the heap behind :func:`pkb_triton.workspace`."""
from __future__ import annotations

_CONTEXT = None
_RUN_ID = None
_HEAP = None


def start(ctx, run_id: str) -> None:
    global _CONTEXT, _RUN_ID, _HEAP
    _CONTEXT, _RUN_ID, _HEAP = ctx, run_id, None


def heap():
    """The workspace heap (collective to create allocations in; see ``workspace``)."""
    global _HEAP
    if _CONTEXT is None:
        raise RuntimeError("pkb_triton.workspace needs a pkb worker (the triton backend was not initialised)")
    if _HEAP is None:
        if _CONTEXT.device.type == "cuda":
            from pkb_core import TorchSymmetricHeap

            _HEAP = TorchSymmetricHeap(_CONTEXT.device)
        else:
            from pkb_core import SharedMemoryHeap

            _HEAP = SharedMemoryHeap(_CONTEXT.rank, _CONTEXT.world_size, _CONTEXT.barrier, _RUN_ID)
    return _HEAP


def stop() -> None:
    global _CONTEXT, _HEAP
    if _HEAP is not None:
        _HEAP.close()
    _CONTEXT, _HEAP = None, None
