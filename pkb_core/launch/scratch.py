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

The launch folder and each candidate group's folder are file systems of their own where pkb runs
as root (:mod:`pkb_core.process.own_mounts`: a tmpfs each, a group's of at most
:data:`GROUP_INODES` files), so that no job can use up the inodes or the room another job's files
need, whatever it makes in its own folder or in ``/dev/shm`` itself.

A candidate group runs as a user of its own (:mod:`pkb_core.confine.sandbox`),
so it can open only its own job's folder: not the judge's, not another job's
(whose names it does not know and could not enter), not the launch folder's
listing. The launcher removes each job's folder with its job, the launch folder
at its end, and whatever a candidate's user left directly in ``/dev/shm``.

Where the launcher ends without running its code (``kill -9``, a crash), its warden
(:mod:`pkb_core.process.warden`) removes the launch folder; and every launch folder
names its maker in a root-only ``.owner`` file (pid and start time), so the next
launch on the machine removes the folders of makers that are gone (:func:`sweep_stale`).
"""
from __future__ import annotations

import os
import shutil
import stat
import tempfile

from pkb_core.errors import PkbError
from pkb_core.process.own_mounts import mount_own_tmpfs, remove_tree

#: Files and folders a candidate group's folder holds at most (its heap segments, parcels, gate
#: regions and compiled kernels are hundreds; pkb's own kernels, copied in, under a thousand).
GROUP_INODES = 1 << 16


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
        from pkb_core.process.warden import warden

        sweep_stale()
        try:
            os.mkdir(self.path, 0o711)
            os.chmod(self.path, 0o711)  # whatever the umask
            warden().watch(folder=self.path)
            mount_own_tmpfs(self.path, mode=0o711)  # only pkb writes here: no count of files
            _write_owner(self.path)
        except FileExistsError:
            # Another node of this launch on the same machine made it; anything
            # else under this name (a link, a folder of another user) is refused.
            _check_owned(self.path, os.geteuid(), 0o711)
        self.made = True

    def group(self, name: str, uid: int | None = None, seed=None) -> str:
        """The folder of one group (``uid``: its owner, a candidate group's
        user; ``None``: this process's, for the judge). ``seed``: a folder whose
        contents the new folder starts with, owned by its owner (the judge's Triton
        cache: the group's processes use the folder as theirs, :func:`pkb_core.confine.
        sandbox.use_scratch`, and find pkb's own kernels compiled there)."""
        self._ensure()
        folder = os.path.join(self.path, name)
        owner = uid if uid is not None and os.geteuid() == 0 else os.geteuid()
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:  # another node of the launch on this machine (only root can make it)
            _check_owned(folder, owner, 0o700)
            return folder
        os.chmod(folder, 0o700)
        if uid is not None:  # a candidate group's: what it makes there counts against its own inodes
            mount_own_tmpfs(folder, mode=0o700, owner=owner, inodes=GROUP_INODES)
        if seed is not None:
            _copy_seed(str(seed), folder)
        if owner != os.geteuid():
            for root, dirs, files in os.walk(folder):
                for entry in (root, *(os.path.join(root, f) for f in files)):
                    os.lchown(entry, owner, owner)
        return folder

    def remove_group(self, name: str) -> None:
        remove_tree(os.path.join(self.path, name))

    def remove(self) -> None:
        if self.made:
            from pkb_core.process.warden import warden

            remove_tree(self.path)
            warden().forget(folder=self.path)
            self.made = False


#: Bytes and files of a seed (:meth:`Scratch.group`) copied into a group's folder at most: pkb's
#: own kernels are well under a MiB in a few dozen files; a cache grown past this by something
#: else is copied only in part, and a group then compiles what it lacks.
SEED_MAX_BYTES, SEED_MAX_FILES = 64 << 20, 1024


def _copy_seed(seed: str, folder: str) -> None:
    """Copy the regular files and folders under ``seed`` into ``folder`` (best effort: a seed being
    written as it is read loses only what the group then compiles itself), up to
    :data:`SEED_MAX_BYTES` and :data:`SEED_MAX_FILES`. Links are not followed or copied: the seed
    is pkb's, but what it points to need not be."""
    budget, left = SEED_MAX_BYTES, SEED_MAX_FILES
    for root, dirs, files in os.walk(seed):
        left -= 1 + len(files)
        if left < 0:
            return
        rel = os.path.relpath(root, seed)
        target = folder if rel == "." else os.path.join(folder, rel)
        try:
            os.makedirs(target, 0o700, exist_ok=True)
            for file in files:
                source = os.path.join(root, file)
                info = os.lstat(source)
                if stat.S_ISREG(info.st_mode) and info.st_size <= budget:
                    shutil.copyfile(source, os.path.join(target, file), follow_symlinks=False)
                    budget -= info.st_size
        except OSError:
            continue


#: The file in a launch folder that names the process that made it.
OWNER_FILE = ".owner"
_SWEPT: list = []


def _start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), or None if it is gone:
    with the pid, it names one process (a pid alone may be reused). A zombie is gone too: it
    will never run again, and a service's lane killed with SIGKILL is one until the service
    reaps it, which may be after the next lane swept (its folder was then left behind)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return fields[19]


def _write_owner(folder: str) -> None:
    fd = os.open(os.path.join(folder, OWNER_FILE), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as owner:
        owner.write(f"{os.getpid()} {_start_time(os.getpid())}\n")


def sweep_stale() -> None:
    """Remove the launch folders (``pkb-*``, this user's) whose maker is gone: what a
    launch killed without running its cleanup left. Once per process."""
    if _SWEPT:
        return
    _SWEPT.append(True)
    sweep_stale_now()


def sweep_stale_now() -> None:
    """:func:`sweep_stale` whether or not this process swept already: after a launch this process
    knows was killed with its warden (a SLURM step ends every process of its cgroup, the warden
    included: :func:`pkb_core.launch.fanout.wait_for_shards`)."""
    root = shm_root()
    for entry in os.listdir(root):
        folder = os.path.join(root, entry)
        if not entry.startswith("pkb-"):
            continue
        try:
            st = os.lstat(folder)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
                continue
            with open(os.path.join(folder, OWNER_FILE)) as owner:
                pid, started = owner.read().split()
        except (OSError, ValueError):
            continue  # not a folder this pkb made (or its maker is writing it now)
        if _start_time(int(pid)) != started:
            remove_tree(folder)


def _check_owned(path: str, uid: int, mode: int) -> None:
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or stat.S_IMODE(st.st_mode) != mode:
        raise PkbError(f"{path} exists and is not a folder pkb made (owner {st.st_uid}, mode "
                       f"{stat.S_IMODE(st.st_mode):o}): pkb will not use it")


def sweep_owned(uid: int) -> None:
    """Remove what the user ``uid`` (a finished candidate group's) left directly
    in the shared-memory folder: it may not keep memory after its job."""
    from pkb_core.process.warden import sweep_users

    sweep_users([uid], shm_root())
