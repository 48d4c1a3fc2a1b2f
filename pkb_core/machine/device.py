"""Choosing between GPU mode and CPU mode."""
from __future__ import annotations

import os


def detect_device(choice: str = "auto") -> str:
    """``"cuda"`` when an NVIDIA GPU is visible (or asked for), else ``"cpu"``.

    ``PKB_DEVICE=cpu`` forces CPU mode on a GPU machine.
    """
    choice = os.environ.get("PKB_DEVICE", choice) if choice == "auto" else choice
    if choice != "auto":
        return choice
    import torch

    return "cuda" if torch.cuda.is_available() and torch.cuda.device_count() > 0 else "cpu"


def require_device(device: str) -> str:
    """``device``, or a one-line error when it is ``cuda`` and this machine shows no GPU
    (``--device cuda`` on a CPU machine: torch would fail deep inside, with a traceback)."""
    if device == "cuda" and device_count(device) == 0:
        from pkb_core.errors import PkbError

        raise PkbError("--device cuda but no GPU is visible here (leave --device auto for CPU mode)")
    return device


#: What a process that runs solution code gets in CPU mode, unless the caller's environment says
#: otherwise: one OpenMP thread (the ranks share the cores) and Triton's interpreter.
CPU_ENVIRONMENT = {"OMP_NUM_THREADS": "1", "TRITON_INTERPRET": "1"}


#: What every process pkb starts in GPU mode gets (the judge's, the reference's and the
#: candidate's groups, and builders), unless the caller's environment says otherwise: one hardware
#: work queue a CUDA context. With CUDA's default of eight, a context's streams are spread over the
#: queues in the order they are made, and two processes running the same code took different
#: device times for a whole job when their histories differed (on 2xH200, 2026-11-30: problem 55's
#: reference against itself read 1.41x, both reference groups' rank 1 at 258-266 us a call by
#: their own events and the candidate group's at 188; with one queue the three groups read alike,
#: and problems 55, 56, 79 and 84 within 0.94-1.06: docs/benchmarks/2026-11-30-h200x2-device-queues.md).
#: Streams still run side by side; their launches are taken in the order the host issued them,
#: as Megatron-LM asks of its processes. Read when a process makes its CUDA context, which pkb
#: does before any solution code runs (:meth:`pkb_core.candidate.rank.CandidateRank.prepare`).
GPU_ENVIRONMENT = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
#: What the judge's timekeeper process gets in GPU mode, whatever else is set: its device engine
#: ends a hung batch by writing a word on a second stream while its first waits
#: (:class:`pkb_core.judge.timekeeper.DeviceClock`), which needs a second queue. Its own work,
#: the windows' stamps and copies, is one stream's.
TIMEKEEPER_GPU_ENVIRONMENT = {"CUDA_DEVICE_MAX_CONNECTIONS": "8"}


def device_environment(device: str) -> dict:
    """The variables of ``device``'s mode (:data:`CPU_ENVIRONMENT` on CPU,
    :data:`GPU_ENVIRONMENT` on GPU) that the caller's environment does not set. Workers and
    builders both get them, so a file imports the same way in the compile phase as in its job
    (a builder without ``TRITON_INTERPRET`` took a Triton file for a GPU one), and every group of
    a job, judge, reference and candidate, makes its CUDA context under the same settings."""
    wanted = CPU_ENVIRONMENT if device == "cpu" else GPU_ENVIRONMENT
    return {name: value for name, value in wanted.items() if name not in os.environ}


def device_count(device: str) -> int:
    """GPUs on this node (CPU mode: 2 ranks by default)."""
    if device == "cuda":
        import torch

        return torch.cuda.device_count()
    return 2


def cpu_cores() -> int:
    """The CPU cores this process may run on (its affinity, which a container or
    ``taskset`` narrows; the machine's count where affinity is unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def crowded_cores_warning(ranks: int) -> str | None:
    """One line when ``ranks`` CPU-mode ranks are more than this machine's cores, else None.

    Not an error: the ranks still run, each a process (two with the judge's), taking
    turns on the cores, so every job is slower and a tight ``--timeout`` may cut it."""
    cores = cpu_cores()
    if ranks <= cores:
        return None
    return (f"warning: world size {ranks} is more than this machine's {cores} CPU core(s): in CPU mode every "
            "rank is a process, so they take turns and jobs run slowly (raise --timeout if they time out)")
