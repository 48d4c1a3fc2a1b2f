"""The default limits of a job on this machine: its memory, its processes, its log.

A job's candidate group (and each builder) runs in a cgroup of its own with
these limits (:mod:`pkb_core.process.containment`); ``pkb run --memory-limit``,
``--max-processes`` and ``--log-cap`` (or ``pkb.toml``) set others.
"""
from __future__ import annotations

#: A job's memory by default, per rank on this node: a process that imported torch and a
#: backend, its CUDA context, its heap segments and parcels (the largest sizes' in CPU mode).
MEMORY_PER_RANK_MIB = 4096
#: A job's processes and threads by default (``pids.max`` counts both): torch's, OpenMP's,
#: NCCL's and a compiler's threads for every rank, far below what a fork bomb reaches.
MAX_PROCESSES = 4096
#: A job's (or a build's) log by default, in MiB: the rest is dropped with a note.
LOG_CAP_MIB = 64


def memory_mib(nproc: int, asked: int | None = None) -> int:
    """A job's memory limit in MiB: ``asked``, else :data:`MEMORY_PER_RANK_MIB` per rank on
    this node, at most half the machine's memory (two groups live at once: the job's and
    the next one's), at least 1 GiB."""
    if asked:
        return asked
    wanted = MEMORY_PER_RANK_MIB * max(1, nproc)
    total = machine_mib()
    return max(1024, min(wanted, total // 2)) if total else wanted


#: A build's memory by default: its two compiles at once (nvcc on torch's headers near
#: 2 GiB, g++ with the precompiled header near 1.5 GiB), with room.
BUILD_MEMORY_MIB = 7168


def build_memory_mib(asked: int | None = None) -> int:
    """A build's memory limit in MiB: at least :data:`BUILD_MEMORY_MIB` (a job's limit, when
    larger), at most half the machine's memory."""
    wanted = max(asked or 0, BUILD_MEMORY_MIB)
    total = machine_mib()
    return max(1024, min(wanted, total // 2)) if total else wanted


def max_processes(asked: int | None = None) -> int:
    return asked or MAX_PROCESSES


def log_cap_bytes(asked_mib: int | None = None) -> int:
    return (asked_mib or LOG_CAP_MIB) << 20


def machine_mib() -> int | None:
    """The machine's memory in MiB (``MemTotal``), or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as meminfo:
            return next(int(line.split()[1]) >> 10 for line in meminfo if line.startswith("MemTotal"))
    except (OSError, StopIteration, ValueError):
        return None
