"""Two things every cache that several processes fill at once needs: an exclusive
file lock (the first process builds, the others wait) and a write that readers
see whole or not at all. Used by the precompiled headers (:mod:`pkb_core.compile.pch`)
and by backends' build caches (the cuda backend's ``pkb_cuda.build``)."""
from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
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


def write_atomic(path: Path, text: str, mode: int | None = None) -> None:
    """Write ``text`` to ``path`` through a temporary file and one rename; the file's ``mode``
    (None: what a plain create gives, 0666 under this process's umask)."""
    path = Path(path)
    # A temporary name of this write's own: writers may be threads of one process, not only
    # processes (the service's builds store outcomes from threads).
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666 if mode is None else mode)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
