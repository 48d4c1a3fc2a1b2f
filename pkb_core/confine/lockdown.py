"""What the kernel enforces on a candidate process before its code is imported.

A candidate runs in processes of its own (docs/trust.md), but processes of the
same user can still reach each other through the operating system: signal the
judge's processes, read their memory, or open new network connections and
build a NCCL or gloo communicator of their own. None of this is stopped by
Python code in the candidate's process (the candidate can undo that), so it is
stopped by the kernel, with settings that cannot be reverted from inside:

* ``PR_SET_NO_NEW_PRIVS`` and a seccomp filter (inherited by every child) that
  refuses, with ``EPERM``/``EACCES``:

  - ``ptrace``, ``process_vm_readv``/``process_vm_writev``: no reading or
    writing another process's memory;
  - ``kill``/``tgkill``/``rt_sigqueueinfo``/``rt_tgsigqueueinfo`` aimed at any
    process but this one or its own process group (signal 0 included), ``tkill`` and
    ``pidfd_send_signal``: no stopping or killing the judge's processes;
  - ``fcntl`` ``F_SETOWN``/``F_SETOWN_EX``/``F_SETSIG`` and ``ioctl``
    ``FIOSETOWN``/``SIOCSPGRP``: no descriptor names a process the kernel
    would signal for it (SIGIO, or any signal ``F_SETSIG`` picks);
  - ``setsid``: every child stays in the candidate's session, so the
    launcher's stop and kill reach all of them (:mod:`pkb_core.process.sessions`;
    process groups of their own are fine: ninja gives each compiler one);
  - ``bpf`` and ``pidfd_getfd`` (no taking another process's descriptors);
  - ``add_key``, ``request_key`` and ``keyctl``: a key in the kernel's keyrings is its user's,
    not its job's, and outlives the job (another job's user read one a hostile job left open);
  - ``futex_waitv``, with ``ENOSYS``: its sleepers, up to 128 entries each in the kernel's
    global futex hash and kept there while the group is frozen, slow every other process's
    futex wakes, pkb's CPU hand-offs among them (the other sides' windows, never the group's own);
  - ``io_uring_setup``/``io_uring_enter``/``io_uring_register`` kill the
    process with SIGSYS (which the launcher reports as ``flagged``): a ring
    creates sockets and connects them (``IORING_OP_SOCKET``, ``IORING_OP_CONNECT``)
    without the ``socket`` syscall this filter inspects;
  - with ``network=False``, ``socket`` for any family but ``AF_UNIX`` kills the
    process with SIGSYS (``AF_NETLINK`` is refused with ``EAFNOSUPPORT``):
    no new TCP connection, so no new NCCL or gloo communicator can be built
    (both bootstrap over TCP). The one connection made before the lockdown,
    to the job's store keeper, serves barriers only (:mod:`pkb_core.keeper`);
  - x32 system calls (x86_64's arch with bit 30 set in the number), which the
    rules above would not recognise.

* every capability dropped (effective, permitted, inheritable, bounding), so a
  candidate started as root cannot read the memory of the non-dumpable judge
  processes (:func:`protect_from_peers`) through ``/proc``;

* a user of its own and a read-only file system but for its own scratch
  (:mod:`pkb_core.confine.sandbox`), so it cannot signal, read or write any
  process or file of the launcher, the judge or another job, nor pkb's
  installation, the problem pack, the solutions' folder or the run directory;
  this needs root (``CAP_SETUID``, ``CAP_SYS_ADMIN``) when the lockdown starts;

* a ``/tmp`` and a ``/proc`` of its own (:mod:`pkb_core.confine.views`): no other
  run's temporary files, no other user's process, no other network's tables.

On a kernel or architecture without seccomp the lockdown reports what it could
not do; the launcher records that in every job's record (``lockdown``).
"""
from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

# prctl options and seccomp constants (linux/prctl.h, linux/seccomp.h, linux/filter.h).
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_KILL_PROCESS = 0x80000000
_LD_W_ABS, _JEQ_K, _RET_K = 0x20, 0x15, 0x06
# struct seccomp_data: nr (u32), arch (u32), instruction_pointer (u64), args[6] (u64 each).
_NR, _ARCH, _ARG0 = 0, 4, 16

