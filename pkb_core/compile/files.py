"""Two things every cache that several processes fill at once needs: an exclusive
file lock (the first process builds, the others wait) and a write that readers
see whole or not at all. Used by the precompiled headers (:mod:`pkb_core.compile.pch`)
and by backends' build caches (the cuda backend's ``pkb_cuda.build``)."""
from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path


@contextlib.contextmanager
def file_lock(path: Path):
    """Hold an exclusive ``flock`` on ``path`` (created if missing) for the block."""
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and one rename."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
