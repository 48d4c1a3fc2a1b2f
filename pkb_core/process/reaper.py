"""pkb as the parent of last resort of what it starts: a child subreaper that reaps.

When a process dies, its children are handed to the nearest ancestor that
declared itself a *child subreaper* (``PR_SET_CHILD_SUBREAPER``), or to the
machine's first process. pkb declares itself one (the launcher, a lane, the
service, each zygote), so an orphan of anything it started (a compiler whose
builder was killed, a candidate's child whose rank died) becomes pkb's child,
not an orphan of ``init``: it stays inside pkb's reach, and when pkb is a
container's first process no zombie piles up, because pkb reaps them
(:func:`reap_orphans`).

Reaping must not take the exit status of a process pkb itself waits for (a
``subprocess.Popen`` of the judge, a zygote, a builder, a lane): those are
either in this process's own session (spawned without a new session) or
session leaders pkb registered when it spawned them (:func:`spawned`). Every
other zombie child is an adopted orphan.
"""
from __future__ import annotations

import os

from pkb_core.process.sessions import _LIBC, process_stats

PR_SET_CHILD_SUBREAPER = 36

#: Session leaders this process spawned and waits for itself (their exit status is theirs to read).
_SPAWNED: set = set()


def become_subreaper() -> bool:
    """Make this process the child subreaper of everything it starts; whether the kernel agreed."""
    try:
        return _LIBC.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except AttributeError:  # pragma: no cover - no C library (not Linux)
        return False


def spawned(pid: int) -> None:
    """Note a session leader this process spawned and waits for itself (never reaped here)."""
    _SPAWNED.add(pid)


def reap_orphans() -> int:
    """Reap the zombie children this process adopted (see the module docstring); how many."""
    own_session = os.getsid(0)
    reaped = 0
    for pid in _zombie_children():
        if pid in _SPAWNED:
            continue
        try:
            if os.getsid(pid) == own_session:
                continue  # spawned by this process in its own session: its owner waits for it
        except OSError:
            continue
        try:
            done, _status = os.waitpid(pid, os.WNOHANG)
            reaped += bool(done)
        except ChildProcessError:
            continue
    return reaped


def _zombie_children() -> list[int]:
    """This process's children that are zombies (a scan of ``/proc``: not every kernel
    lists a task's children)."""
    me = os.getpid()
    return [pid for pid, fields in process_stats() if fields[0] == "Z" and int(fields[1]) == me]
