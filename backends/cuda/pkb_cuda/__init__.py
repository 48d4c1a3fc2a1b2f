"""pkb's CUDA backend: solutions written in CUDA C++ and built with torch's
``load_inline``, reading peers' memory directly over NVLink.

A solution is a Python file whose ``solution(*inputs)`` has the reference's
signature. At import it builds its kernels with :func:`compile` (cached by
content, built once per node); on each call it looks up the inputs' peer
tables with :func:`peers` and launches on torch's current stream::

    import pkb_cuda

    ext = pkb_cuda.compile("copy_from_peer", CUDA_SOURCE,
                           cpp_source="torch::Tensor run(torch::Tensor x, int64_t buffers, ...);",
                           functions=["run"])

    def solution(tensor):
        return ext.run(tensor, *pkb_cuda.peers(tensor))

The helper API (see each docstring):

:func:`compile`
    build or load a CUDA extension; compiler errors raise
    :class:`pkb_core.errors.CompileError` (the ``compile-error`` verdict).
    A ``cuda_source`` that names nothing of torch's gets no torch header
    (seconds to build); ``bind="ops"`` binds through torch's dispatcher
    (``TORCH_LIBRARY``) instead of pybind11, so ``main.cpp`` needs only
    ``<torch/library.h>`` (:mod:`pkb_cuda.ops`).
:func:`cache_key`, :func:`cache_dir`
    the content hash a build is stored under, and where
    (``$PKB_CACHE_DIR/cuda``, ``$XDG_CACHE_HOME/pkb/cuda`` or ``~/.cache/pkb/cuda``).
:func:`peers`, :class:`Peers`, :func:`peer_ptrs`
    the pointer table, signal pad table, byte offset, rank, world size,
    block limit and alignment of a symmetric tensor, as ints.
:data:`BARRIER_CUH`
    the device header :func:`compile` puts in front of every CUDA source:
    ``pkb::barrier_block(pads, rank, world, slot)`` (the pairwise
    compare-and-swap barrier), ``pkb::peer_ptr<T>(buffers, peer, offset)``,
    ``pkb::cas_release_sys`` / ``pkb::cas_acquire_sys``.
:data:`PUSH_CUH`, :func:`push_scratch`, :class:`PushScratch`
    small messages pushed one way with the data as its own flag (no
    barrier): the device helpers (``pkb::PushScratch``, ``pkb::push_clean``,
    ``pkb::push_receive``), which a source that uses them starts with, and
    the symmetric scratch and counters they run on.
:mod:`pkb_cuda.nvrtc`
    kernel-only CUDA C++ compiled with NVRTC through CuPy (about a second
    cold, no host C++, no torch headers): ``nvrtc.kernel(source,
    "name<float>")(grid, block, *args)`` launches on torch's current stream.
:func:`compile_only`
    compile to objects with nvcc only (CPU machines; no link, no load).
:func:`missing`
    one line naming what this machine lacks (torch CUDA, a GPU, nvcc, ninja).

This module imports no torch: the ``pkb`` command loads the plugin cheaply.
"""
from __future__ import annotations

__version__ = "0.1.0"

from pkb_cuda.spec import BARRIER_CUH, DEFAULT_CFLAGS, DEFAULT_CUDA_CFLAGS, PUSH_CUH  # noqa: E402
from pkb_cuda.build import (  # noqa: E402
    cache_dir,
    cache_key,
    compile,
    compile_only,
)
from pkb_cuda.peers import Peers, peer_ptrs, peers  # noqa: E402
from pkb_cuda.push import PushScratch, push_scratch  # noqa: E402
from pkb_cuda.toolchain import find_nvcc, missing  # noqa: E402

__all__ = [
    "BARRIER_CUH", "DEFAULT_CFLAGS", "DEFAULT_CUDA_CFLAGS", "PUSH_CUH", "Peers", "PushScratch", "cache_dir",
    "cache_key", "compile", "compile_only", "find_nvcc", "missing", "peer_ptrs", "peers", "push_scratch",
]
