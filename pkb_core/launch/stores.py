"""Where a group of workers finds its c10d store: the judge's, served by the launcher
(:class:`JudgeStore`); a candidate group's, served by a keeper process of its own
(:class:`KeeperSocket`: the listening socket and report pipe the launcher makes and hands
to the group's rank 0, :mod:`pkb_core.launch.keeper`)."""
from __future__ import annotations

import ctypes
import os
import secrets
import socket
import struct

#: setsockopt option that attaches a classic BPF program to a socket (linux/socket.h).
_SO_ATTACH_FILTER = 26


def close_door(listen: socket.socket) -> None:
    """Let nobody new connect to ``listen``, while the connections it accepted go on.

    A one-instruction socket filter (``ret #0``) drops every packet that reaches the
    listening socket, so a new peer's handshake never completes; the accepted
    connections are sockets of their own and are untouched. (Shutting the listening
    socket instead makes torch's store server spin on failed accepts.)"""
    program = ctypes.create_string_buffer(struct.pack("HBBI", 0x06, 0, 0, 0))  # BPF_RET | BPF_K, 0
    fprog = struct.pack("HL", 1, ctypes.addressof(program))
    listen.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_FILTER, fprog)


class JudgeStore:
    """The judge's c10d store, served by the launcher (the judge's ranks never run
    candidate code; a candidate group's store is its keeper's, :class:`KeeperSocket`).

    :meth:`close_door` shuts its listening socket once the judge's ranks have connected:
    they keep their connections, and no later process (a reference-backend candidate keeps
    its network) can open one, to stall the judge's barriers or fill the launcher's memory.

    :param host: how the workers reach this machine (another node's workers too).
    """

    def __init__(self, world_size: int, host: str = "127.0.0.1", startup_s: float = 180.0):
        from datetime import timedelta

        import torch.distributed as dist

        self.listen = socket.create_server((host, 0), backlog=128)
        port = self.listen.getsockname()[1]
        self.store = dist.TCPStore(host, port, world_size, is_master=True, wait_for_workers=False,
                                   master_listen_fd=os.dup(self.listen.fileno()),
                                   timeout=timedelta(seconds=startup_s))
        self.address = f"{host}:{port}"

    def close_door(self) -> None:
        """No new connection from now on (the ones made stay)."""
        close_door(self.listen)


class KeeperSocket:
    """The listening socket of a candidate group's store keeper, made here and
    handed to the group's rank 0 (which forks the keeper), and the pipe on which
    the keeper reports what it refused.

    On one node a custom-kernel group's keeper listens on an abstract Unix socket
    (``unix=True``): its ranks then hold no TCP socket at all (a TCP connection
    can be disconnected and pointed anywhere, the launcher's and the judge's
    ports included, and the lockdown refuses every new internet socket), and the
    keeper learns each peer's real pid and user from the kernel
    (``SO_PEERCRED``), never from what the peer says. Ranks on other nodes, and
    the reference backend's TCPStore, need TCP.

    :param host: how the workers reach this machine (another node's workers too).
    """

    def __init__(self, host: str = "127.0.0.1", unix: bool = False):
        self.token = secrets.token_hex(16)
        if unix:
            name = f"pkb-keeper-{secrets.token_hex(12)}"
            self.listen = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.listen.bind("\0" + name)
            self.listen.listen(128)
            self.address = f"unix:{name}"
        else:
            self.listen = socket.create_server((host, 0), backlog=128)
            self.address = f"{host}:{self.listen.getsockname()[1]}"
        self.report_read, self.report_write = os.pipe()
        os.set_blocking(self.report_read, False)

    def fds(self) -> tuple[int, int]:
        return self.listen.fileno(), self.report_write

    def handed_over(self) -> None:
        """Close this process's copies: the keeper holds the socket now."""
        self.listen.close()
        os.close(self.report_write)
