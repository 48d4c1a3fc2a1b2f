"""The store keeper's process, from its fork to its death: forked by the group's rank 0
(:func:`start_keeper`), it caps its own memory, then serves its group's store, pkb's counter
protocol (:class:`pkb_core.keeper.server.CounterKeeper`, custom-kernel backends) or torch's
own ``TCPStore`` (the reference backend) until killed (:func:`serve`)."""
from __future__ import annotations

import os
import resource
import signal
import socket

from pkb_core.keeper.server import MEMORY_HEADROOM, CounterKeeper


def start_keeper(settings) -> None:
    """Fork the group's store keeper if the
    launcher handed this process its socket (global rank 0 of a candidate
    group: ``settings.keeper_fds``), before any job code runs here. The keeper
    stays in this session (frozen and killed with the candidate) and keeps only
    its socket, its report pipe and the launch log: holding this rank's command
    or reply pipe would hide this rank's death from the launcher.

    :param settings: the rank's :class:`pkb_core.contracts.worker_settings.WorkerSettings`."""
    if not settings.keeper_fds:
        return
    listen_fd, report_fd = settings.keeper_fds
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            from pkb_core.process.sessions import die_with_parent

            die_with_parent(parent)  # no keeper outlives its group's rank 0
            keep = {listen_fd, report_fd, 1, 2}
            for fd in map(int, os.listdir("/proc/self/fd")):
                if fd not in keep:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            serve("counter" if settings.custom_kernels else "tcpstore", listen_fd, report_fd,
                  settings.world_size, settings.store_token, cuda=settings.device_type == "cuda",
                  peer_uid=settings.sandbox_uid)
        finally:
            os._exit(1)
    os.close(listen_fd)
    os.close(report_fd)


def cap_memory(headroom: int = MEMORY_HEADROOM) -> None:
    """Cap this process's data segment (heap and private mappings) at what it
    holds now plus ``headroom``."""
    try:
        with open("/proc/self/status") as status:
            held = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmData:"))
    except (OSError, StopIteration, ValueError):
        return
    limit = held + headroom
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


#: Seconds a reference group's ranks have to connect to their keeper's TCPStore.
CONNECT_S = 180.0


def serve_tcpstore(listen_fd: int, world_size: int) -> None:
    """Serve torch's TCPStore on ``listen_fd`` until killed (the reference backend).

    Once every rank has connected, the listening socket is shut: the group's ranks keep
    their connections, and nobody else can open one (the reference backend's candidates keep
    their network, so another job's could otherwise reach this group's store)."""
    from datetime import timedelta

    import torch.distributed as dist

    from pkb_core.confine.door import close_door

    door = socket.socket(fileno=os.dup(listen_fd))
    # world_size ranks and this process's own client (torch counts the master's too).
    store = dist.TCPStore("127.0.0.1", 0, world_size + 1, is_master=True, wait_for_workers=True,
                          master_listen_fd=listen_fd, timeout=timedelta(seconds=CONNECT_S))
    close_door(door)
    while store is not None:
        signal.pause()


def serve(kind: str, listen_fd: int, report_fd: int, world_size: int, token: str, cuda: bool,
          peer_uid: int | None = None) -> None:
    """The keeper's whole life (never returns): the memory cap, then the server.

    :param peer_uid: the group's own user (its sandbox uid): on a Unix socket, a
        connection from any user but it and the launcher's (the ranks connect before
        their lockdown) is closed unanswered and unreported."""
    from pkb_core.confine.lockdown import protect_from_peers

    protect_from_peers()
    cap_memory()
    if kind == "tcpstore":
        serve_tcpstore(listen_fd, world_size)
    else:
        listen = socket.socket(fileno=listen_fd)
        CounterKeeper(listen, world_size, report_fd, token, cuda, peer_uid).serve()