#: Syscall numbers per architecture (arch id as in linux/audit.h).
_ARCHES = {
    "x86_64": (0xC000003E, {
        "socket": 41, "kill": 62, "tkill": 200, "tgkill": 234, "ptrace": 101, "setsid": 112,
        "process_vm_readv": 310, "process_vm_writev": 311, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297,
        "pidfd_send_signal": 424, "fcntl": 72, "ioctl": 16, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "bpf": 321, "pidfd_getfd": 438,
        "add_key": 248, "request_key": 249, "keyctl": 250, "futex_waitv": 449,
    }),
    "aarch64": (0xC00000B7, {
        "socket": 198, "kill": 129, "tkill": 130, "tgkill": 131, "ptrace": 117, "setsid": 157,
        "process_vm_readv": 270, "process_vm_writev": 271, "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240,
        "pidfd_send_signal": 424, "fcntl": 25, "ioctl": 29, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "bpf": 280, "pidfd_getfd": 438,
        "add_key": 217, "request_key": 218, "keyctl": 219, "futex_waitv": 449,
    }),
}
_AF_UNIX, _AF_NETLINK = 1, 16
#: x32 syscalls share x86_64's audit arch and set this bit in their number.
_X32_SYSCALL_BIT = 0x40000000
_JSET_K = 0x45
#: fcntl commands and ioctls that name who receives a descriptor's signals (SIGIO, or any signal
#: F_SETSIG picks): the kernel then signals that process for the candidate, past any kill() rule.
_F_SETOWN, _F_SETSIG, _F_SETOWN_EX = 8, 10, 15
_FIOSETOWN, _SIOCSPGRP = 0x8901, 0x8902
_CAP_LAST = 63


def _insn(code, k, jt=0, jf=0) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF)


def _deny(err=errno.EPERM) -> bytes:
    return _insn(_RET_K, SECCOMP_RET_ERRNO | err)


def _allow() -> bytes:
    return _insn(_RET_K, SECCOMP_RET_ALLOW)


def _arg_is(index: int, value: int) -> list[bytes]:
    """Skip the next instruction unless argument ``index`` equals ``value``.

    Compares the low 32 bits only: the arguments checked here are C ``int``s
    (a pid, an address family), whose upper register half the ABI leaves
    undefined. Clobbers the accumulator; the caller's next instruction runs on
    a match."""
    return [_insn(_LD_W_ABS, _ARG0 + 8 * index), _insn(_JEQ_K, value & 0xFFFFFFFF, 0, 1)]


