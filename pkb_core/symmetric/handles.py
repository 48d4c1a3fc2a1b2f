"""Which symmetric allocation holds a tensor: every heap registers its allocations
here, and :func:`handle_of` finds the handle of the one that holds a tensor."""
from __future__ import annotations

_HANDLES: dict[int, tuple[int, object]] = {}


def register_allocation(base_ptr: int, nbytes: int, handle) -> None:
    """Record that ``[base_ptr, base_ptr + nbytes)`` belongs to ``handle``."""
    _HANDLES[base_ptr] = (nbytes, handle)


def registered_handles() -> list:
    """The handles of every allocation recorded so far (one per allocation)."""
    return [handle for _, handle in _HANDLES.values()]


def forget_allocations() -> None:
    """Drop every record (the heap that made them is closing)."""
    _HANDLES.clear()


def handle_of(tensor):
    """The symmetric handle of the allocation that holds ``tensor``.

    Raises ``LookupError`` for a tensor that is not in a symmetric heap (for
    example one the solution allocated itself with ``torch.empty``).
    """
    ptr = tensor.data_ptr()
    for base, (nbytes, handle) in _HANDLES.items():
        if base <= ptr < base + nbytes:
            return handle
    raise LookupError("tensor is not in a symmetric heap: only inputs placed by the harness (or "
                      "tensors from the backend's allocator) have peers")


def peer_offset(tensor) -> int:
    """Byte offset of ``tensor`` inside its allocation (the same on every rank)."""
    ptr = tensor.data_ptr()
    for base, (nbytes, _) in _HANDLES.items():
        if base <= ptr < base + nbytes:
            return ptr - base
    raise LookupError("tensor is not in a symmetric heap")
