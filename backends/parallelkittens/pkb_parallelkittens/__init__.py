"""pkb's ``parallelkittens`` backend: ThunderKittens (ParallelKittens) CUDA
kernels built with torch's ``load_inline`` for sm_90a, reading their peers'
memory through unicast parallel global layouts.

A solution is a Python file whose ``solution(*inputs)`` has the reference's
signature. At import it builds its kernels with :func:`compile` (the CUDA
backend's content-addressed cache, built once per node); on each call it
passes :func:`pgl_args` of its inputs to the bound host function, which turns
them into ``pkb::pk::pgl<GL>`` (``kittens::pgl<GL, W, false>``) with
``pkb::pk::make_pgl`` and launches on torch's current stream::

    import pkb_parallelkittens as pk

    ext = pk.compile("pk_copy", CUDA_SOURCE, CPP_SOURCE, functions=["run"])

    def solution(tensor):
        return ext.run(tensor, *pk.pgl_args(tensor))

The helper API (see each docstring):

:func:`compile`
    :func:`pkb_cuda.compile` plus ThunderKittens: ``$THUNDERKITTENS_ROOT``'s
    ``include`` and ``prototype``, ``-std=c++20 -DKITTENS_HOPPER`` and sm_90a,
    ``-lcuda``, ``-DPKB_WORLD_SIZE=<world size>``, and the header
    :data:`HEADER` in front of the source.
:func:`pgl_args`, :class:`PglArgs`
    a symmetric tensor's per-rank address table (CPU int64 tensor), its
    signal-pad table, rank, world size and barrier block limit.
:data:`HEADER`
    namespace ``pkb::pk``: ``kWorld``, ``pgl<GL>``, ``make_pgl<PGL>(ptrs, b,
    d, r, c)``, ``barrier(pads, rank, slot)`` (the CUDA backend's pairwise
    CAS barrier plus a proxy fence for TMA), ``fence_shared_for_tma()``.
:func:`tk_missing`, :func:`world_size`
    what is missing for ThunderKittens here; the world size kernels are
    built for.

No multicast: NVLink multicast is off on pkb's GPU machine, so :func:`compile`
refuses sources that create or use multicast objects (ThunderKittens'
multicast barriers and pgls, ``multimem``, ``cuMulticast*``).

This module imports no torch: the ``pkb`` command loads the plugin cheaply.
"""
from __future__ import annotations

__version__ = "0.1.0"

from pkb_parallelkittens.build import (  # noqa: E402
    HEADER,
    TK_CUDA_FLAGS,
    compile,
    multicast_use,
    tk_include_paths,
    tk_missing,
    tk_root,
    world_size,
)
from pkb_parallelkittens.peers import PglArgs, pgl_args  # noqa: E402

__all__ = ["HEADER", "PglArgs", "TK_CUDA_FLAGS", "compile", "multicast_use", "pgl_args", "tk_include_paths",
           "tk_missing", "tk_root", "world_size"]
