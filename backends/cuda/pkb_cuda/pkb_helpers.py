"""PKB's CUDA helper, as pkb provides it to solution files (``utils.cuda_helpers``).

ParallelKernelBench's CUDA (and Triton, and ParallelKittens) solutions build
their kernels with ``from utils.cuda_helpers import compile_cuda_extension``.
pkb serves that name to solution files only (:mod:`pkb_core.candidate.solution_modules`;
nothing is installed as a top-level ``utils``): the module a solution gets
holds :func:`compile_cuda_extension` from here, which builds through
:func:`pkb_cuda.compile`: cached by content in ``$PKB_CACHE_DIR/cuda``, built
once per node behind a file lock, compiler errors as ``CompileError``, and
found by the compile phase's ahead-of-time builds (:mod:`pkb_cuda.ahead`).

What a call means is PKB's: ``load_inline`` of one CUDA source that carries its
own ``PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)`` (no C++ declarations, no
generated bindings), ``-O3`` in front of the caller's nvcc flags, the include
paths and linker flags as given, no pkb device header in front. Differences:
PKB sets ``TORCH_CUDA_ARCH_LIST=9.0`` in the process when it is unset; pkb
leaves the environment alone and builds for ``TORCH_CUDA_ARCH_LIST`` or, unset,
the visible GPUs (9.0 on H100 and H200: the same code). The extension's module
is named ``pkb_<name>_<hash>``, so two files that both say ``"allreduce"`` never
collide; a name that is not a C identifier has its other characters made ``_``.
"""
from __future__ import annotations

import re

__all__ = ["compile_cuda_extension"]

#: The name PKB's solutions import the helper under.
HELPER_MODULE = "utils.cuda_helpers"
#: PKB's ParallelKittens runtime (multicast ``TKParallelTensor`` objects).
PK_RUNTIME_MODULE = "utils.parallelkittens_runtime"
#: Why a file importing :data:`PK_RUNTIME_MODULE` cannot run in pkb (one line).
PK_RUNTIME_REASON = (
    "PKB's ParallelKittens runtime builds multicast TKParallelTensor objects (NVLink multicast through "
    "ThunderKittens' IPC broker), which pkb does not run: multicast is off on its machines (port the file to "
    "unicast pgls for --backend parallelkittens, docs/backends/parallelkittens.md)")

#: What the CUDA-based backends declare on their BackendInfo.
SOLUTION_MODULES = {HELPER_MODULE: __name__}
UNSUPPORTED_MODULES = {PK_RUNTIME_MODULE: PK_RUNTIME_REASON}

#: nvcc flags PKB's helper puts in front of the caller's.
BASE_CUDA_CFLAGS = ("-O3",)


def compile_cuda_extension(
    name: str,
    cuda_src: str,
    extra_cuda_cflags: list[str] | None = None,
    extra_include_paths: list[str] | None = None,
    extra_ldflags: list[str] | None = None,
):
    """Build (or load from pkb's cache) a CUDA extension from one source and return its module.

    :param name: the extension's name (made a C identifier; messages say ``<name>.cu``).
    :param cuda_src: CUDA C++ with the kernels, their host wrappers and the
        ``PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)`` block that binds them.
    :param extra_cuda_cflags: nvcc flags, after ``-O3``.
    :param extra_include_paths: directories for ``#include``.
    :param extra_ldflags: linker flags, e.g. ``["-lcuda"]``.
    :raises pkb_core.errors.CompileError: nvcc, the host compiler or loading failed.
    """
    from pkb_cuda.build import compile as build

    return build(
        _identifier(name), cuda_src, "", (),
        extra_cuda_cflags=[*BASE_CUDA_CFLAGS, *(extra_cuda_cflags or [])],
        extra_cflags=[],
        extra_ldflags=list(extra_ldflags or []),
        extra_include_paths=list(extra_include_paths or []),
        prelude=False,
    )


def _identifier(name) -> str:
    text = re.sub(r"[^A-Za-z0-9_]", "_", str(name)) or "ext"
    return text if not text[0].isdigit() else f"_{text}"
