"""A build's output: what its builder added to pkb's cache, published by the compile phase once checked.

A builder runs the solution's code as a user of its own, so pkb's cache (where candidates load
builds from) is not its to write. It sees the cache through an overlay
(:mod:`pkb_core.confine.overlay`) whose upper layer is this build's output folder: the CUDA
builds and precompiled headers already there are read, and what it adds lands here. The
compile phase (the launcher's user) makes the folder before the build (:func:`make`) and, once
the build's processes are ended and only if it succeeded, publishes what is new into the cache
(:func:`publish`); then it removes the folder (:func:`remove`), however the build ended.

The folder lies in ``/dev/shm`` (:data:`ROOT`): an overlay's upper layer cannot lie on an overlay
file system (a container's disk), and memory written there is charged to the writer's cgroup,
so a build's output is bounded by its memory limit like its temporary folder; where pkb runs as
root the folder is a tmpfs of its own (:data:`BUILD_INODES` files at most), so that a build that
makes files until none can be made fills its own folder, not ``/dev/shm``, whose inodes other
jobs' folders need (a hostile review, 2026-12-01). It is named after
its maker (:mod:`pkb_core.process.temp_folders`: removed by the maker's warden if the maker is
killed outright, swept by the next phase), and is the launcher's alone (0700); its upper layer
is the build's user's.

What :func:`publish` takes, and how:

* entries one level down, ``<folder>/<name>`` (``cuda/<key>``, ``pch/<key>``, a backend's own
  ``<backend>/<key>``), never in pkb's own folders of verdicts (:data:`PKB_OWN`: the build
  outcomes, the calibration, the judge's Triton cache); a file at the top, a name that starts
  with a dot (pkb's temporary names) and an empty ``*.lock`` file are not published either (a
  lock means something only while the build that held it ran, and one of the launcher's would
  stop the next build from taking it);
* an entry the cache already holds is left as it is: nothing a build publishes replaces what
  another build published (the first one's stays);
* an entry is folders and plain files only, each file with one link, at most :data:`MAX_DEPTH`
  folders deep and :data:`MAX_FILES` files in all: a symbolic link, a device, a pipe, a socket
  or a hard link refuses the whole output (the build is a ``compile-error`` naming it), and
  nothing of it is published. An overlay's whiteout (a device 0:0, what the builder removed in
  its view) is skipped: removals are not published.
* each entry is copied into the cache by the launcher's user (files 0644, or 0755 where the
  build made them executable; folders 0755), under a temporary name beside its place, then
  renamed into place without replacing anything: readers never see half an entry.

What this does not check is whether an entry is what its name says: a builder that knows
another solution's sources can compute the key its build would use, and publish its own
entry there first (docs/trust.md).
"""
from __future__ import annotations

import ctypes
import errno
import os
import secrets
import stat
from pathlib import Path

from pkb_core.cache import JUDGE_TRITON
from pkb_core.confine.overlay import UPPER, WORK
from pkb_core.process.own_mounts import mount_own_tmpfs

#: Where output folders are made (see the module docstring).
ROOT = "/dev/shm"
#: Files and folders a build's output folder holds at most (a build writes tens; a cache of
#: Triton kernels, hundreds).
BUILD_INODES = 1 << 16
#: The names of output folders (``<ROOT>/pkb-build-output-<pid>-<start>-<random>``).
PREFIX = "pkb-build-output-"
#: pkb's own folders of the cache that decide verdicts: never published into (the build outcomes,
#: the calibration, and the judge's Triton cache, whose kernels every job's folder starts with and
#: the judge masks sets with: a build that planted one there first would be loaded in its place).
PKB_OWN = ("builds", "calibration", JUDGE_TRITON)
#: Folders an entry may nest, and files an output may hold in all.
MAX_DEPTH, MAX_FILES = 32, 20000

_RENAME_NOREPLACE, _AT_FDCWD = 1, -100


