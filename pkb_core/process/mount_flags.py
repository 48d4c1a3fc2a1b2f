"""The Linux flags pkb passes to ``mount(2)``, ``umount2(2)`` and ``unshare(2)`` (from
``<sys/mount.h>`` and ``<sched.h>``), and the C library those calls go through.

Python's standard library has no mount call, so pkb's folders of their own (``own_mounts``), its
sandbox, the overlay over the build cache and the candidates' views of ``/proc`` call the C
library through ctypes; the numbers are the kernel's ABI, named once here.
"""
from __future__ import annotations

import ctypes

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
#: umount2(2): detach a mount now, whatever still uses it.
MNT_DETACH = 2
#: unshare(2): a mount namespace of the caller's own.
CLONE_NEWNS = 0x00020000


def libc() -> ctypes.CDLL:
    """The process's C library, with ``errno`` kept for ``ctypes.get_errno``."""
    return ctypes.CDLL(None, use_errno=True)
