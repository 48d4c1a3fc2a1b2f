"""Where a launch's processes keep their shared-memory files: folders nobody else can name.

Heap segments and parcels are files in ``/dev/shm`` (memory), a folder every
user may write. Names there can be predicted and planted (a judge whose heap
segment already exists times without its device barrier; a parcel name taken
by a link), so no process of a launch uses ``/dev/shm`` itself:

```
/dev/shm/pkb-<launch>/            root (the launcher), 0711: made exclusively, enter-only
    judge<n>/                     root, 0700: the judge's heap segments
    <job run id>/                 the job's candidate user, 0700: its heap segments, its
                                  parcels (the judge writes its inputs there), its scratch
```

A candidate group runs as a user of its own (:mod:`pkb_core.candidate.sandbox`),
so it can open only its own job's folder: not the judge's, not another job's
(whose names it does not know and could not enter), not the launch folder's
listing. The launcher removes each job's folder with its job, the launch folder
at its end, and whatever a candidate's user left directly in ``/dev/shm``.
"""
from __future__ import annotations

import os
import shutil
import stat
import tempfile

from pkb_core.errors import PkbError


def shm_root() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


class Scratch:
    """The shared-memory folders of one launch on this node (see the module docstring).

    :param path: the launch folder (the same name on every node of a launch).
    """

    def __init__(self, path: str):
        self.path = path
        self.made = False

    @classmethod
    def for_launch(cls, launch_id: str) -> "Scratch":
        return cls(os.path.join(shm_root(), f"pkb-{launch_id}"))

    def _ensure(self) -> None:
        if self.made:
            return
        try:
            os.mkdir(self.path, 0o711)
            os.chmod(self.path, 0o711)  # whatever the umask
        except FileExistsError:
            # Another node of this launch on the same machine made it; anything
            # else under this name (a link, a folder of another user) is refused.
            _check_owned(self.path, os.geteuid(), 0o711)
        self.made = True

    def group(self, name: str, uid: int | None = None) -> str:
        """The folder of one group (``uid``: its owner, a candidate group's
        user; ``None``: this process's, for the judge)."""
        self._ensure()
        folder = os.path.join(self.path, name)
        owner = uid if uid is not None and os.geteuid() == 0 else os.geteuid()
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:  # another node of the launch on this machine (only root can make it)
            _check_owned(folder, owner, 0o700)
            return folder
        os.chmod(folder, 0o700)
        if owner != os.geteuid():
            os.chown(folder, owner, owner)
        return folder

    def remove_group(self, name: str) -> None:
        shutil.rmtree(os.path.join(self.path, name), ignore_errors=True)

    def remove(self) -> None:
        if self.made:
            shutil.rmtree(self.path, ignore_errors=True)
            self.made = False


def _check_owned(path: str, uid: int, mode: int) -> None:
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or stat.S_IMODE(st.st_mode) != mode:
        raise PkbError(f"{path} exists and is not a folder pkb made (owner {st.st_uid}, mode "
                       f"{stat.S_IMODE(st.st_mode):o}): pkb will not use it")


def sweep_owned(uid: int) -> None:
    """Remove what the user ``uid`` (a finished candidate group's) left directly
    in the shared-memory folder: it may not keep memory after its job."""
    root = shm_root()
    for entry in os.listdir(root):
        path = os.path.join(root, entry)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if st.st_uid != uid:
            continue
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass
