"""Where a rank runs in CPU mode: local rank ``r`` of every group, the judge's too, on the same core.

Left to the scheduler, two groups of the same code in one job took different times a call on the
2-core machine (2026-11-30): the kernel keeps a process near what it last ran beside, so one
group's two ranks shared a core most of the job (69 % of samples) while the other's did not
(22 %), and the reference against itself read a median of 0.87-0.89 over sets of ten runs, a
second reference group against the first 0.83. With each group's local rank ``r`` on the ``r``-th
core this process may use (its affinity, which a container or ``taskset`` narrows), every group
has the same placement, and the same ten runs read 0.97-1.02 (median 1.001), a second reference
group 0.93-1.03 (docs/benchmarks/2026-11-30-h200x2-device-queues.md, "CPU"). The judge's ranks
are placed the same way (:func:`pkb_core.harness.worker_loop.connect`): the launcher-clock modes
time the reference in the judge's process, and with the groups placed and the judge not their A/A
read 0.44-0.88. The judge's timekeepers are not (:func:`unplace`): they wake both sides' ranks and
must not wait for the core of the rank they serve. GPU mode places nothing: a GPU side's time is
its device's.
"""
from __future__ import annotations

import os


#: The cores this process could use before :func:`place_cpu_rank` narrowed them (None: not placed).
_unplaced: set | None = None


def cpu_rank_core(local_rank: int) -> int | None:
    """The core CPU-mode local rank ``local_rank`` runs on: the ``local_rank``-th (cyclically) of
    those this process may use (before any placement of its own); None where affinity cannot be
    read or set (not Linux)."""
    try:
        cores = sorted(_unplaced if _unplaced is not None else os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    return cores[local_rank % len(cores)] if cores else None


def place_cpu_rank(local_rank: int) -> int | None:
    """Pin this process (and the threads it starts from now on: gloo's, torch's) to
    :func:`cpu_rank_core`; the core, or None where it could not."""
    global _unplaced
    core = cpu_rank_core(local_rank)
    if core is None:
        return None
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {core})
    except OSError:
        return None
    if _unplaced is None:
        _unplaced = before
    return core


#: The environment variable that hands a placed process's unplaced cores to a child it starts.
UNPLACED_ENV = "PKB_UNPLACED_CORES"


def unplaced_environment() -> dict:
    """What a child of this process (the judge's timekeeper) is started with to run on every core
    this process could use before it was placed (:func:`unplace`); nothing where it was not."""
    return {} if _unplaced is None else {UNPLACED_ENV: ",".join(str(core) for core in sorted(_unplaced))}


def unplace() -> None:
    """In a child started with :func:`unplaced_environment`: run on those cores again, first thing
    (before anything narrows it further, such as :func:`pkb_core.machine.numa.settle_on`, and
    before any thread starts: every thread started later inherits it)."""
    cores = os.environ.get(UNPLACED_ENV, "")
    if not cores:
        return
    try:
        os.sched_setaffinity(0, {int(core) for core in cores.split(",")})
    except (OSError, ValueError):
        pass  # a core gone since, or not this system's: it keeps the placed one