def build_filter(machine: str, *, pid: int, pgid: int, network: bool) -> bytes:
    """The BPF program of the lockdown for ``machine`` (``platform.machine()``)."""
    arch, nr = _ARCHES[machine]
    prog: list[bytes] = [
        _insn(_LD_W_ABS, _ARCH),
        _insn(_JEQ_K, arch, 1, 0),
        _deny(errno.ENOSYS),  # a foreign ABI (i386 compat): refuse rather than guess its numbers
        _insn(_LD_W_ABS, _NR),
        # x32 calls carry x86_64's arch with this bit set (socket would be 41 | bit): refuse them all.
        _insn(_JSET_K, _X32_SYSCALL_BIT, 0, 1),
        _deny(errno.ENOSYS),
    ]

    def block(name, body: list[bytes]):
        # if nr == name: body (which must end in a return) else: skip it
        prog.append(_insn(_JEQ_K, nr[name], 0, len(body)))
        prog.extend(body)

    # The kernel's keyrings belong to a user, not to a job's namespaces: a key a job adds with its
    # permissions opened outlives it and another job's user reads it.
    for name in ("ptrace", "process_vm_readv", "process_vm_writev", "setsid", "tkill", "pidfd_send_signal", "bpf",
                 "pidfd_getfd", "add_key", "request_key", "keyctl"):
        block(name, [_deny()])
    # futex_waitv queues one sleeper on up to 128 words of the kernel's global futex hash, and a
    # frozen group's sleepers stay queued: every FUTEX_WAKE of another process then walks them (a
    # hostile review's 1200 threads a rank, parked between their own batches, made each of the
    # judge's and the reference group's CPU hand-offs ~100 us dearer, 2026-11-30). Refused as a
    # kernel without it would (ENOSYS: glibc and torch never call it); a plain futex wait queues
    # one word a thread, and the group's thread cap bounds those.
    block("futex_waitv", [_deny(errno.ENOSYS)])
    # io_uring performs socket(), connect() and I/O without the syscalls this
    # filter inspects (IORING_OP_SOCKET made a gloo group past the socket rule).
    for name in ("io_uring_setup", "io_uring_enter", "io_uring_register"):
        block(name, [_insn(_RET_K, SECCOMP_RET_KILL_PROCESS)])
    # kill(pid, sig) and rt_sigqueueinfo(pid, ...): only this process, its own group or signal 0.
    for name in ("kill", "rt_sigqueueinfo"):
        body = []
        for target in (pid, 0, -pgid):
            body += _arg_is(0, target) + [_allow()]
        body += [_deny()]
        block(name, body)
    # tgkill(tgid, tid, sig) and rt_tgsigqueueinfo(tgid, ...): only threads of this process.
    for name in ("tgkill", "rt_tgsigqueueinfo"):
        block(name, _arg_is(0, pid) + [_allow(), _deny()])
    # No descriptor of a candidate may name a process to signal (fcntl/ioctl owner commands).
    for name, commands in (("fcntl", (_F_SETOWN, _F_SETSIG, _F_SETOWN_EX)), ("ioctl", (_FIOSETOWN, _SIOCSPGRP))):
        body = []
        for command in commands:
            body += _arg_is(1, command) + [_deny()]
        block(name, body + [_allow()])
    if not network:
        # Only local sockets: AF_UNIX (torch symm_mem passes CUDA handles over it);
        # netlink is refused politely (libc asks it about interfaces); every other
        # family (inet, inet6, packet, vsock, rds, tipc, xdp, ...) is a network.
        body = _arg_is(0, _AF_UNIX) + [_allow()] + _arg_is(0, _AF_NETLINK) + [_deny(errno.EAFNOSUPPORT)]
        body += [_insn(_RET_K, SECCOMP_RET_KILL_PROCESS)]
        block("socket", body)
    prog.append(_allow())
    return b"".join(prog)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def protected_caches() -> list[str]:
    """The cache folders whose contents decide verdicts: the machine's
    calibration (the physics floor) and the compile phase's outcomes. Made
    read-only with the run directory, so no candidate can poison a later run's
    floor or another solution's build outcome."""
    from pkb_core.cache import builds_dir, calibration_dir

    folders = [calibration_dir(), builds_dir()]
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
    return [str(folder) for folder in folders]


