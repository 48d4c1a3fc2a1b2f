"""Shared libraries a backend's worker processes load before torch.

Some backends need their own build of a library that torch also loads (the
``nvshmem4py`` backend with a newer NVSHMEM than the one torch ships). The
dynamic loader takes the first library of a given soname a process loads
and reuses it for every later request of that soname, so the backend's
build has to be loaded first: before ``import torch``.

A backend names those libraries with ``BackendInfo.preload``; the launcher
passes them to its workers in :data:`PRELOAD_ENV` (``os.pathsep``-separated
paths), and :func:`load_preloads` runs as the worker's first statement.
A library that fails to load is remembered, not raised: the backend's init
then tells the user in one line (see :func:`preload_errors`).

This module imports nothing heavy: it runs before torch.
"""
from __future__ import annotations

import ctypes
import os

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
