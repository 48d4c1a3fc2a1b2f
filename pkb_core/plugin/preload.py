"""Shared libraries a backend's worker processes load before torch.

Some backends need their own build of a library that torch also loads (the
``nvshmem4py`` backend with a newer NVSHMEM than the one torch ships). The
dynamic loader takes the first library of a given soname a process loads
and reuses it for every later request of that soname, so the backend's
build has to be loaded first: before ``import torch``.

A backend names those libraries with ``BackendInfo.preload``; the launcher
passes them to its workers in :data:`PRELOAD_ENV` (``os.pathsep``-separated
paths), and the worker's first statement loads them
(:func:`import_torch_after_preloads`).
A library that fails to load is remembered, not raised: the backend's init
then tells the user in one line (see :func:`preload_errors`).

Loading first is not enough on its own: ``import torch`` itself loads the
CUDA libraries of NVIDIA's wheels (NCCL, NVSHMEM, cuBLAS, ...) by absolute
path from the first ``sys.path`` entry holding ``nvidia/<name>/lib``, and
the loader dedupes absolute paths by file, not by soname, so torch's copy
would load beside the preloaded one (seen on 2xH200, 2026-11-22: two
``libnvshmem_host.so.3`` mapped). :func:`import_torch_after_preloads`
therefore puts the root of each preloaded library laid out like those
wheels (``ROOT/nvidia/<name>/lib/<file>``) first on ``sys.path`` while torch
imports, so torch finds the very file already loaded.

This module imports nothing heavy at import time.
"""
from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

#: The environment variable the launcher fills and the worker reads.
PRELOAD_ENV = "PKB_WORKER_PRELOAD"

_errors: dict[str, str] = {}


def preload_environment(paths) -> dict:
    """The environment entries that make a worker preload ``paths`` ({} for none)."""
    paths = [str(p) for p in paths]
    return {PRELOAD_ENV: os.pathsep.join(paths)} if paths else {}


def load_preloads(environ=None) -> list[str]:
    """Load (``RTLD_GLOBAL``) every library named in :data:`PRELOAD_ENV`; return
    the paths that loaded. Failures are kept for :func:`preload_errors`."""
    environ = os.environ if environ is None else environ
    loaded = []
    for path in filter(None, environ.get(PRELOAD_ENV, "").split(os.pathsep)):
        try:
            ctypes.CDLL(path, mode=os.RTLD_GLOBAL)
        except OSError as exc:
            _errors[path] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        else:
            loaded.append(path)
    return loaded


def preload_errors() -> dict[str, str]:
    """``{path: first line of the loader's error}`` for preloads that failed."""
    return dict(_errors)


def mapped_paths(fragment: str, maps_file: str = "/proc/self/maps") -> list[str]:
    """Files mapped into this process whose path contains ``fragment``, in
    the order first mapped ([] where ``/proc`` is not there)."""
    try:
        with open(maps_file) as maps:
            lines = maps.read().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fragment in fields[5] and fields[5] not in found:
            found.append(fields[5])
    return found


def wheel_root(path) -> str | None:
    """``ROOT`` for a library at ``ROOT/nvidia/<name>/lib/<file>`` (the layout
    of NVIDIA's wheels, which torch searches), else None."""
    parts = Path(path).parts
    if len(parts) >= 5 and parts[-4] == "nvidia" and parts[-2] == "lib":
        return str(Path(*parts[:-4]))
    return None


def import_torch_after_preloads(environ=None) -> list[str]:
    """Load the preloads (:func:`load_preloads`), then import torch with the
    wheel roots of what loaded first on ``sys.path`` (removed again after),
    so torch's own library preloading picks the same files. Returns the
    paths that loaded."""
    loaded = load_preloads(environ)
    roots = [root for root in map(wheel_root, loaded) if root and root not in sys.path]
    sys.path[:0] = roots
    try:
        import torch  # noqa: F401 - the import is the point
    finally:
        for root in roots:
            sys.path.remove(root)
    return loaded
