"""A worker's processes, found by session: what the launcher stops, kills and measures.

Every worker process (a judge's rank, a candidate's rank, a builder) is started
as the leader of a session of its own. Its children may make process groups of
their own (ninja puts each compiler in one), but they cannot leave the session:
the candidate lockdown forbids ``setsid`` (:mod:`pkb_core.confine.lockdown`). So the
session id names everything a worker started, and these helpers act on all of
it, reading membership from ``/proc``.
"""
from __future__ import annotations

import ctypes
import os
import signal
import time


def process_stats():
    """``(pid, fields)`` of every process in ``/proc``: its ``stat`` line after the command
    name (``fields[0]`` the state, ``[1]`` the parent, ``[3]`` the session); gone ones skipped."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields:
            yield int(entry), fields


def members(sessions) -> dict:
    """``{session id: [pid, ...]}`` of the live processes in each session."""
    wanted = set(sessions)
    found = {sid: [] for sid in wanted}
    for pid, fields in process_stats():
        if fields[0] != "Z" and int(fields[3]) in wanted:
            found[int(fields[3])].append(pid)
    return found


def signal_sessions(sessions, sig) -> list[int]:
    """Send ``sig`` to every process of every session; the pids signalled."""
    signalled = [pid for pids in members(sessions).values() for pid in pids]
    signal_pids(signalled, sig)
    return signalled


def signal_pids(pids, sig) -> None:
    """Send ``sig`` to each of ``pids`` (gone ones are skipped)."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


#: How long :func:`kill_sessions` keeps sweeping.
KILL_SWEEP_S = 2.0


def kill_sessions(sessions) -> bool:
    """SIGKILL every process of the sessions, sweeping again until none is left.

    One sweep reads the members, then signals them: a process that forks and
    exits quickly enough (a fork chain) can be gone from its pid before the
    signal and live on in its child. Sweeps repeat until a sweep finds nobody
    (or :data:`KILL_SWEEP_S` passes); returns whether the sessions are empty.
    """
    deadline = time.monotonic() + KILL_SWEEP_S
    while True:
        found = members(sessions)
        if not any(found.values()):
            return True
        if time.monotonic() > deadline:
            return False
        for pids in found.values():
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


def cpu_ns(sessions) -> dict:
    """CPU time (ns, every thread) used so far by the live processes of each session."""
    totals = {}
    for sid, pids in members(sessions).items():
        totals[sid] = 0
        for pid in pids:
            try:
                for task in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{task}/schedstat") as sched:
                        totals[sid] += int(sched.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue  # gone meanwhile
    return totals


def cpu_ms_during(probe_s: float, sessions) -> list[float]:
    """CPU milliseconds each session used during a probe of ``probe_s`` seconds."""
    sessions = list(sessions)
    before = cpu_ns(sessions)
    time.sleep(probe_s)
    after = cpu_ns(sessions)
    return [(after.get(sid, 0) - before.get(sid, 0)) / 1e6 for sid in sessions]


def die_with_parent(parent: int | None = None) -> None:
    """Have the kernel SIGKILL this process when its parent dies (``PR_SET_PDEATHSIG``),
    and die now if it already has (``parent``: the pid it was forked by).

    A worker forked by a zygote, a group's keeper and a service's lane call it, so none
    outlives the process that answers for it (a launcher killed with ``kill -9`` takes
    its zygotes, and they their children, along). The kernel clears the setting when a
    process changes its user: :func:`pkb_core.confine.sandbox.switch_user` arms it again.
    """
    try:
        _LIBC.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except AttributeError:
        return
    if parent is not None and os.getppid() != parent:
        os._exit(137)


#: The variable that tells a spawned process which pid spawned it (:func:`die_with_spawner`).
SPAWNER_ENV = "PKB_PARENT_PID"


def spawner_environment() -> dict:
    """What to add to the environment of a process this one spawns, so that it dies with
    this one (it calls :func:`die_with_spawner` as it starts)."""
    return {SPAWNER_ENV: str(os.getpid())}


def die_with_spawner() -> None:
    """:func:`die_with_parent` for a spawned process: the parent named in its environment
    (which is removed, so nothing this process starts inherits it). The judge's ranks, the
    zygotes and the builders call it, so ``kill -9`` of pkb takes them along."""
    parent = os.environ.pop(SPAWNER_ENV, None)
    if parent and parent.isdigit():
        die_with_parent(int(parent))


# Loaded with this module: after a user switch, the library folders may be out of reach.
try:
    _LIBC = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - no C library to ask (not Linux)
    _LIBC = None
