"""Kernel-only CUDA C++ compiled with NVRTC (through CuPy), launched on torch's stream.

:func:`pkb_cuda.compile` builds a full torch extension (``load_inline``: host
C++, pybind11, torch's headers), which takes tens of seconds cold. When a
solution needs only kernels, NVRTC compiles them at run time in about a second
(and CuPy caches the result on disk by source and options)::

    from pkb_cuda import nvrtc, peers

    SOURCE = r'''
    extern "C" __global__ void scale(float* out, const float* x, long long n) { ... }
    '''

    def solution(x):
        out = torch.empty_like(x)
        nvrtc.kernel(SOURCE, "scale")((blocks,), (256,), out, x, x.numel())
        return out

Arguments: a ``torch.Tensor`` passes its device address (a ``T*`` in the
kernel); a Python ``int`` passes a 64-bit integer (``long long``, also good
for the addresses :func:`pkb_cuda.peers` returns); a ``float`` a 32-bit
``float``; a ``bool`` a ``bool``; numpy scalars pass as themselves (use them
for any other width). Launches go on torch's current stream of the tensor's
device, so the kernel is ordered with torch's work and captured by CUDA
graphs like any torch op.

Templates are instantiated by name: ``nvrtc.kernel(SOURCE, "add<__nv_bfloat16>")``.
With ``prelude`` (the default) the source starts with pkb's device helpers
(:data:`pkb_cuda.BARRIER_CUH`: ``pkb::barrier_block``, ``pkb::peer_ptr``),
in a form NVRTC compiles. Compiler errors raise
:class:`pkb_core.errors.CompileError` with NVRTC's log.

When to use which: NVRTC (here) for kernels whose launch a few lines of
Python can do — the common case for collectives, and the fast path for
evaluating many generated files; :func:`pkb_cuda.compile` when the solution
needs host-side C++ (torch's C++ API, its allocator, several kernels chained in
C++ to save Python launch time) or links a library.
"""
from __future__ import annotations


from pkb_core import CompileError

#: Options every kernel is compiled with (NVRTC picks the device's architecture).
DEFAULT_OPTIONS = ("--std=c++17",)
MISSING_CUPY = ("the cuda backend's NVRTC helper (pkb_cuda.nvrtc) needs CuPy for this CUDA version "
                "(pip install cupy-cuda13x, or cupy-cuda12x)")

# NVRTC has no <cstdint> or <cuda_runtime.h>; the helpers need only these names.
_RTC_TYPES = """#ifdef __CUDACC_RTC__
typedef unsigned int uint32_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
typedef unsigned long long uintptr_t;
#endif
"""

_MODULES: dict = {}
_STREAMS: dict = {}


def missing() -> str | None:
    """``None`` when CuPy can be imported, else the one line saying so."""
    try:
        import cupy  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means "missing"
        return f"{MISSING_CUPY}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return None


def full_source(source: str, prelude: bool = True) -> str:
    """The text NVRTC compiles: pkb's helpers (made NVRTC-safe) and ``source``."""
    if not prelude:
        return source
    from pkb_cuda.spec import BARRIER_CUH

    helpers = BARRIER_CUH.replace("#include <cstdint>\n", "").replace("#include <cuda_runtime.h>\n", "")
    return f"{_RTC_TYPES}{helpers}\n{source}"


def compile_options(options=()) -> tuple:
    """``options`` after the defaults, with the toolkit's include directory
    (for ``<cuda_bf16.h>`` and friends) when one is found."""
    from pkb_cuda.toolchain import find_cuda_home

    found = list(DEFAULT_OPTIONS)
    home = find_cuda_home()
    if home and (home / "include").is_dir():
        found.append(f"-I{home / 'include'}")
    return tuple(found) + tuple(options)


class Kernel:
    """A compiled kernel: call it with ``(grid, block, *args)`` (see the module docstring)."""

    def __init__(self, function, name: str):
        self._function = function
        self.name = name

    def __call__(self, grid, block, *args, shared_mem: int = 0):
        import torch

        device = torch.cuda.current_device()
        stream = torch.cuda.current_stream(device)
        self._function(_dims(grid), _dims(block), tuple(_argument(a) for a in args),
                       stream=_external_stream(stream.cuda_stream, device), shared_mem=shared_mem)


def kernel(source: str, name: str, *, options=(), prelude: bool = True) -> Kernel:
    """The kernel ``name`` of ``source``, compiled with NVRTC on first use
    (per process and device; CuPy's disk cache makes later processes fast).

    :raises CompileError: NVRTC failed (its log is the message), or CuPy is missing.
    """
    reason = None if _MODULES else missing()
    if reason:
        raise CompileError(reason)
    import torch

    device = torch.cuda.current_device()
    key = (source, name, tuple(options), prelude, device)
    function = _MODULES.get(key)
    if function is None:
        import cupy

        text = full_source(source, prelude)
        try:
            with cupy.cuda.Device(device):
                module = cupy.RawModule(code=text, options=compile_options(options),
                                        name_expressions=[name] if "<" in name else None)
                function = module.get_function(name)
        except cupy.cuda.compiler.CompileException as exc:
            raise CompileError(f"NVRTC could not compile kernel {name!r}:\n{_log(exc)}") from None
        _MODULES[key] = function
    return Kernel(function, name)


def _log(exc) -> str:
    text = exc.get_message() if hasattr(exc, "get_message") else str(exc)
    lines = [line for line in text.splitlines() if line.strip()]
    return "\n".join(lines[:40])


def _dims(value) -> tuple:
    return tuple(int(v) for v in value) if isinstance(value, (tuple, list)) else (int(value),)


def _argument(value):
    import numpy as np
    import torch

    if isinstance(value, torch.Tensor):
        return np.uint64(value.data_ptr())
    if isinstance(value, bool):
        return np.bool_(value)
    if isinstance(value, int):
        return np.int64(value)
    if isinstance(value, float):
        return np.float32(value)
    return value


def _external_stream(handle: int, device: int):
    """CuPy's view of torch's stream (cached: making one per launch costs microseconds)."""
    stream = _STREAMS.get((handle, device))
    if stream is None:
        import cupy

        stream = _STREAMS[(handle, device)] = cupy.cuda.ExternalStream(handle, device)
    return stream


__all__ = ["DEFAULT_OPTIONS", "Kernel", "compile_options", "full_source", "kernel", "missing"]
