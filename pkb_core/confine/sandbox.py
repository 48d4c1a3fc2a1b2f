"""A candidate's own user and its own view of the file system.

The seccomp filter of :mod:`pkb_core.confine.lockdown` names system calls; the
kernel's permission checks name *owners*. A candidate that runs as the
launcher's user can reach everything that user owns by routes no syscall filter
lists (a signal the kernel delivers for a descriptor it owns: ``F_SETOWN`` +
``O_ASYNC``; a bytecode file planted where pkb or another solution is imported
from; a name the judge will ask for). So every candidate group runs as a user
of its own, and sees the file system read-only:

* **its own uid and gid** (:data:`SANDBOX_UID_BASE` + a random offset, chosen
  by the launcher per group, distinct for every group alive at once; a
  builder's by its compile phase, the same way):
  ``kill()``, SIGIO (``sigio_perm`` compares the descriptor owner's
  credentials with the target's), ``/proc/<pid>`` and every file of the
  launcher, the judge, the zygotes and other jobs' candidates are refused by
  the kernel's own checks. Needs root (``CAP_SETUID``/``CAP_SETGID``).
* **a read-only file system**: a private mount namespace in which every mount
  is remounted read-only, except the paths named writable (the job's own
  scratch folder, which holds its heap segments and parcels, and ``/dev/shm``,
  where NCCL makes its shared-memory transport; the judge's names there live
  in root-owned folders). Needs ``CAP_SYS_ADMIN``.
* **reachable code**: a folder the candidate's user may not traverse on the
  way to what it must read (Python's installation under ``/root``, a
  solution in a private temporary folder) is covered by an empty tmpfs into
  which only the needed entries are bound back, read-only: the candidate can
  import what it needs and read nothing else there.

Where a step is impossible (not root, no mount namespace) it is returned as a
missing protection, which every record lists under ``lockdown_gaps``.
"""
from __future__ import annotations

import ctypes
import os
import secrets
import stat
import sys

from pkb_core.process.mount_flags import (CLONE_NEWNS, MNT_DETACH, MS_BIND, MS_NODEV, MS_NOEXEC, MS_NOSUID,
                                          MS_PRIVATE, MS_RDONLY, MS_REC, MS_REMOUNT, libc as _libc)
from pkb_core.process.sessions import die_with_parent

#: First uid (and gid) of candidate groups: far above any real user or a
#: container's mapped range, and below the 32-bit ``(uid_t)-1``.
SANDBOX_UID_BASE = 0x70000000
#: How many uids candidate groups draw from.
SANDBOX_UID_SPAN = 1 << 24

_FLAG_BY_OPTION = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC}
#: Mounts left as they are: kernel interfaces whose writable files are per
#: process or guarded by their own permission checks. ``/sys`` (the cgroup file
#: system included) and ``/proc/sys`` are read-only like every other mount: a
#: process that keeps root's uid without capabilities (a builder) may still
#: write what root owns there (a cgroup's ``cgroup.procs``, a sysctl).
_KEEP = ("/proc", "/dev/pts")
#: Bound read-only onto itself (it is part of the ``/proc`` mount).
_SYSCTLS = "/proc/sys"


def new_sandbox_uid(in_use=()) -> int:
    """A uid for a new candidate group, not among ``in_use``."""
    while True:
        uid = SANDBOX_UID_BASE + 1 + secrets.randbelow(SANDBOX_UID_SPAN - 1)
        if uid not in in_use:
            return uid


def can_switch_user() -> bool:
    return os.geteuid() == 0


def _fail(what: str) -> str:
    return f"{what} ({os.strerror(ctypes.get_errno())})"


def private_mounts(libc) -> str | None:
    """Enter a mount namespace of this process's own, detached from the host's."""
    if libc.unshare(CLONE_NEWNS) != 0:
        return _fail("private mount namespace: needs CAP_SYS_ADMIN")
    if libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return _fail("private mounts")
    return None


def own_tmpfs(libc, path: str, size_bytes: int | None, owner: int | None = None) -> str | None:
    """Mount a fresh tmpfs (mode 0700, at most ``size_bytes``; None: the kernel's default, half
    the memory) on ``path`` in this process's mount namespace, or say why not. What is written
    there is memory charged to the writer's cgroup, is seen by no other namespace, and goes with
    the namespace, when its last process ends, however it ends: a builder's temporary folder
    (:mod:`pkb_core.compile.builder`). ``owner``: the uid (and gid) it belongs to, the user the
    process becomes (None: this process's). Call inside :func:`private_mounts`, before :func:`seal`."""
    options = "mode=0700" + (f",size={int(size_bytes)}" if size_bytes else "")
    if owner is not None:
        options += f",uid={int(owner)},gid={int(owner)}"
    if libc.mount(b"tmpfs", str(path).encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options.encode()) != 0:
        return _fail(f"a bounded temporary folder at {path}")
    return None


