"""One process at a time in a folder: an exclusive ``flock`` on a lock file in it, held for the
holder's life.

The kernel releases a ``flock`` when its holder's descriptors close, which a process killed with
``kill -9`` does too, so the next process takes the folder over at once. The descriptor is not
inherited (Python opens files close-on-exec, and everything a holder starts is a new program), so
no leftover child keeps the folder locked. The file also names the holder's process id, for the
refusal's message; only the lock counts.

Used by the reward service for its data directory (:mod:`pkb_core.serve.data_lock`) and by
``pkb run``/``pkb bench`` for their run directory (:mod:`pkb_core.results.run_lock`).
"""
from __future__ import annotations

import errno
import fcntl
import os
import socket
from pathlib import Path


class FolderHeld(Exception):
    """Another live process holds the folder; ``holder`` is ``pid N`` (``on HOST`` where another
    host wrote it) or ``pid unknown``."""

    def __init__(self, holder: str):
        super().__init__(holder)
        self.holder = holder


class FolderLock:
    """The held lock of one folder; :meth:`release` (or the process's end) gives it back."""

    def __init__(self, folder: Path, fd: int):
        self.folder = folder
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, folder: Path, file_name: str) -> "FolderLock":
        """Lock ``folder`` (created if missing) through its ``file_name``, or :class:`FolderHeld`."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / file_name
        # Not truncated on open: the holder's process id stays readable to the one refused.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise FolderHeld(_holder(path)) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
        return cls(folder, fd)

    def release(self) -> None:
        """Give the folder back (idempotent)."""
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None


def _holder(path: Path) -> str:
    """``pid N on HOST`` as the holder wrote it, or ``pid unknown`` while it has not yet."""
    try:
        pid, _, host = path.read_text().strip().partition(" ")
    except OSError:
        pid = host = ""
    if not pid:
        return "pid unknown"
    return f"pid {pid}" + (f" on {host}" if host and host != socket.gethostname() else "")
