"""System V IPC and POSIX message queues of a process's own: an IPC namespace per candidate
rank and per builder.

Shared-memory segments, message queues and semaphore sets (``shmget``, ``msgget``, ``semget``)
and POSIX message queues (``mq_open``) are not files: no mount, user or cgroup of a job holds
them. In the machine's IPC namespace they outlive the job that made them (64 MiB segments with
every page touched, in a hostile test) and carry data to any later or concurrent job that looks
for them, whatever its user. In a namespace of its own a process sees none of the machine's,
and the kernel destroys what it made once its last process has ended. pkb's own channels are
files (``/dev/shm``, the mount namespace's) and sockets, and a CUDA IPC handle names its
exporter by process id, which the IPC namespace does not change: nothing of pkb needs the
machine's.

The zygote's child (a rank, a builder) or a spawned builder calls :func:`own_ipc_namespace`
before anything of the solution runs, while it still holds ``CAP_SYS_ADMIN``, where its
containment says so (:class:`pkb_core.process.containment.Containment`'s ``own_ipc``).

On CPUs and on NVIDIA GPUs (:data:`OWN_IPC_DEVICES`). On GPUs pkb's sides open CUDA IPC handles of
the judge's timekeeper and of their peers, and NCCL its own: with every candidate rank in an IPC
namespace of its own, the cuda samples 1 and 2 (window mode) and the reference's NCCL beside them
passed on 2xH200 with no ``lockdown_gaps`` entry, three jobs in two calls (2026-11-29,
docs/benchmarks/2026-11-29-h200x2-clock-targets.md). ``PKB_IPC_NAMESPACES`` (in the environment
of ``pkb run``, ``pkb bench`` or ``pkb serve``) is ``auto`` (those devices), ``on`` (every device)
or ``off`` (none: the way back for a backend whose transport needs the machine's namespace, whose
records then say the gap); any other value is refused in one line.
"""
from __future__ import annotations

import ctypes
import os

from pkb_core.env_settings import setting_from_env

CLONE_NEWIPC = 0x08000000
#: The devices whose candidate ranks and builders get IPC namespaces of their own (``auto``).
OWN_IPC_DEVICES = ("cpu", "cuda")
IPC_ENV = "PKB_IPC_NAMESPACES"
IPC_CHOICES = ("auto", "on", "off")
#: The variable that tells a spawned builder to make one (a forked one is told by its fork request).
OWN_IPC_ENV = "PKB_OWN_IPC"


def ipc_choice() -> str:
    """What ``PKB_IPC_NAMESPACES`` asks for (``auto`` unset); ValueError, one line, for any other value."""
    return setting_from_env(IPC_ENV, IPC_CHOICES, "auto", "IPC namespaces per candidate process: docs/trust.md")


def wants_own_ipc(device: str) -> bool:
    """Whether a candidate group or builder on ``device`` (``cpu``, ``cuda``) gets IPC namespaces of its own."""
    choice = ipc_choice()
    return choice == "on" or (choice == "auto" and device in OWN_IPC_DEVICES)


def own_ipc_namespace() -> None:
    """Move this process into a new IPC namespace; raises OSError if the kernel refuses (not
    root: ``CAP_SYS_ADMIN``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWIPC) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"an IPC namespace of its own: {os.strerror(errno)}")


def shares_ipc_with_this_process(pid: int) -> bool:
    """Whether process ``pid`` is in this process's IPC namespace (a rank that should not be)."""
    try:
        return os.stat(f"/proc/{pid}/ns/ipc").st_ino == os.stat("/proc/self/ns/ipc").st_ino
    except OSError:
        return False
