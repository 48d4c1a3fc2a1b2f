"""An NVSHMEM of the user's choosing for the ``nvshmem4py`` backend only.

nvshmem4py 0.4.1 compiles its Numba device shim with NVRTC against the
NVSHMEM headers it finds, and NVSHMEM 3.4.5 (the build torch 2.11 ships)
has device headers that NVRTC rejects: a host-only constructor in
``nvshmem_tensor.h`` and ``std::is_integral`` without ``<type_traits>`` in
``reduce.cuh`` (2xH200, 2026-11-22). NVSHMEM 3.8.0's headers compile.

Set ``PKB_NVSHMEM4PY_HOME`` to an NVSHMEM tree (``include/nvshmem.h`` and
``lib/libnvshmem_host.so.3``; the ``nvidia/nvshmem`` folder of the
``nvidia-nvshmem-cu13`` wheel is one) and the nvshmem4py backend's worker
processes use it:

* its ``libnvshmem_host.so.3`` is loaded before torch (``BackendInfo.preload``),
  so nvshmem4py's host calls, which look the library up by soname, reach it.
  Keep the wheel's layout (``ROOT/nvidia/nvshmem``): torch then loads that
  same file instead of its own (:mod:`pkb_core.plugin.preload`); with another
  layout the process would hold two NVSHMEM libraries, and init refuses;
* its ``include`` directory replaces the pip one in the NVRTC search path
  nvshmem4py sets for its shim (:func:`use_home_headers`).

The ``nvshmem`` backend (torch's NVSHMEM) is unaffected: it runs in other
processes, with torch's own library. Nothing here imports torch or nvshmem4py.
"""
from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "PKB_NVSHMEM4PY_HOME"
HOST_SONAME = "libnvshmem_host.so.3"


def nvshmem_home(environ=None) -> Path | None:
    """The tree named by :data:`HOME_ENV`, or None when it is unset."""
    value = (os.environ if environ is None else environ).get(HOME_ENV, "")
    return Path(value) if value else None


def home_missing(home: Path) -> str | None:
    """One line when ``home`` lacks what the backend needs from it."""
    wanted = [home / "include" / "nvshmem.h", home / "lib" / HOST_SONAME]
    absent = [str(path.relative_to(home)) for path in wanted if not path.is_file()]
    if absent:
        return f"{HOME_ENV}={home} has no {' and no '.join(absent)} (point it at an NVSHMEM tree with include/ " \
               f"and lib/, such as nvidia/nvshmem of the nvidia-nvshmem-cu13 wheel)"
    return None


def preload(environ=None) -> tuple:
    """The libraries the worker loads before torch: the home's host library,
    when :data:`HOME_ENV` names a complete tree; else nothing."""
    home = nvshmem_home(environ)
    if home is None or home_missing(home):
        return ()
    return (str(home / "lib" / HOST_SONAME),)


def loaded_elsewhere(home: Path, mapped) -> str | None:
    """One line when this process has an NVSHMEM host library mapped that is
    not the home's (torch's was loaded first), else None.

    :param mapped: paths of the mapped ``libnvshmem_host`` files
        (``pkb_core.plugin.preload.mapped_paths("libnvshmem_host")``).
    """
    ours = os.path.realpath(home / "lib" / HOST_SONAME)
    others = [path for path in mapped if os.path.realpath(path) != ours]
    if others and len(others) == len(mapped):
        return f"{HOME_ENV} is set but this process loaded NVSHMEM from {others[0]} instead of {ours}"
    if others:
        return f"{HOME_ENV} is set but this process loaded two NVSHMEM host libraries ({others[0]} beside {ours})"
    return None


def use_home_headers(config, home: Path, packaged_include: str | None) -> str:
    """Make NVRTC find the home's NVSHMEM headers first.

    nvshmem4py's Numba bindings set ``config.CUDA_NVRTC_EXTRA_SEARCH_PATHS``
    to the pip NVSHMEM include directory (``packaged_include``), the CCCL
    one and their own folder when they are imported. This drops
    ``packaged_include`` and puts the home's include directory first, so every
    NVSHMEM header comes from one tree.

    :param config: ``numba.cuda.config`` (tests pass a stand-in).
    :returns: the include directory now first.
    """
    include = str(home / "include")
    paths = [p for p in (getattr(config, "CUDA_NVRTC_EXTRA_SEARCH_PATHS", "") or "").split(":") if p]
    paths = [p for p in paths if p not in (include, packaged_include)]
    config.CUDA_NVRTC_EXTRA_SEARCH_PATHS = ":".join([include, *paths])
    return include
