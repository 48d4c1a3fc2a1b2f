"""Sleeping on an int32 word of shared memory, and waking whoever sleeps on it (Linux futexes).

CPU mode's gates (:mod:`pkb_core.harness.gates`) and its device barrier
(:mod:`pkb_core.harness.device_barrier`) are int32 words in shared-memory files: one process
writes a word, another waits for it. A waiter that polls and naps between polls (to spare the
cores its peers need) notices the write up to a nap late, and a nap asked for 50 us lasts
50-150 us with the kernel's timer slack. A side whose own code spins on its words instead
notices at once, so on a two-core machine pkb's harness windows held several naps that such a
side did not: its windows could lie under the harness batch that bounds them (docs/trust.md).
A futex takes the nap out: the waiter sleeps in the kernel on the word itself and the writer
wakes it with one system call, so an honest waiter is runnable as soon as the word is written
and takes no core while it waits. A process that spins still sees a word sooner, by the
wake-up's latency (10-20 us a window on the 2-core machine, a review measured), at the cost of a
core its peers need; against naps it saw each word up to a nap sooner.

The words live in ``MAP_SHARED`` mappings of files (``/dev/shm``), so the futexes are the
shared kind (no ``FUTEX_PRIVATE_FLAG``): the kernel keys them by the file's page, the same
word in every process that maps it. Where there are none (not Linux, an architecture without
a known system-call number) :func:`available` is False and callers nap as before.
"""
from __future__ import annotations

import ctypes
import errno
import os
import platform

#: ``futex``'s system-call number by machine (asm/unistd.h of each architecture).
_FUTEX_SYSCALL = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98, "ppc64le": 221, "s390x": 238,
                  "riscv64": 98}
#: Operations (linux/futex.h), shared between processes: no FUTEX_PRIVATE_FLAG.
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1
#: Wake every sleeper on a word (INT_MAX, as the kernel's own callers do).
_EVERYONE = 0x7FFFFFFF
#: The longest sleep pkb's waits ask for on a word: a writer that stores without waking (a side
#: whose own code does) is still seen this late at most, and only its own wait is the later.
LONGEST_SLEEP_S = 0.01


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _syscall():
    """``(libc's syscall, futex's number)``, or ``None`` where futexes cannot be reached."""
    number = _FUTEX_SYSCALL.get(platform.machine().lower())
    if os.name != "posix" or platform.system() != "Linux" or number is None:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        call = libc.syscall
    except (OSError, AttributeError):
        return None
    call.restype = ctypes.c_long
    return call, number


_FUTEX = _syscall()


def available() -> bool:
    """True where :func:`sleep_on` sleeps in the kernel (Linux on a known architecture)."""
    return _FUTEX is not None


def sleep_on(address: int, seen: int, timeout_s: float) -> bool:
    """Sleep while the int32 at ``address`` still holds ``seen`` (a signed int32), for at most
    ``timeout_s``. Returns at a wake, when the word no longer holds ``seen`` (at once, if it had
    changed before the call: no write between the caller's read and this sleep is missed), at a
    signal or at the timeout; the caller reads the word again. False where futexes are not
    available (the caller naps instead)."""
    if _FUTEX is None:
        return False
    call, number = _FUTEX
    timeout_s = max(0.0, timeout_s)
    whole = int(timeout_s)
    limit = _Timespec(whole, int((timeout_s - whole) * 1e9))
    result = call(ctypes.c_long(number), ctypes.c_void_p(address), ctypes.c_int(_FUTEX_WAIT),
                  ctypes.c_int(seen), ctypes.byref(limit), None, ctypes.c_int(0))
    if result != 0:
        err = ctypes.get_errno()
        # EAGAIN: the word had changed; ETIMEDOUT, EINTR: the caller reads it again. Anything
        # else (EFAULT, ENOSYS under a filter that refuses it) leaves the caller to nap.
        if err not in (errno.EAGAIN, errno.ETIMEDOUT, errno.EINTR):
            return False
    return True


def wake(address: int) -> None:
    """Wake every process sleeping on the int32 at ``address`` (after writing it; a write that
    is not followed by a wake is still seen, at the sleeper's timeout)."""
    if _FUTEX is None:
        return
    call, number = _FUTEX
    call(ctypes.c_long(number), ctypes.c_void_p(address), ctypes.c_int(_FUTEX_WAKE), ctypes.c_int(_EVERYONE),
         None, None, ctypes.c_int(0))