class Refused(Exception):
    """The output holds what pkb does not publish (the message names it)."""


def take(in_use: set, cache: Path) -> tuple[int | None, str | None]:
    """A new build's own user and output folder (:func:`make`), or ``(None, None)`` where this
    process cannot give a user (not root: the build keeps the launcher's user and writes pkb's
    cache itself). The user is drawn as a candidate group's is
    (:func:`pkb_core.confine.sandbox.new_sandbox_uid`), not one of ``in_use`` (the phase's builds
    alive, to which it is added), and watched by this process's warden: its files in
    ``/dev/shm`` are removed however the phase ends. Give both back with :func:`release`."""
    from pkb_core.confine.sandbox import can_switch_user, new_sandbox_uid
    from pkb_core.process.warden import warden

    if not can_switch_user():
        return None, None
    user = new_sandbox_uid(in_use)
    in_use.add(user)
    warden().watch(user=user)
    try:
        return user, make(user, cache)
    except BaseException:
        release(user, None, in_use)
        raise


def release(user: int | None, folder: str | None, in_use: set) -> None:
    """Give back what :func:`take` gave, once the build's processes are ended: the output folder
    removed, the user's files in ``/dev/shm`` removed, the user no longer in use."""
    if folder is not None:
        remove(folder)
    if user is not None:
        from pkb_core.process.warden import sweep_users, warden

        sweep_users([user])
        in_use.discard(user)
        warden().forget(user=user)


def make(user: int, cache: Path) -> str:
    """A new output folder for a build whose user is ``user``: its upper layer that user's, with
    a sticky folder of that user's over each folder already at the top of ``cache`` (so the
    build adds entries there and removes none of the cache's), and the overlay's work folder."""
    from pkb_core.process import temp_folders

    folder = temp_folders.make(PREFIX, ROOT)
    try:
        # A file system of its own (where pkb runs as root): what the build writes through its
        # view of the cache counts against this folder's inodes, not /dev/shm's, which other jobs
        # need (pkb_core.process.own_mounts; its upper and work folders lie on it together).
        mount_own_tmpfs(folder, mode=0o700, inodes=BUILD_INODES)
        upper = os.path.join(folder, UPPER)
        os.mkdir(os.path.join(folder, WORK), 0o700)
        tops = [entry.name for entry in os.scandir(cache)
                if entry.is_dir(follow_symlinks=False) and entry.name not in PKB_OWN] if cache.is_dir() else []
        for path in [upper, *(os.path.join(upper, name) for name in tops)]:
            os.mkdir(path)
            os.chown(path, user, user)
            os.chmod(path, 0o1755)
    except BaseException:
        temp_folders.remove(folder)
        raise
    return folder


def remove(folder: str) -> None:
    """Remove an output folder and everything in it."""
    from pkb_core.process import temp_folders

    temp_folders.remove(folder)


def sweep() -> None:
    """Remove the output folders of phases that are gone (:func:`pkb_core.process.temp_folders.sweep`)."""
    from pkb_core.process import temp_folders

    temp_folders.sweep(PREFIX, ROOT)


def publish(folder: str, cache: Path) -> list[str]:
    """Publish what is new in the output ``folder`` into ``cache`` (see the module docstring);
    the entries published, as ``<folder>/<name>``. Call once the build's processes are ended.

    :raises Refused: the output holds what pkb does not publish; nothing was published."""
    upper = os.path.join(folder, UPPER)
    entries = _entries(upper, cache)
    files = [0]
    for top, name in entries:
        _check(os.path.join(upper, top, name), f"{top}/{name}", 0, files)
    published = []
    for top, name in entries:
        if _copy_in(os.path.join(upper, top, name), cache / top, name):
            published.append(f"{top}/{name}")
    return published


