"""Where a side's ranks run in CPU mode: rank ``r`` of every group on the same core.

Left to the scheduler, two groups of the same code in one job took different times a call on the
2-core machine (2026-11-30): the kernel keeps a process near what it last ran beside, so one
group's two ranks shared a core most of the job (69 % of samples) while the other's did not
(22 %), and the reference against itself read a median of 0.87-0.89 over sets of ten runs, a
second reference group against the first 0.83. With each group's local rank ``r`` on the ``r``-th
core this process may use (its affinity, which a container or ``taskset`` narrows), every group
has the same placement: three sets of ten runs read medians of 0.999, 1.003 and 1.007, 30 of 30 intervals
containing 1.00, and a second reference group 0.93-1.03 against the first
(docs/benchmarks/2026-11-30-h200x2-device-queues.md, "CPU"). Its price on a virtual machine: a
hand-off between the two cores waits about a scheduler tick. GPU mode places nothing: a GPU
side's time is its device's.
"""
from __future__ import annotations

import os


def cpu_rank_core(local_rank: int) -> int | None:
    """The core CPU-mode local rank ``local_rank`` runs on: the ``local_rank``-th (cyclically) of
    those this process may use; None where affinity cannot be read or set (not Linux)."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    return cores[local_rank % len(cores)] if cores else None


def place_cpu_rank(local_rank: int) -> int | None:
    """Pin this process (and the threads it starts from now on: gloo's, torch's) to
    :func:`cpu_rank_core`; the core, or None where it could not."""
    core = cpu_rank_core(local_rank)
    if core is None:
        return None
    try:
        os.sched_setaffinity(0, {core})
    except OSError:
        return None
    return core
