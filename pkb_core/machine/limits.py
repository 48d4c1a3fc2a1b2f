"""The default limits of a job on this machine: its memory, its processes, its log.

A job's candidate group (and each builder) runs in a cgroup of its own with
these limits (:mod:`pkb_core.process.containment`); ``pkb run --memory-limit``,
``--max-processes`` and ``--log-cap`` (or ``pkb.toml``) set others.

A job's memory by default follows from the machine and the job, never from a
constant a problem outgrows (problem 68's 2 GiB table shard per rank was killed
by the former 4 GiB per rank on 2xH200). :func:`memory_mib` gives a group of W
ranks the larger of:

* **the machine's share**: half the memory pkb may use (:func:`machine_mib`: the
  limit of the cgroup pkb runs in, else ``MemTotal``; the other half is
  for the judge, which holds every rank's inputs too, pkb's own processes and the
  next job's group), times W / G on a node of G GPUs, since the reward service
  runs G / W groups of W side by side there (CPU mode runs one group at a time:
  all of the half);
* **the job's need**, where the size of its inputs is known
  (:func:`pkb_core.problem.footprint.input_bytes`): per rank,
  :data:`RANK_BASE_MIB` for the process (torch, the backend, a CUDA context's host
  memory) and :data:`DATA_COPIES` times its inputs' bytes (their copy in the
  symmetric heap, their export after each call, outputs of their size and the
  solution's own temporaries);

never more than the half, and at least :data:`MIN_MEMORY_MIB`. A job that still
reaches its limit is killed and its verdict says what it used (the cgroup's peak)
against the limit (:meth:`pkb_core.process.cgroups.Cgroup.limit_hit`).
"""
from __future__ import annotations

import os

#: The share of the memory pkb may use that one group's limit may reach (the rest: see the module docstring).
JOB_SHARE = 0.5
#: A rank's own memory besides the job's data: a process that imported torch and a backend, a CUDA
#: context's host memory, the harness's buffers.
RANK_BASE_MIB = 2048
#: Copies of a rank's inputs a job holds at its peak (see the module docstring).
DATA_COPIES = 4
#: The least memory limit a group gets.
MIN_MEMORY_MIB = 1024
#: A job's processes and threads by default (``pids.max`` counts both): torch's, OpenMP's,
#: NCCL's and a compiler's threads for every rank, far below what a fork bomb reaches.
MAX_PROCESSES = 4096
#: A job's (or a build's) log by default, in MiB: the rest is dropped with a note.
LOG_CAP_MIB = 64


def memory_mib(nproc: int, asked: int | None = None, *, gpus: int | None = None,
               input_bytes: int | None = None) -> int:
    """A group's memory limit in MiB (see the module docstring): ``asked``, else the larger of
    the machine's share and the job's need, at most half the machine, at least
    :data:`MIN_MEMORY_MIB`.

    :param nproc: the group's ranks on this node.
    :param gpus: the node's GPUs (None: CPU mode, one group at a time).
    :param input_bytes: the most bytes of inputs one rank gets (None: unknown)."""
    if asked:
        return asked
    ranks = max(1, nproc)
    total = machine_mib()
    need = ranks * (RANK_BASE_MIB + DATA_COPIES * ((input_bytes or 0) >> 20))
    if not total:
        return max(MIN_MEMORY_MIB, need)
    half = int(total * JOB_SHARE)
    share = half * ranks // max(ranks, gpus or ranks)
    return max(MIN_MEMORY_MIB, min(half, max(share, need)))


def node_gpus(device: str) -> int | None:
    """The GPUs of this node in ``device``'s mode (None on CPU): every GPU the driver lists,
    not only those this process sees (a service's lane sees its own)."""
    if device != "cuda":
        return None
    try:
        listed = len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        listed = 0
    if listed:
        return listed
    from pkb_core.machine.device import device_count

    return device_count("cuda") or None


#: A build's memory by default: its two compiles at once (nvcc on torch's headers near
#: 2 GiB, g++ with the precompiled header near 1.5 GiB), with room.
BUILD_MEMORY_MIB = 7168


def build_memory_mib(asked: int | None = None) -> int:
    """A build's memory limit in MiB: at least :data:`BUILD_MEMORY_MIB` (a job's limit, when
    larger), at most half the machine's memory."""
    wanted = max(asked or 0, BUILD_MEMORY_MIB)
    total = machine_mib()
    return max(MIN_MEMORY_MIB, min(wanted, total // 2)) if total else wanted


def max_processes(asked: int | None = None) -> int:
    return asked or MAX_PROCESSES


def log_cap_bytes(asked_mib: int | None = None) -> int:
    return (asked_mib or LOG_CAP_MIB) << 20


def machine_mib() -> int | None:
    """The memory pkb may use, in MiB: the lowest limit of the cgroup pkb runs in and its
    ancestors where one is set (a container's: what its operator gives pkb), else the machine's
    ``MemTotal``; None where neither can be read. The limit wins both ways: a container may be
    given less than the machine has, and a virtual machine whose memory grows as it is used
    shows a ``MemTotal`` far below what it holds (the GPU machines' read 31 GiB at their start,
    255 GiB once 192 GiB had been written, with 256 GiB to give from the start)."""
    limited = cgroup_limit_mib()
    if limited:
        return limited
    try:
        with open("/proc/meminfo") as meminfo:
            return next(int(line.split()[1]) >> 10 for line in meminfo if line.startswith("MemTotal"))
    except (OSError, StopIteration, ValueError):
        return None


def cgroup_limit_mib() -> int | None:
    """The lowest memory limit of the cgroup this process runs in and of its ancestors, in MiB
    (v2 ``memory.max``, v1 ``memory.limit_in_bytes``), or None where none is set or readable."""
    from pkb_core.process.cgroup_tree import own_cgroups

    own = own_cgroups()
    folder, name = (own["memory"], "memory.limit_in_bytes") if "memory" in own else (own.get("v2"), "memory.max")
    lowest = None
    while folder:
        try:
            with open(os.path.join(folder, name)) as limit:
                value = limit.read().strip()
        except OSError:
            break  # above the cgroup mount, or the root (which has no limit file)
        if value.isdigit() and int(value) < 1 << 60:  # "max", v1's "unlimited" (a page-rounded 2**63)
            lowest = min(lowest or int(value), int(value))
        parent = os.path.dirname(folder)
        folder = parent if parent != folder else None
    return lowest >> 20 if lowest else None