def _entries(upper: str, cache: Path) -> list[tuple[str, str]]:
    """The ``(folder, name)`` pairs one level down in ``upper`` that may be published."""
    found = []
    for top in sorted(os.listdir(upper)):
        path = os.path.join(upper, top)
        if top in PKB_OWN or top.startswith(".") or not stat.S_ISDIR(os.lstat(path).st_mode):
            continue  # a file at the top of the cache is no entry of any backend's: not published
        for name in sorted(os.listdir(path)):
            info = os.lstat(os.path.join(path, name))
            if _whiteout(info) or name.startswith("."):
                continue
            if name.endswith(".lock") and stat.S_ISREG(info.st_mode) and info.st_size == 0:
                continue
            if not os.path.lexists(cache / top / name):
                found.append((top, name))
    return found


def _whiteout(info: os.stat_result) -> bool:
    return stat.S_ISCHR(info.st_mode) and info.st_rdev == 0


def _check(path: str, label: str, depth: int, files: list) -> None:
    info = os.lstat(path)
    if stat.S_ISDIR(info.st_mode):
        if depth > MAX_DEPTH:
            raise Refused(f"{label} nests folders deeper than {MAX_DEPTH}")
        for name in os.listdir(path):
            _check(os.path.join(path, name), f"{label}/{name}", depth + 1, files)
        return
    if not stat.S_ISREG(info.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "no plain file"
        raise Refused(f"{label} is {kind}: pkb publishes folders and plain files only")
    if info.st_nlink != 1:
        raise Refused(f"{label} has {info.st_nlink} links: pkb publishes files of one link only")
    files[0] += 1
    if files[0] > MAX_FILES:
        raise Refused(f"more than {MAX_FILES} files")


def _copy_in(source: str, parent: Path, name: str) -> bool:
    """Copy the entry ``source`` to ``parent/name`` (through a temporary name, renamed into place
    without replacing anything); whether it was published (False: another got there first)."""
    import shutil

    parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    if parent.is_symlink() or not parent.is_dir():
        raise Refused(f"{parent} is no folder of pkb's cache")
    staged = parent / f".{name}.pkb-publish-{secrets.token_hex(4)}"
    try:
        _copy(source, str(staged))
        if _rename_noreplace(str(staged), str(parent / name)):
            return True
    finally:
        if os.path.lexists(staged):
            shutil.rmtree(staged, ignore_errors=True) if os.path.isdir(staged) else os.unlink(staged)
    return False


def _copy(source: str, target: str) -> None:
    """Copy a checked entry: no link is followed (each file is opened with ``O_NOFOLLOW`` and must
    still be the plain file checked), modes are pkb's, the owner is this process's user."""
    import shutil

    info = os.lstat(source)
    if stat.S_ISDIR(info.st_mode):
        os.mkdir(target, 0o755)
        os.chmod(target, 0o755)
        for name in sorted(os.listdir(source)):
            _copy(os.path.join(source, name), os.path.join(target, name))
        return
    fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode) or opened.st_nlink != 1:
            raise Refused(f"{source} changed while it was published")
        mode = 0o755 if opened.st_mode & 0o111 else 0o644
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        try:
            with os.fdopen(os.dup(fd), "rb") as reader, os.fdopen(os.dup(out), "wb") as writer:
                shutil.copyfileobj(reader, writer, 1 << 20)
            os.fchmod(out, mode)
        finally:
            os.close(out)
    finally:
        os.close(fd)


def _rename_noreplace(source: str, target: str) -> bool:
    """Rename ``source`` to ``target`` unless ``target`` exists; whether it was renamed."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is not None:
        if renameat2(_AT_FDCWD, source.encode(), _AT_FDCWD, target.encode(), _RENAME_NOREPLACE) == 0:
            return True
        error = ctypes.get_errno()
        if error == errno.EEXIST:  # published meanwhile by another phase
            return False
        if error not in (errno.EINVAL, errno.ENOSYS):  # a file system or libc without the flag
            raise OSError(error, os.strerror(error), target)
    if os.path.lexists(target):
        return False
    os.rename(source, target)
    return True
