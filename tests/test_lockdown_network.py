"""The candidate lockdown's network rules, applied for real in a forked child:
io_uring and every socket family but AF_UNIX kill the process with SIGSYS
(the launcher's ``flagged``), local sockets keep working; and its rule against
futex_waitv, whose frozen sleepers would slow other processes' hand-offs."""
import ctypes
import errno
import os
import platform
import signal
import socket

import pytest

from pkb_core.confine.lockdown import _ARCHES, lock_down

pytestmark = pytest.mark.skipif(platform.machine() not in _ARCHES, reason="no seccomp table for this machine")

_AF_VSOCK = 40


def _in_locked_child(action, network=False) -> int:
    """Run ``action`` in a child under the lockdown; its exit code, or minus the signal that ended it."""
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            missing = lock_down(network=network)
            code = 4 if any("seccomp" in m for m in missing) else action()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _io_uring_setup():
    params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall(425, 8, params)  # io_uring_setup(8 entries, &params): the process ends here
    return 0


def _socket(family, kind=socket.SOCK_STREAM):
    def make():
        socket.socket(family, kind).close()
        return 0
    return make


def test_io_uring_kills_the_process_with_sigsys():
    assert _in_locked_child(_io_uring_setup) == -signal.SIGSYS
    # The reference backend's candidates too: a ring is a way around every rule.
    assert _in_locked_child(_io_uring_setup, network=True) == -signal.SIGSYS


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6, _AF_VSOCK])
def test_network_sockets_of_any_family_kill_the_process(family):
    assert _in_locked_child(_socket(family)) == -signal.SIGSYS


def test_local_sockets_stay_and_the_reference_backend_keeps_its_network():
    assert _in_locked_child(_socket(socket.AF_UNIX)) == 0
    assert _in_locked_child(lambda: (socket.socketpair(), 0)[1]) == 0
    assert _in_locked_child(_socket(socket.AF_INET), network=True) == 0


def _futex_waitv_errno() -> int:
    """futex_waitv with no words: EINVAL from a kernel that has it, ENOSYS from one without."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall(449, None, 0, 0, None, 0)
    return ctypes.get_errno()


@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"), reason="futex_waitv's number is 449 there")
def test_futex_waitv_is_refused_as_if_the_kernel_lacked_it():
    """A candidate's sleepers in futex_waitv (128 words each) would stay in the kernel's global futex
    hash while its group is frozen, and every wake of the judge's and the reference group's CPU
    hand-offs would walk them: refused with ENOSYS, as a kernel without the call answers."""
    if _futex_waitv_errno() == errno.ENOSYS:
        pytest.skip("this kernel has no futex_waitv: nothing to refuse")
    assert _in_locked_child(lambda: 0 if _futex_waitv_errno() == errno.ENOSYS else 1) == 0
