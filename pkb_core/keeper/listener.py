"""The keeper's listening socket and report pipe, made by the launcher and handed to the
group's rank 0, which forks the keeper (:func:`pkb_core.keeper.process.start_keeper`)."""
from __future__ import annotations

import os
import secrets
import socket


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