def own_dev_shm(libc, folder: str, root: str = "/dev/shm") -> str | None:
    """See ``folder`` (a candidate group's shared-memory folder inside ``root``, a tmpfs of its own:
    :mod:`pkb_core.process.own_mounts`) as ``root`` too, and still at its own path, in this
    process's mount namespace; or say why not. What the group's processes make in ``/dev/shm``
    (NCCL's files, anything of the solution's) then lands in the group's folder, shared by its
    ranks (each binds the same folder) and counted against its inodes and its memory: a job that
    made files in ``/dev/shm`` until it was full ended other tenants' builds and lanes (a hostile
    review, 2026-12-01). The folder's own path inside ``root`` is made inside the folder (root's
    folders, 0711) as the point its second bind is mounted on. Call inside :func:`private_mounts`,
    before :func:`seal` (which names ``root`` and ``folder`` writable)."""
    folder, root = os.path.realpath(folder), os.path.realpath(root)
    if not under(folder, root) or folder == root:
        return f"a /dev/shm of its own ({folder} is not inside {root})"
    parts = os.path.relpath(folder, root).split(os.sep)
    try:
        os.makedirs(os.path.join(folder, *parts), mode=0o711, exist_ok=True)
        for depth in range(1, len(parts) + 1):  # 0711 whatever the umask: the group's user traverses them
            os.chmod(os.path.join(folder, *parts[:depth]), 0o711)
        fd = os.open(folder, os.O_PATH | os.O_DIRECTORY)
    except OSError as exc:
        return f"a /dev/shm of its own ({exc.strerror})"
    # Other jobs' folders in root (other launches', groups', builds' tmpfs mounts) would still be
    # listed in this namespace's /proc/self/mountinfo under the bind, with their names and users: a
    # hostile review read another session's job folder there. Detached here (this namespace only),
    # innermost first; the folder, what it holds and its ancestors stay.
    for point, _, _ in reversed(mount_table()):
        if under(point, root) and point != root and not under(folder, point) and not under(point, folder):
            libc.umount2(point.encode(), MNT_DETACH)  # one that will not go is still covered by the bind
    try:
        source = f"/proc/self/fd/{fd}".encode()
        if libc.mount(source, root.encode(), None, MS_BIND, None) != 0:
            return _fail(f"a /dev/shm of its own ({folder} on {root})")
        if libc.mount(source, folder.encode(), None, MS_BIND, None) != 0:
            return _fail(f"a /dev/shm of its own ({folder} at its own path)")
    finally:
        os.close(fd)
    return None


def mount_table() -> list[tuple[str, list[str], str]]:
    """``(mount point, mount options, file system)`` of this namespace's mounts, outermost first
    (``/proc/self/mountinfo``)."""
    found = []
    with open("/proc/self/mountinfo") as info:
        for line in info:
            fields = line.split()
            point = fields[4].encode().decode("unicode_escape")
            found.append((point, fields[5].split(","), fields[fields.index("-") + 1]))
    return found


def _mounts() -> list[tuple[str, int]]:
    """``(mount point, flags to keep)`` of this namespace's writable mounts, outermost first."""
    found = []
    for point, options, _fs in mount_table():
        if "ro" in options:
            continue  # read-only already
        flags = 0
        for option in options:
            flags |= _FLAG_BY_OPTION.get(option, 0)
        found.append((point, flags))
    return found


