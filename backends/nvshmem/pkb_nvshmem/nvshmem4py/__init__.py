"""pkb's ``nvshmem4py`` backend: Numba-CUDA kernels that call NVSHMEM through
NVIDIA's nvshmem4py, on inputs that live in nvshmem4py's symmetric heap.

The backend initialises NVSHMEM with nvshmem4py (a unique id made by rank 0
and exchanged over the harness's gloo group) and allocates every tensor input
of a problem with ``nvshmem.core.tensor``, so an input's local address is an
NVSHMEM symmetric address: a kernel can pass it to nvshmem4py's device
functions with a PE number (PE = rank). Each allocation also carries a signal
pad, so ``pkb_core.symmetric.handle_of(x)`` works as on every other heap.

Host side (``pkb_nvshmem.nvshmem4py.host``):

:func:`peers` ``(tensor) -> Peers``
    ``rank`` (= PE), ``world_size``, ``device`` and ``blocks(nbytes)``.
:func:`as_bytes` ``(tensor)``
    a uint8 Numba device array over the tensor's bytes (any dtype).
:func:`stream` ``()``
    torch's current stream as a Numba stream: launch on it.
:func:`barrier` ``()``
    NVSHMEM's team barrier on torch's current stream (before and after a
    kernel that reads peers).

Device side, imported lazily with the numpy ``row_stack`` workaround applied
first (numba-cuda 0.30.4 fails to import under numpy 2.5 without it):

:data:`cuda`
    ``numba.cuda`` (``@cuda.jit`` kernels).
:data:`nvd`
    ``nvshmem.core.device.numba``: ``get_block(dst, src, pe)``,
    ``put_block(dst, src, pe)`` (block-scoped: every thread of the block
    calls them with the same arguments), ``get``/``put`` (one thread),
    ``*_nbi`` variants, ``put_signal*``, ``signal_op``, ``signal_wait``,
    ``my_pe``, ``n_pes``, atomics and collectives.
:data:`nvs`
    ``nvshmem.core`` (host API: ``Teams``, ``SignalOp``, ``ComparisonType``).

Never call nvshmem4py's ``get_multicast_*``: the backend refuses solutions
that do. Importing this package is cheap: nothing heavy loads until used.
"""
from __future__ import annotations

import importlib

__all__ = ["Peers", "peers", "as_bytes", "stream", "barrier", "cuda", "nvd", "nvs", "int32"]

_HOST = {"Peers", "peers", "as_bytes", "stream", "barrier", "sm_count"}


def _device_module(name: str):
    from pkb_nvshmem.common import ensure_numpy_row_stack

    ensure_numpy_row_stack()  # before numba is imported for the first time
    if name == "cuda":
        return importlib.import_module("numba.cuda")
    if name == "int32":
        return importlib.import_module("numba").int32
    if name == "nvd":
        module = importlib.import_module("nvshmem.core.device.numba")
        _use_home_headers()
        _compile_without_ibgda()
        return module
    return importlib.import_module("nvshmem.core")


def _use_home_headers():
    """Compile the shim against ``PKB_NVSHMEM4PY_HOME``'s headers when it is set
    (see :mod:`pkb_nvshmem.nvshmem4py.home`)."""
    import numba.cuda

    from pkb_nvshmem.nvshmem4py.home import nvshmem_home, use_home_headers

    home = nvshmem_home()
    if home is not None:
        bindings = importlib.import_module("nvshmem.bindings.device.numba")
        use_home_headers(numba.cuda.config, home, getattr(bindings, "INCLUDE_PATH", None))


def _compile_without_ibgda():
    """Shadow NVSHMEM's IBGDA option for nvshmem4py's NVRTC shim (see
    :func:`pkb_nvshmem.common.shadow_ibgda_headers`)."""
    import os
    import tempfile

    import numba.cuda

    from pkb_nvshmem.common import shadow_ibgda_headers

    workdir = os.path.join(tempfile.gettempdir(), f"pkb-nvshmem4py-nvrtc-{os.getuid()}")
    shadow_ibgda_headers(numba.cuda.config, workdir)


def __getattr__(name):
    if name in _HOST:
        value = getattr(importlib.import_module("pkb_nvshmem.nvshmem4py.host"), name)
    elif name in ("cuda", "nvd", "nvs", "int32"):
        value = _device_module(name)
    else:
        raise AttributeError(f"module 'pkb_nvshmem.nvshmem4py' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
