"""Per-worker state of the ``nvshmem4py`` backend (set by its init hook)."""
from __future__ import annotations

_HEAP = None


def start(heap) -> None:
    global _HEAP
    _HEAP = heap


def heap():
    if _HEAP is None:
        raise RuntimeError("pkb_nvshmem.nvshmem4py needs a pkb worker of the nvshmem4py backend "
                           "(it was not initialised)")
    return _HEAP


def stop() -> None:
    global _HEAP
    _HEAP = None