def under(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or lies inside it (both real paths)."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def seal(libc, *, writable=(), read_only=(), hidden=(), revealed=(), temp=()) -> list[str]:
    """Remount every mount read-only (but :data:`_KEEP` and ``writable``
    folders, bound writable onto themselves), then bind ``read_only`` folders
    inside a writable one read-only again, and cover ``hidden`` folders (the
    run directory: records, logs, saved outputs; a service's data directory)
    with an empty read-only tmpfs, into which only the ``revealed`` folders
    inside them are bound back (a builder's solution in a service's data
    directory). ``temp``: ``(folder, paths)`` pairs, the machine's temporary
    folders (:func:`pkb_core.confine.views.private_temp`), each covered the same
    way once every mount is read-only (so that no mount the cover hides is left
    writable), with its ``paths`` bound back. ``/sys`` (the cgroup file system
    with it) and ``/proc/sys`` are read-only too, whoever the process is: no
    process of a job moves itself out of its cgroup, changes its limits or
    writes a sysctl. Call inside :func:`private_mounts`."""
    missing = []
    for path in hidden:
        path = os.path.realpath(str(path))
        if os.path.isdir(path):
            missing += cover(libc, path, [os.path.realpath(str(r)) for r in revealed
                                          if under(os.path.realpath(str(r)), path)])
    writable = [os.path.realpath(p) for p in writable if os.path.isdir(p)]
    for point, flags in _mounts():
        if any(under(point, keep) for keep in _KEEP) or any(under(point, w) for w in writable):
            continue
        if libc.mount(None, point.encode(), None, MS_BIND | MS_REMOUNT | MS_RDONLY | flags, None) != 0:
            missing.append(_fail(f"read-only {point}"))
    for folder, paths in temp:
        missing += cover(libc, folder, paths)
    if os.path.isdir(_SYSCTLS):
        target = _SYSCTLS.encode()
        if libc.mount(target, target, None, MS_BIND, None) != 0 or \
                libc.mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV |
                           MS_NOEXEC, None) != 0:
            missing.append(_fail(f"read-only {_SYSCTLS}"))
    for path in writable:
        target = path.encode()
        # nosuid, nodev: a writable folder holds no set-uid program or device a process could use
        if libc.mount(target, target, None, MS_BIND | MS_REC, None) != 0 or \
                libc.mount(None, target, None, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV, None) != 0:
            missing.append(_fail(f"writable {path}"))
    for path in read_only:
        path = os.path.realpath(str(path))
        if any(under(path, w) for w in writable):
            target = path.encode()
            if libc.mount(target, target, None, MS_BIND | MS_REC, None) != 0 or \
                    libc.mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY, None) != 0:
                missing.append(_fail(f"read-only {path}"))
    return missing


def cover(libc, path: str, revealed: list[str]) -> list[str]:
    """Cover ``path`` with an empty tmpfs, bind each of ``revealed`` (folders, or files such as a
    zip on the import path, strictly inside it; one inside another is carried by the outer one's
    bind) back read-only, then make the cover read-only. The folders made on the way to them are
    0755, whatever the umask: the user a process becomes traverses them."""
    sources = {}
    for entry in sorted(set(revealed)):
        if entry == path or any(under(entry, outer) for outer in sources):
            continue
        try:
            sources[entry] = os.open(entry, os.O_PATH)
        except OSError:
            continue
    missing = []
    try:
        if libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0555") != 0:
            return [_fail(f"hiding {path}")]
        for folder, fd in sources.items():
            try:
                _make_way(path, folder, stat.S_ISDIR(os.fstat(fd).st_mode))
            except OSError as exc:
                missing.append(f"revealing {folder} ({exc.strerror})")
                continue
            if libc.mount(f"/proc/self/fd/{fd}".encode(), folder.encode(), None, MS_BIND | MS_REC, None) != 0 or \
                    libc.mount(None, folder.encode(), None, MS_BIND | MS_REMOUNT | MS_RDONLY, None) != 0:
                missing.append(_fail(f"revealing {folder}"))
        if libc.mount(None, path.encode(), None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None) != 0:
            missing.append(_fail(f"hiding {path} read-only"))
    finally:
        for fd in sources.values():
            os.close(fd)
    return missing


def anchor_cwd() -> None:
    """Enter the working folder again by its path, in this namespace's mounts as they are now: a
    working folder that a cover hid (one in ``/tmp``, in the run directory) would otherwise keep
    reaching the folder under the cover, and with ``..`` the rest of it; where the path leads
    nowhere now, ``/``. Call after the covers (:func:`seal`)."""
    try:
        os.chdir(os.getcwd())
    except OSError:
        os.chdir("/")


