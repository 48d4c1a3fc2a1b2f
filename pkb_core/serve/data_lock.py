"""One service per data directory: the service holds ``DATA/service.lock`` for its whole life.

Two services on one ``--data`` would each take the other's jobs for their own:
the second one's restart recovery (:meth:`pkb_core.serve.store.JobStore.recover`)
puts the first one's running jobs back in the queue and runs them a second time
on the same devices. So :class:`pkb_core.serve.service.Service` takes the folder's
lock (:mod:`pkb_core.process.folder_lock`) before it opens anything in it and keeps
it until it stops; a second service is refused with one line (:class:`DataInUse`,
exit status 4), having touched nothing. A service started after its predecessor
died (``kill -9`` included) takes the folder over at once.
"""
from __future__ import annotations

from pathlib import Path

from pkb_core.errors import CannotStart
from pkb_core.process.folder_lock import FolderHeld, FolderLock

#: The lock file, in the data directory.
LOCK_FILE = "service.lock"


class DataInUse(CannotStart):
    """Another live service holds the data directory."""


class DataLock:
    """Acquires a data directory's lock (:class:`FolderLock`) for a service."""

    @staticmethod
    def acquire(data_dir: Path) -> FolderLock:
        """Lock ``data_dir`` (created if missing) for this process, or :class:`DataInUse`."""
        try:
            return FolderLock.acquire(Path(data_dir), LOCK_FILE)
        except FolderHeld as held:
            raise DataInUse(f"the data directory {data_dir} is in use by another pkb service ({held.holder}): "
                            "stop that one, or give this one another data directory (--data)") from None
