"""One service per data directory: the service holds ``DATA/service.lock`` for its whole life.

Two services on one ``--data`` would each take the other's jobs for their own:
the second one's restart recovery (:meth:`pkb_core.serve.store.JobStore.recover`)
puts the first one's running jobs back in the queue and runs them a second time
on the same devices. So :class:`pkb_core.serve.service.Service` takes an
exclusive ``flock`` on the lock file before it opens anything in the folder and
keeps the descriptor open until it stops; a second service is refused with one
line (:class:`DataInUse`, exit status 4), having touched nothing.

The kernel releases a ``flock`` when its holder's descriptors close, which a
process killed with ``kill -9`` does too, so a service started after its
predecessor died takes the folder over at once. The descriptor is not inherited
(Python opens files close-on-exec, and everything the service starts is a new
program), so no leftover child can keep the folder locked. The file also names
the holder's process id, for the refusal's message; only the lock counts.
"""
from __future__ import annotations

import errno
import fcntl
import os
import socket
from pathlib import Path

from pkb_core.errors import CannotStart

#: The lock file, in the data directory.
LOCK_FILE = "service.lock"


class DataInUse(CannotStart):
    """Another live service holds the data directory."""


class DataLock:
    """The held lock of one data directory; :meth:`release` (or the process's end) gives it back."""

    def __init__(self, data_dir: Path, fd: int):
        self.data_dir = data_dir
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, data_dir: Path) -> "DataLock":
        """Lock ``data_dir`` (created if missing) for this process, or :class:`DataInUse`."""
        data_dir = Path(data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        path = data_dir / LOCK_FILE
        # Not truncated on open: the holder's process id stays readable to the one refused.
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise DataInUse(f"the data directory {data_dir} is in use by another pkb service ({_holder(path)}): "
                            "stop that one, or give this one another data directory (--data)") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
        return cls(data_dir, fd)

    def release(self) -> None:
        """Give the directory back (idempotent)."""
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