def _make_way(root: str, entry: str, folder: bool) -> None:
    """Make ``entry`` (a folder, else an empty file to bind a file onto) and the folders on the
    way to it from ``root`` (a cover), each 0755."""
    parts = os.path.relpath(entry, root).split(os.sep)
    at = root
    for index, part in enumerate(parts):
        at = os.path.join(at, part)
        last = index == len(parts) - 1
        if os.path.lexists(at):
            continue
        if last and not folder:
            os.close(os.open(at, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        else:
            os.mkdir(at)
            os.chmod(at, 0o755)


def needed_paths(extra=()) -> list[str]:
    """What a candidate reads after it is locked down: Python's installation,
    every import path, the folders of packages found other than through the
    import path (:func:`package_folders`), and ``extra`` (the solution's and
    problem's folders)."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *extra}
    # Not the working folder that ``python -m`` put first on the import path (the launcher's: a
    # candidate listed it and read another run's output there, bound back into the covered /tmp);
    # what pkb imports from it is found as a package folder below.
    implicit = sys.path[0] if sys.path and sys.path[0] and _same(sys.path[0], os.getcwd()) else None
    paths.update(p for p in sys.path if p and p != implicit)
    paths.update(package_folders())
    return sorted(os.path.realpath(p) for p in paths if os.path.isabs(p) and os.path.exists(p))


def _same(path: str, other: str) -> bool:
    try:
        return os.path.samefile(path, other)
    except OSError:
        return False


def package_folders() -> set[str]:
    """Folders of packages that are not below an import path: an editable install's
    sources (setuptools' editable finders map each top-level name to its folder, a
    ``MAPPING`` of the finder's module), and the folders of the top-level packages
    already imported. A checkout installed editable from ``/tmp`` lies under a
    folder the lockdown covers: without these its modules imported after the
    lockdown would not be found."""
    found = set()
    for finder in sys.meta_path:
        mapping = getattr(finder, "MAPPING", None)
        if mapping is None:
            mapping = getattr(sys.modules.get(getattr(finder, "__module__", ""), None), "MAPPING", None)
        if isinstance(mapping, dict):
            found.update(path for path in mapping.values() if isinstance(path, str))
    for name, module in list(sys.modules.items()):
        if "." not in name:
            found.update(path for path in (getattr(module, "__path__", None) or ()) if isinstance(path, str))
    return found


def _traversable(st: os.stat_result, uid: int) -> bool:
    return bool(st.st_mode & stat.S_IXOTH) or st.st_uid == uid


def expose(libc, paths, uid: int) -> list[str]:
    """Make ``paths`` reachable for ``uid``: every folder on the way that it may
    not traverse is covered by a tmpfs (mode 0755) into which only the next
    entry of each path is bound back (every entry, for a path that is such a
    folder itself). Call inside :func:`private_mounts`."""
    missing = []
    covered: dict[str, int] = {}  # folder -> descriptor of what it was before the cover
    for path in _with_closed_folders_opened(paths, uid):
        parts = path.strip("/").split("/")
        for depth in range(len(parts)):
            folder = "/" + "/".join(parts[:depth])
            child = parts[depth]
            if folder not in covered:
                try:
                    st = os.stat(folder)
                except OSError:
                    break
                if _traversable(st, uid):
                    continue
                fd = os.open(folder, os.O_PATH | os.O_DIRECTORY)
                if libc.mount(b"tmpfs", folder.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0755") != 0:
                    missing.append(_fail(f"reaching {path}"))
                    os.close(fd)
                    break
                covered[folder] = fd
            inside = os.path.join(folder, child)
            if os.path.lexists(inside):
                continue  # bound back already (another path through the same folder)
            source = f"/proc/self/fd/{covered[folder]}/{child}"
            try:
                if os.path.isdir(source):
                    os.mkdir(inside)
                else:
                    open(inside, "w").close()
            except OSError as exc:
                missing.append(f"reaching {path} ({exc.strerror})")
                break
            if libc.mount(source.encode(), inside.encode(), None, MS_BIND | MS_REC, None) != 0:
                missing.append(_fail(f"reaching {path}"))
                break
    for fd in covered.values():
        os.close(fd)
    return missing


def _with_closed_folders_opened(paths, uid: int) -> list[str]:
    """``paths``, each followed by its entries where it is a folder ``uid`` may
    not traverse itself (everything in it is needed: covered, then bound back)."""
    wanted = []
    for path in paths:
        wanted.append(path)
        try:
            st = os.stat(path)
            if stat.S_ISDIR(st.st_mode) and not _traversable(st, uid):
                wanted += [os.path.join(path, entry) for entry in sorted(os.listdir(path))]
        except OSError:
            continue
    return wanted


def switch_user(uid: int) -> str | None:
    """Become ``uid`` (and gid ``uid``, no supplementary groups) for good:
    real, effective, saved and file-system ids alike."""
    try:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    except OSError as exc:
        return f"a user of its own ({exc.strerror}: needs root)"
    die_with_parent()  # the kernel forgot it with the old user
    return None


#: Variables that name a folder libraries write into; a job's candidate gets its scratch in each.
SCRATCH_VARIABLES = ("TMPDIR", "HOME", "XDG_CACHE_HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
                     "CUDA_CACHE_PATH", "CUPY_CACHE_DIR", "NUMBA_CACHE_DIR")


def use_scratch(folder: str) -> None:
    """Point the temporary and cache folders libraries write to at the job's
    own scratch (everything else is read-only; shared caches are not the
    candidate's to write). ``HOME`` and ``XDG_CACHE_HOME`` move too: libraries
    that know no variable of their own write under the home folder (CuPy's
    kernel cache, ``~/.cupy``, made the NVRTC samples fail as a job's user), and
    the launcher's home is neither the job's nor writable by it."""
    sys.dont_write_bytecode = True
    from pkb_core.cache import cache_dir

    # pkb's own cache is found from HOME and XDG_CACHE_HOME: name it before they move,
    # so the solution still loads the compile phase's builds from it.
    os.environ["PKB_CACHE_DIR"] = str(cache_dir())
    for name in SCRATCH_VARIABLES:
        os.environ[name] = folder
    import tempfile

    tempfile.tempdir = None  # computed again from TMPDIR
