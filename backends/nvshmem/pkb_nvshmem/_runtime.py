"""Per-worker state of the ``nvshmem`` backend (set by its init hook)."""
from __future__ import annotations

_HEAP = None


def start(heap) -> None:
    global _HEAP
    _HEAP = heap


def heap():
    if _HEAP is None:
        raise RuntimeError("pkb_nvshmem needs a pkb worker of the nvshmem backend (it was not initialised)")
    return _HEAP


def signals():
    """The launch-wide symmetric signal area (an int64 tensor of uint64 words)."""
    return heap().signals


def stop() -> None:
    global _HEAP
    _HEAP = None
