"""What a locked-down process sees of the machine's shared places: a ``/tmp`` and a ``/proc`` of its own.

The read-only file system of :mod:`pkb_core.confine.sandbox` stops a candidate or a builder from
writing; it does not stop it from *reading* what other runs leave in places every process shares.
Two such places remain after the user switch and the read-only mounts:

* **the machine's temporary folders** (:data:`SHARED_TEMP`): other runs' temporary files, other
  builds' folders, a test's or a service's files under ``/tmp``, whatever mode their owners gave
  them. Each is covered by an empty, read-only tmpfs of the process's own mount namespace, into
  which only what the process needs there is bound back (its solution's and problem's folders,
  its scratch, pkb's cache, import paths): :func:`private_temp` says which. ``TMPDIR`` points at
  the process's own scratch (:func:`pkb_core.confine.sandbox.use_scratch`), so nothing pkb or a
  library writes goes there.
* **other processes** (``/proc``): every process's command line (a service's arguments, another
  build's compiler lines, which name other solutions' files) and, through ``/proc/<pid>/net``,
  the network tables of any process's namespace (``/proc/1/net/tcp``: the machine's listening
  sockets, past the group's own network namespace). :func:`own_proc` mounts a new instance of
  procfs on ``/proc`` in the process's mount namespace with ``hidepid=2``: a process sees the
  ``/proc/<pid>`` folders of the processes it may ptrace-read (itself, and the dumpable processes
  of its user: the programs its group or build started, such as compilers; pkb's own processes of
  that user are not dumpable), no other; ``/proc/net`` is its own namespace's. The masks the machine put over parts of ``/proc`` (a container's ``/dev/null`` on
  ``/proc/kcore``, its read-only ``/proc/bus``) are bound over the new instance too.

Why ``hidepid`` and not a PID namespace: a new PID namespace takes effect for the children a
process forks *after* ``unshare``, never for the process itself. A candidate rank is the process
that locks itself down and then imports the solution (its CUDA context, process group and heap
are made before), so it would have to fork once more and hand its role to a child that is the
namespace's init. The launcher would then be watching a stand-in: the zygote reports the exit
status of the process it forked (the signal a candidate died of names a ``crash``, SIGSYS a
``flagged``), the keeper kills the pid ``SO_PEERCRED`` names, and init of a namespace ignores
signals it has no handler for. ``hidepid`` changes what the sandboxed process sees and nothing
the launcher sees: it freezes, probes (``cpu.stat``) and kills the group through its cgroup, and
reads ``/proc`` in its own mount namespace, where nothing changed. bubblewrap (Debian's
``bubblewrap``) makes these namespaces too, but only for a program it executes: a candidate is
forked from a zygote and locks itself down in the middle of its life, after its start-up, which
no wrapper around ``exec`` can do.

Before Linux 5.8 ``hidepid`` was a setting of the PID namespace, shared by every ``/proc`` mount
of the machine's namespace: :func:`own_proc` then changes nothing and reports the gap.
"""
from __future__ import annotations

import ctypes
import os

from pkb_core.confine.sandbox import mount_table, under
from pkb_core.process.mount_flags import MS_BIND, MS_NODEV, MS_NOEXEC, MS_NOSUID

#: Folders every process of the machine writes temporary files into.
SHARED_TEMP = ("/tmp", "/var/tmp")
#: The first Linux whose procfs mounts each take their own ``hidepid``.
HIDEPID_PER_MOUNT = (5, 8)

#: File systems under ``/proc`` not copied onto the new instance: an automount point is no mask,
#: and opening it would mount what it stands for.
_NOT_MASKS = ("autofs",)


def in_shared_temp(path: str) -> bool:
    """Whether ``path`` lies in one of the machine's temporary folders (:data:`SHARED_TEMP`), which
    every locked-down process sees covered."""
    path = os.path.realpath(str(path))
    return any(under(path, os.path.realpath(folder)) for folder in SHARED_TEMP)


def private_temp(needed, *, extra=()) -> list[tuple[str, list[str]]]:
    """The machine's temporary folders (:data:`SHARED_TEMP`, and ``extra``: the folder a builder's
    scratch was made in), each with the ``needed`` paths inside it (strictly inside: a path that
    *is* a temporary folder, such as an import path of ``/tmp`` itself, is not bound back whole):
    :func:`pkb_core.confine.sandbox.seal`'s ``temp``, which covers each with an empty read-only
    tmpfs into which only those paths are bound back."""
    hidden = []
    for folder in (*SHARED_TEMP, *extra):
        folder = os.path.realpath(str(folder))
        if os.path.isdir(folder) and folder != "/" and not any(under(folder, outer) for outer in hidden):
            hidden.append(folder)
    needed = [os.path.realpath(str(path)) for path in needed]
    return [(folder, [path for path in needed if under(path, folder) and path != folder]) for folder in hidden]


def _kernel() -> tuple[int, int]:
    try:
        major, minor = os.uname().release.split(".")[:2]
        return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)
    except ValueError:
        return (0, 0)


def _proc_submounts() -> list[tuple[str, str]]:
    """``(mount point, file system)`` of the mounts below ``/proc`` in this namespace, outermost first."""
    return [(point, fs) for point, _options, fs in mount_table() if point.startswith("/proc/")]


def own_proc(libc) -> list[str]:
    """Mount a new procfs instance with ``hidepid=2`` on ``/proc`` in this process's mount namespace
    (see the module docstring), the masks of the one it covers bound over it again; the protections
    missing. Call inside :func:`pkb_core.confine.sandbox.private_mounts`, before the user switch and
    :func:`pkb_core.confine.sandbox.seal` (which makes the new ``/proc/sys`` read-only)."""
    kernel = _kernel()
    if kernel < HIDEPID_PER_MOUNT:
        return [f"other processes hidden (a /proc of its own takes its own hidepid from Linux 5.8; this is "
                f"{os.uname().release}): every process's command line and /proc/<pid>/net are readable"]
    masks = []
    try:
        for point, fs in _proc_submounts():
            if fs not in _NOT_MASKS:
                try:
                    masks.append((point, os.open(point, os.O_PATH | os.O_NOFOLLOW)))
                except OSError:
                    continue
        if libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, b"hidepid=2") != 0:
            return [f"other processes hidden ({os.strerror(ctypes.get_errno())}): every process's command line "
                    "and /proc/<pid>/net are readable"]
        missing = []
        for point, fd in masks:
            if os.path.lexists(point) and \
                    libc.mount(f"/proc/self/fd/{fd}".encode(), point.encode(), None, MS_BIND, None) != 0:
                missing.append(f"{point} masked as before ({os.strerror(ctypes.get_errno())})")
        return missing
    finally:
        for _point, fd in masks:
            os.close(fd)
