"""Building ThunderKittens sources through the CUDA backend's cached ``load_inline``.

:func:`compile` adds what ThunderKittens on Hopper needs to
:func:`pkb_cuda.compile` (which does the building, caching, once-per-node file
lock and the ``CompileError`` messages): the include tree from
``$THUNDERKITTENS_ROOT``, sm_90a, C++20, ThunderKittens' flags, the world
size as a compile-time constant and the :data:`HEADER` helpers. Nothing here
imports torch at module import.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from pkb_core import ALLOW_MULTICAST_ENV

#: The device/host helpers (namespace ``pkb::pk``) put in front of every source.
HEADER_PATH = Path(__file__).with_name("pkb_parallelkittens.cuh")
HEADER = HEADER_PATH.read_text()

#: nvcc flags for ThunderKittens on H100/H200 (pkb gpu-notes §3.8).
TK_CUDA_FLAGS = (
    "-std=c++20", "-DKITTENS_HOPPER", "-O3", "--use_fast_math", "--expt-extended-lambda",
    "--expt-relaxed-constexpr", "-Xcompiler=-Wno-psabi", "-Xcompiler=-fno-strict-aliasing", "-DNDEBUG",
    "-gencode=arch=compute_90a,code=sm_90a",
)
#: Host compiler flags for the bindings (main.cpp only declares and binds; torch picks its standard).
TK_CFLAGS = ("-O3",)
#: ThunderKittens builds TMA descriptors with the driver API (cuTensorMapEncodeTiled).
TK_LDFLAGS = ("-lcuda",)

#: Calls that reach NVLink multicast in ThunderKittens, on top of pkb_core's
#: (:data:`pkb_core.plugin.multicast.MULTICAST_PATTERNS`); refused by :func:`compile`
#: and the plugin.
TK_MULTICAST_PATTERNS = (
    r"\bbarrier_t\s*<", r"\bbarrier_all\s*\(", r"\bsignal_all\s*\(", r"\bTKParallelTensor\b", r"\bmc_ptr\b",
    r"\bmulticast_(?:check|create|bind|unbind)\w*", r"\bmultimem\s*<", r"\bmulticast\s*=\s*True\b",
)


def tk_root() -> Path | None:
    """``$THUNDERKITTENS_ROOT`` (the user supplies ThunderKittens), or None."""
    root = os.environ.get("THUNDERKITTENS_ROOT", "").strip()
    return Path(root).expanduser() if root else None


def tk_missing() -> str | None:
    """One line when ThunderKittens' headers are not where they must be."""
    root = tk_root()
    if root is None:
        return ("THUNDERKITTENS_ROOT is not set (point it at a ThunderKittens checkout: "
                "git clone https://github.com/HazyResearch/ThunderKittens)")
    if not (root / "include" / "kittens.cuh").is_file():
        return f"$THUNDERKITTENS_ROOT/include/kittens.cuh is missing (THUNDERKITTENS_ROOT={root})"
    return None


def tk_include_paths(root: Path | None = None) -> list[str]:
    root = root or tk_root()
    return [str(root / "include"), str(root / "prototype")]


def tk_fingerprint(root: Path | None = None) -> str:
    """A short hash of ThunderKittens' include tree (paths, sizes, mtimes), so
    that a different checkout means a different cache key (pkb_cuda keys on
    sources and flags, not on included files)."""
    root = root or tk_root()
    digest = hashlib.sha256()
    for base in (root / "include", root / "prototype"):
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            if path.is_file():
                stat = path.stat()
                digest.update(f"{path.relative_to(root)}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def world_size() -> int:
    """The world size the kernels are built for: torch.distributed's when it is
    initialised (in a pkb worker), else ``$PKB_WORLD_SIZE``, ``$WORLD_SIZE``, or 2."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_world_size()
    except ImportError:
        pass
    for var in ("PKB_WORLD_SIZE", "WORLD_SIZE"):
        if os.environ.get(var, "").strip().isdigit():
            return int(os.environ[var])
    return 2


def multicast_use(source: str) -> str | None:
    """The first multicast call in ``source``, ThunderKittens' spellings
    included, or None (always None with ``PKB_ALLOW_MULTICAST=1``, for
    machines where multicast is safe)."""
    from pkb_core import multicast_use as core_multicast_use

    return core_multicast_use(source, TK_MULTICAST_PATTERNS)


def compile(name, cuda_source, cpp_source="", functions=(), *, extra_cuda_cflags=(), extra_cflags=(),
            extra_ldflags=(), extra_include_paths=(), world=None, verbose=None):
    """Build (or load from the CUDA backend's cache) a ThunderKittens extension.

    :param name: a C identifier naming the extension (messages say ``<name>.cu``).
    :param cuda_source: CUDA C++ using ThunderKittens. In front of it come
        ``pkb_cuda.cuh`` (``pkb::barrier_block``, ``pkb::peer_ptr``), then
        ``#include "kittens.cuh"`` and :data:`HEADER` (``pkb::pk::kWorld``,
        ``pkb::pk::pgl<GL>``, ``pkb::pk::make_pgl``, ``pkb::pk::barrier``).
    :param cpp_source: C++ declarations of the host functions to bind.
    :param functions: names of the functions to expose to Python.
    :param extra_cuda_cflags: nvcc flags added after :data:`TK_CUDA_FLAGS`.
    :param extra_cflags: host flags added after :data:`TK_CFLAGS`.
    :param extra_ldflags: linker flags added after ``-lcuda``.
    :param extra_include_paths: searched after ThunderKittens' ``include`` and
        ``prototype``.
    :param world: the world size to build for (default :func:`world_size`);
        it becomes ``-DPKB_WORLD_SIZE=<world>`` and so part of the cache key.
    :return: the loaded module (``module.<function>(...)``).
    :raises pkb_core.errors.CompileError: ThunderKittens is missing, the source
        uses multicast, or nvcc / the host compiler / loading failed (the
        compiler's error lines; see :func:`pkb_cuda.compile`).

    A cold build takes about a minute (ThunderKittens and torch headers), once
    per node and world size: the other local ranks wait on the cache's lock.
    """
    import pkb_cuda
    from pkb_core import CompileError

    missing = tk_missing()
    if missing:
        raise CompileError(f"building the ThunderKittens extension {name!r}: {missing}")
    found = multicast_use(cuda_source)
    if found:
        raise CompileError(f"building the ThunderKittens extension {name!r}: uses NVLink multicast ({found}), "
                           f"which pkb does not allow on this machine (set {ALLOW_MULTICAST_ENV}=1 where it is safe)")
    root = tk_root()
    world = int(world or world_size())
    source = f'#line 1 "pkb_parallelkittens.cuh"\n{HEADER}\n#line 1 "{name}.cu"\n{cuda_source}'
    flags = [*TK_CUDA_FLAGS, f"-DPKB_WORLD_SIZE={world}", f"-DPKB_TK_FINGERPRINT=0x{tk_fingerprint(root)}",
             *extra_cuda_cflags]
    return pkb_cuda.compile(
        name, source, cpp_source, functions,
        extra_cuda_cflags=flags, extra_cflags=[*TK_CFLAGS, *extra_cflags],
        extra_ldflags=[*TK_LDFLAGS, *extra_ldflags],
        extra_include_paths=[*tk_include_paths(root), *extra_include_paths],
        prelude=True, verbose=verbose)