def lock_down(*, network: bool, read_only=(), writable=(), hidden=(), user: int | None = None,
              expose=(), revealed=(), own_tmpfs=(), layered=(), temp_roots=(), dev_shm=None) -> list[str]:
    """Apply the lockdown to this process; return what could not be applied.

    :param network: ``False`` refuses new internet sockets (custom-kernel
        backends); ``True`` keeps them (the reference backend's solutions may
        create NCCL communicators for subgroups).
    :param read_only: folders that stay read-only even inside a ``writable``
        one (:func:`protected_caches` inside a builder's cache).
    :param writable: the only folders this process (and its children) may
        still write; every other mount is remounted read-only in a private
        mount namespace (:func:`pkb_core.confine.sandbox.seal`). Needs
        ``CAP_SYS_ADMIN``; without it this item is reported missing.
    :param hidden: folders this process sees empty (the run directory).
    :param revealed: folders inside ``hidden`` ones it still reads (a builder's solution in a
        service's data directory).
    :param user: the uid (and gid) this process becomes
        (:func:`pkb_core.confine.sandbox.switch_user`; a candidate group's
        own, from the launcher). ``None`` keeps the user (a builder).
    :param expose: folders ``user`` must still read (the solution's, the
        problem's); Python's installation and import paths always are.
    :param own_tmpfs: ``(folder, bytes)`` pairs: each folder covered by a fresh tmpfs of at
        most that many bytes, this mount namespace's alone, so what is written there goes
        with this process and its children however they end
        (:func:`pkb_core.confine.sandbox.own_tmpfs`; a builder's temporary folder). Name
        them ``writable`` too. Without a private mount namespace they stay plain folders.
    :param layered: ``(folder, output)`` pairs: each folder seen whole, read-only, with the
        upper layer in ``output`` over it, where its writes land
        (:func:`pkb_core.confine.overlay.mount_overlay`; a builder's view of pkb's cache). Name
        them ``writable`` too.
    :param temp_roots: folders besides the machine's temporary folders that hold other runs'
        files (where a builder's temporary folder was made): hidden like them.
    :param dev_shm: a folder inside ``/dev/shm`` this process sees as ``/dev/shm`` too (a
        candidate group's own: :func:`pkb_core.confine.sandbox.own_dev_shm`); name both writable.

    In a private mount namespace the process also gets a ``/tmp`` and a ``/proc`` of its own
    (:mod:`pkb_core.confine.views`): the machine's temporary folders are covered, with only
    what it needs bound back, and it sees no other user's processes.
    """
    import sys

    from pkb_core.confine import overlay, sandbox, views

    sys.dont_write_bytecode = True  # nothing imported from here on leaves a bytecode file
    missing = []
    libc = _libc()
    problem = sandbox.private_mounts(libc)
    if problem:
        missing.append(f"read-only file system: {problem}")
    else:
        if dev_shm is not None:
            problem = sandbox.own_dev_shm(libc, dev_shm)
            if problem:
                missing.append(problem)
        for folder, size in own_tmpfs:
            problem = sandbox.own_tmpfs(libc, folder, size, owner=user)
            if problem:
                missing.append(problem)
        for folder, output in layered:
            problem = overlay.mount_overlay(libc, folder, output)
            if problem:
                missing.append(problem)
        missing += views.own_proc(libc)
        needed = sandbox.needed_paths(expose)
        if user is not None:
            missing += sandbox.expose(libc, needed, user)
        # What it reads or writes inside the machine's temporary folders is bound back into their
        # covers; nothing else of them is seen.
        temp = views.private_temp([*needed, *writable, *read_only, *revealed, *(folder for folder, _ in own_tmpfs),
                                   *(folder for folder, _ in layered)], extra=temp_roots)
        missing += sandbox.seal(libc, writable=writable, read_only=read_only, hidden=hidden, revealed=revealed,
                                temp=temp)
        sandbox.anchor_cwd()
    for cap in range(_CAP_LAST + 1):  # the bounding set needs CAP_SETPCAP: before the user changes
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the kernel's last cap: fine
    if user is not None:
        problem = sandbox.switch_user(user)
        if problem:
            missing.append(problem)
    machine = platform.machine()
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        missing.append(f"no_new_privs ({os.strerror(ctypes.get_errno())})")
    if machine not in _ARCHES:
        missing.append(f"seccomp filter (no syscall table for {machine})")
    else:
        program = build_filter(machine, pid=os.getpid(), pgid=os.getpgid(0), network=network)
        buffer = ctypes.create_string_buffer(program)
        fprog = _SockFprog(len(program) // 8, ctypes.addressof(buffer))
        if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
            missing.append(f"seccomp filter ({os.strerror(ctypes.get_errno())})")
    dropped = _drop_capabilities(libc)
    if dropped:
        missing.append(dropped)
    return missing


def _drop_capabilities(libc) -> str | None:
    """Empty every capability set of this process (the bounding set was
    emptied before the user changed)."""
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()                  # effective, permitted, inheritable x 2 words: all zero
    if libc.capset(ctypes.byref(header), ctypes.byref(data)) != 0:
        return f"dropping capabilities ({os.strerror(ctypes.get_errno())})"
    return None


def protect_from_peers() -> None:
    """Make this (judge) process non-dumpable: other processes of the same user
    without ``CAP_SYS_PTRACE`` can no longer read its memory, its file
    descriptors or its environment through ``/proc``."""
    _libc().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
