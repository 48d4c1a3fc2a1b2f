"""A network of a candidate group's own: a network namespace with only its loopback.

A reference-backend candidate keeps its sockets (its solutions may build NCCL or
gloo communicators), and any candidate may connect to abstract Unix sockets. In
the machine's network that reaches every local service: the reward service's
port, another group's store, whatever else listens. So each candidate group of
a one-node launch gets a network namespace of its own, made by the launcher
(root) and entered by each of the group's processes as they start (the zygote's
child, before anything else runs: :func:`enter`). Inside there is one interface,
``lo``, up: the group's ranks reach each other (their process group's bootstrap,
their store keeper, whose listening socket the launcher makes inside the
namespace: :func:`make_inside`), and nothing else. Abstract Unix socket names are
per namespace too, so the group sees none of the machine's.

The launcher makes the namespace in a short-lived thread (namespaces belong to a
thread): the thread unshares its network namespace, brings ``lo`` up, makes what
must listen inside, opens the namespace's file and ends; the open descriptor
keeps the namespace alive until the group's processes hold it.
"""
from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
import threading

CLONE_NEWNET = 0x40000000
#: The variable that tells a spawned process (a builder) which inherited descriptor is its network namespace.
NETNS_FD_ENV = "PKB_NETNS_FD"
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def make_inside(make=None) -> tuple[int, object]:
    """A new network namespace with its loopback up, and ``make()`` called inside it (its
    sockets belong to the namespace); ``(the namespace's descriptor, what make returned)``.

    :raises OSError: the namespace could not be made (not root: ``CAP_SYS_ADMIN``)."""
    result: dict = {}

    def inside():
        try:
            libc = _libc()
            if libc.unshare(CLONE_NEWNET) != 0:
                errno = ctypes.get_errno()
                raise OSError(errno, f"a network namespace per job: {os.strerror(errno)}")
            _loopback_up()
            result["fd"] = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            result["made"] = make() if make is not None else None
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            result["error"] = exc

    thread = threading.Thread(target=inside, name="pkb-netns")
    thread.start()
    thread.join()
    if "error" in result:
        if "fd" in result:
            os.close(result["fd"])
        raise result["error"]
    return result["fd"], result["made"]


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("16sH", b"lo", 0) + bytes(22)
        flags = struct.unpack("16sH", fcntl.ioctl(probe.fileno(), _SIOCGIFFLAGS, request)[:18])[1]
        fcntl.ioctl(probe.fileno(), _SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | _IFF_UP) + bytes(22))


def enter(fd: int) -> None:
    """Move this process (a single-threaded one: a zygote's fresh child) into the
    network namespace ``fd``; raises OSError if the kernel refuses."""
    if _libc().setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"entering the group's network namespace: {os.strerror(errno)}")


def same_namespace(pid: int, fd: int) -> bool:
    """Whether process ``pid`` is in the network namespace ``fd``."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino == os.fstat(fd).st_ino
    except OSError:
        return False
