"""A capped log: a process's output goes through a pump that stops writing at a size.

A job's log is a file in the run directory, on the disk the records (and a
service's queue) share; a candidate that prints without end would fill it (a
1 GiB log was written in one review). A file-size limit on the process itself
(``RLIMIT_FSIZE``) would also cap the heap segments and parcels it writes, so
instead its standard output and error become a pipe whose other end a *pump*
reads: a small child forked before the process runs anything of a job (in the
job's cgroup and session, frozen and killed with it, its CPU charged to the
job), which copies the first ``cap`` bytes to the log, writes one line saying
the rest is dropped, then reads and drops the rest. The launcher sees a log that
reached its cap (:func:`capped`) and says so in the record.
"""
from __future__ import annotations

import os

from pkb_core.process.sessions import die_with_parent

#: Bytes of a job's (or a build's) log kept unless told otherwise.
DEFAULT_LOG_CAP = 64 << 20


#: How the line a pump writes where it stops begins (what :func:`capped` looks for).
NOTE = b"[pkb: this output reached its cap of "


def note(cap: int) -> bytes:
    """The line a pump writes where it stops."""
    return b"\n" + NOTE + f"{cap} bytes; the rest was dropped]\n".encode()


def pump(read_fd: int, log_fd: int, cap: int) -> None:
    """Copy from ``read_fd`` to ``log_fd`` until ``cap`` bytes are written, then note it and
    drop the rest, until the pipe ends."""
    written = 0
    noted = False
    while True:
        try:
            data = os.read(read_fd, 1 << 16)
        except InterruptedError:
            continue
        except OSError:
            return
        if not data:
            return
        if written < cap:
            data = data[:cap - written]
            written += len(data)
            _write_all(log_fd, data)
        elif not noted:
            noted = True
            _write_all(log_fd, note(cap))


def _write_all(fd: int, data: bytes) -> None:
    while data:
        try:
            data = data[os.write(fd, data):]
        except InterruptedError:
            continue
        except OSError:
            return  # the log is gone: the rest is dropped as well


def cap_output(cap: int, cgroup=()) -> int:
    """Send this process's standard output and error through a pump capped at ``cap``
    bytes (the pump writes where they pointed); the pump's pid. Call before running
    anything the cap is for: the pump is forked from this process, so it shares its
    session (and its cgroup, unless it moves to ``cgroup``: the ``cgroup.procs`` files
    of another of the job's cgroups), and dies with it."""
    log_fd = os.dup(1)
    read_fd, write_fd = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            die_with_parent(parent)
            if cgroup:
                from pkb_core.process.cgroups import join_cgroup

                try:
                    join_cgroup(cgroup)
                except OSError:
                    pass  # it stays in its rank's cgroup: still the job's
            for fd in map(int, os.listdir("/proc/self/fd")):
                if fd not in (read_fd, log_fd):
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            pump(read_fd, log_fd, cap)
        finally:
            os._exit(0)
    os.close(read_fd)
    os.close(log_fd)
    os.dup2(write_fd, 1)
    os.dup2(write_fd, 2)
    os.close(write_fd)
    return pid


def capped(path) -> bool:
    """Whether a pump writing the log at ``path`` reached its cap (and dropped output)."""
    import mmap

    try:
        with open(path, "rb") as log:
            if os.fstat(log.fileno()).st_size == 0:
                return False
            with mmap.mmap(log.fileno(), 0, access=mmap.ACCESS_READ) as view:
                return view.find(NOTE) >= 0
    except (OSError, ValueError):
        return False
