"""The judge's c10d store, served by the launcher (:class:`JudgeStore`). A candidate group's
is served by a keeper process of its own (:mod:`pkb_core.keeper`: the launcher makes its
listening socket and report pipe, :class:`pkb_core.keeper.listener.KeeperSocket`)."""
from __future__ import annotations

import os
import socket

from pkb_core.confine.door import close_door


class JudgeStore:
    """The judge's c10d store, served by the launcher (the judge's ranks never run
    candidate code; a candidate group's store is its keeper's, :mod:`pkb_core.keeper`).

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
