"""Folders that are file systems of their own: a tmpfs mounted on a launch's shared-memory folder
and on each candidate group's, so that no job can use up what another job's files need.

``/dev/shm`` is one tmpfs for the whole machine, and its inodes are a pool no cgroup counts: a job
that made empty files in its own folder until the file system had no inode left (a few bytes each,
far under any memory limit) ended the next tenant's job as ``error``, its lane unable to make its
folder (a hostile review, 2026-12-01). A tmpfs of its own has inodes of its own (``nr_inodes``) and
bytes of its own: a group that fills its folder fills it for itself. The launch folder is one too
(only pkb writes there), so a job that fills ``/dev/shm`` itself leaves every launch's folders,
and the groups' folders made in them, their room.

Mounts need root (``CAP_SYS_ADMIN``); without it a folder stays a plain one (what pkb did before).
A mount made in the launcher's namespace is seen by every process forked after it (the judge's
ranks, a candidate group's, which copy it into their private namespaces), and goes with
:func:`remove_tree`, which detaches it (and every mount below it) before removing its folder.
"""
from __future__ import annotations

import os
import shutil

from pkb_core.process.mount_flags import MNT_DETACH, MS_NODEV, MS_NOSUID, libc


def mount_own_tmpfs(path: str, *, mode: int, owner: int | None = None, inodes: int | None = None) -> bool:
    """Mount a fresh tmpfs on the folder ``path`` (its root of ``mode``, owned by ``owner``'s uid and
    gid, None: root; at most ``inodes`` files and folders, None: no count), in this process's mount
    namespace; whether it was (False: not root, or no mounts here)."""
    if os.geteuid() != 0:
        return False
    options = f"mode={mode:o}" + (f",nr_inodes={int(inodes)}" if inodes else ",nr_inodes=0")
    if owner is not None:
        options += f",uid={int(owner)},gid={int(owner)}"
    return libc().mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options.encode()) == 0


def remove_tree(path: str) -> None:
    """Remove the folder ``path`` and what it holds, after detaching a file system mounted on it
    (with every one mounted below it): ``rmtree`` alone empties a mount and leaves it mounted.
    Whatever cannot be removed is left (as ``rmtree(ignore_errors=True)`` does)."""
    if os.path.ismount(path):
        libc().umount2(path.encode(), MNT_DETACH)
    shutil.rmtree(path, ignore_errors=True)
