"""pkb's ``nvshmem`` backend: Triton kernels that call NVSHMEM's device API
through torch, on inputs that live in torch's NVSHMEM symmetric heap.

The backend sets torch's symmetric-memory backend to NVSHMEM at init (before
any symmetric allocation in the process) and places every tensor input of a
problem in it, so an input's local address is an NVSHMEM symmetric address:
a kernel can hand it to ``nvshmem.get(dst, src, nelems, pe)`` /
``nvshmem.put(...)`` with a PE number (PE = rank), or load a peer's copy
directly through ``nvshmem_ptr`` addresses. No NCCL, no ``torch.distributed``.

Host side (``pkb_nvshmem.host``):

:func:`peers` ``(tensor) -> Symmetric``
    ``ptrs`` (address of a uint64 table: the tensor's address on each rank),
    ``signals`` (address of this rank's launch-wide uint64 signal area, for
    :func:`barrier`), ``signal_slots``, ``rank``, ``world_size`` and
    ``grid(numel, block, channels=1)``: how many programs to launch.

Device side (``pkb_nvshmem.lang``, ``@triton.jit``):

:data:`nvshmem`
    torch's module of NVSHMEM device functions
    (``torch.distributed._symmetric_memory._nvshmem_triton``): ``get``,
    ``put``, ``get_nbi``, ``putmem_signal_block``, ``signal_op``,
    ``signal_wait_until``, ``wait_until``, ``fence``, ``quiet``, ``my_pe``,
    ``n_pes``, ... (``get``/``put`` are block-scoped: every thread of the
    program calls them with the same arguments, which is how Triton runs
    scalar code anyway).
:func:`requires_nvshmem`
    decorate every kernel that calls NVSHMEM (above ``@triton.jit``).
:func:`barrier` ``(signals, rank, WORLD: constexpr, channel)``
    program ``i`` of every rank meets program ``i`` of every other rank,
    through NVSHMEM signals (reusable, no reset, graph-safe).
:func:`peer_ptr` ``(table, peer, like)``
    rank ``peer``'s copy as a typed pointer (direct NVLink loads).
:data:`SIGNAL_SET`, :data:`SIGNAL_ADD`, :data:`CMP_EQ` ... :data:`CMP_GE`
    NVSHMEM's constants for ``signal_op`` and ``signal_wait_until``, with
    the values of NVSHMEM's headers (SET 9, ADD 10, EQ 0, NE 1, GT 2, LE 3,
    LT 4, GE 5; torch's docstrings list other numbers: do not use those).

Shared with the ``nvshmem4py`` backend (``pkb_nvshmem.common``): the
environment defaults set at init (:data:`ENV_DEFAULTS`), the numpy
``row_stack`` workaround, the requirement checks and the multicast guard.

Importing this package is cheap: torch and triton load on first use of a
helper.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

__all__ = [
    "Symmetric", "peers", "barrier", "peer_ptr", "requires_nvshmem", "nvshmem",
    "SIGNAL_SET", "SIGNAL_ADD", "CMP_EQ", "CMP_NE", "CMP_GT", "CMP_LE", "CMP_LT", "CMP_GE",
    "ENV_DEFAULTS", "apply_env_defaults", "ensure_numpy_row_stack",
]

_WHERE = {
    "Symmetric": "host", "peers": "host",
    "barrier": "lang", "peer_ptr": "lang", "requires_nvshmem": "lang", "nvshmem": "lang",
    "SIGNAL_SET": "lang", "SIGNAL_ADD": "lang", "CMP_EQ": "lang", "CMP_NE": "lang", "CMP_GT": "lang",
    "CMP_LE": "lang", "CMP_LT": "lang", "CMP_GE": "lang",
    "ENV_DEFAULTS": "common", "apply_env_defaults": "common", "ensure_numpy_row_stack": "common",
}


def __getattr__(name):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'pkb_nvshmem' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"pkb_nvshmem.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
