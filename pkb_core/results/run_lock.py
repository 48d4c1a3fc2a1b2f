"""One ``pkb run`` or ``pkb bench`` at a time in a run directory.

Two runs into one ``--out`` each ran every job and appended its records beside the other's (a
new user's pass, 2026-12-01: four records for two jobs, the work done twice): each skips what is
recorded when it starts, not what the other is running. So a run holds ``RUN/run.lock``
(:mod:`pkb_core.process.folder_lock`) from before its first job to its end, and a second one is
refused in one line (:class:`RunDirInUse`, exit status 4) before it runs anything. A run started
after the holder ended (``kill -9`` included) resumes in the folder as ever.
"""
from __future__ import annotations

from pathlib import Path

from pkb_core.errors import CannotStart
from pkb_core.process.folder_lock import FolderHeld, FolderLock

#: The lock file, in the run directory.
LOCK_FILE = "run.lock"
#: This process's held run directories (kept for its life: the kernel releases them at its end).
_HELD: dict = {}


class RunDirInUse(CannotStart):
    """Another live ``pkb run`` or ``pkb bench`` writes into the run directory."""


def hold_run_dir(run_dir: Path) -> None:
    """Hold ``run_dir`` for this process (again: nothing), or :class:`RunDirInUse`."""
    key = str(Path(run_dir).resolve())
    if key in _HELD:
        return
    try:
        _HELD[key] = FolderLock.acquire(Path(run_dir), LOCK_FILE)
    except FolderHeld as held:
        raise RunDirInUse(f"the run directory {run_dir} is in use by another pkb run ({held.holder}): wait for it, "
                          "or give this one another --out") from None


def release_run_dir(run_dir: Path) -> None:
    """Give ``run_dir`` back before this process ends (idempotent)."""
    lock = _HELD.pop(str(Path(run_dir).resolve()), None)
    if lock is not None:
        lock.release()
