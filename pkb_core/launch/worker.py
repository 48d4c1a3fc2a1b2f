"""Entry point of every worker process: ``python -m pkb_core.launch.worker judge|candidate``.

The launcher starts the processes itself (no torchrun): each gets its start
settings (:class:`pkb_core.contracts.worker_settings.WorkerSettings`: rank, world
size, store, run directory, backend, ...) as one environment variable, read once
here, its commands on standard input
and a reply pipe (:mod:`pkb_core.process.channel`); standard output and error go to the
launch log (the judge's) or the job's own log (a candidate's: ``logs/job-<run
id>.log``). A worker first imports torch (after any libraries its backend
preloads), picks its device, connects to its group's c10d store (the judge's: served by
the launcher; a candidate group's: by the keeper its rank 0 forks first,
:func:`start_keeper`), then answers commands until told to exit. What each role does is in
:mod:`pkb_core.judge.rank` and :mod:`pkb_core.candidate.rank`.

The launcher sends SIGUSR1 before it kills a stuck worker: the worker then
writes every thread's Python stack into the log, which names where it hung.
"""
from __future__ import annotations

import faulthandler
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path

from pkb_core.contracts.worker_settings import WorkerSettings
from pkb_core.plugin.preload import import_torch_after_preloads


def _connect(settings: WorkerSettings):
    import torch
    import torch.distributed as dist

    if settings.device_type == "cuda":
        device = torch.device("cuda", settings.local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(1)
    return device, timedelta(seconds=settings.store_timeout), dist


def start_keeper(settings: WorkerSettings) -> None:
    """Fork the group's store keeper (:mod:`pkb_core.launch.keeper`) if the
    launcher handed this process its socket (global rank 0 of a candidate
    group: ``settings.keeper_fds``), before any job code runs here. The keeper
    stays in this session (frozen and killed with the candidate) and keeps only
    its socket, its report pipe and the launch log: holding this rank's command
    or reply pipe would hide this rank's death from the launcher."""
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
            from pkb_core.launch.keeper_process import serve as serve_store

            serve_store("counter" if settings.custom_kernels else "tcpstore", listen_fd, report_fd,
                        settings.world_size, settings.store_token, cuda=settings.device_type == "cuda",
                        peer_uid=settings.sandbox_uid)
        finally:
            os._exit(1)
    os.close(listen_fd)
    os.close(report_fd)


def _candidate_store(settings: WorkerSettings, timeout):
    """A candidate's store: the keeper's counters (custom kernels) or a TCPStore client (the reference backend)."""
    import torch.distributed as dist

    if settings.custom_kernels:
        from pkb_core.candidate.keeper_store import KeeperStore

        return KeeperStore(settings.store, rank=settings.rank, token=settings.store_token, timeout=timeout)
    host, port = settings.store.rsplit(":", 1)
    return dist.TCPStore(host, int(port), settings.world_size, is_master=False, timeout=timeout)


def serve(channel, handler, role: str) -> None:
    """Answer commands until ``exit`` (or the launcher closes the pipe): each line is read
    as its command's request class (:mod:`pkb_core.contracts.commands`), handed to the
    role's ``on_<op>``, and its answer object sent back (a :class:`Failure` if it raised)."""
    from pkb_core.contracts.commands import command_for
    from pkb_core.contracts.messages import Failure
    from pkb_core.errors import SolutionFailed, describe
    from pkb_core.process.channel import ChannelClosed

    while True:
        try:
            line = channel.receive()
        except ChannelClosed:
            return
        op = line.pop("op", None)
        nonce = line.pop("nonce", None)
        try:
            command = command_for(role, op)
            request = command.request.from_json(line)
            if command.op == "exit":
                channel.send({"op": "exit", "nonce": nonce})
                return
            answer = getattr(handler, f"on_{op}")(request)
            if not isinstance(answer, command.answer):
                raise TypeError(f"on_{op} answered {type(answer).__name__}, not {command.answer.__name__}")
            reply = answer.to_json()
        except SolutionFailed as exc:
            reply = Failure(error=str(exc), refused=exc.refused, multicast_off=exc.multicast_off).to_json()
        except Exception as exc:  # noqa: BLE001 - reported to the launcher, which decides
            reply = Failure(error=describe(exc)).to_json()
        channel.send({"op": op, "nonce": nonce, **reply})


def main(argv=None) -> int:
    role = (sys.argv[1:] if argv is None else argv)[0]
    if role == "judge":  # spawned by the launcher (a candidate was forked by a zygote, which armed it)
        from pkb_core.process.sessions import die_with_spawner

        die_with_spawner()
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    settings = WorkerSettings.from_environ()  # read once: nothing below reads pkb's settings from the environment
    if settings.role != role:
        raise SystemExit(f"started as {role} with a {settings.role}'s settings")
    if settings.shm_dir:  # the group's own folder for the shared-memory heap's segments
        from pkb_core.symmetric.shm import SHM_DIR_ENV

        os.environ[SHM_DIR_ENV] = settings.shm_dir
    if role == "candidate":
        import_torch_after_preloads()  # a backend's own build of a library must load before torch's
        start_keeper(settings)
    from pkb_core.contracts.messages import Ready
    from pkb_core.process.channel import WorkerChannel

    channel = WorkerChannel()
    rank, world_size, local_rank = settings.rank, settings.world_size, settings.local_rank
    device, timeout, dist = _connect(settings)
    if role == "candidate":
        store = _candidate_store(settings, timeout)
    else:
        host, port = settings.store.rsplit(":", 1)
        store = dist.TCPStore(host, int(port), world_size, is_master=False, timeout=timeout)
    run_dir = Path(settings.run_dir)
    if role == "judge":
        from pkb_core.harness.barrier import StoreBarrier
        from pkb_core.judge.rank import JudgeRank
        from pkb_core.candidate.lockdown import protect_from_peers
        from pkb_core.contracts.messages import Secret

        protect_from_peers()
        backend = "nccl" if device.type == "cuda" else "gloo"
        kwargs = {"device_id": device} if device.type == "cuda" else {}
        dist.init_process_group(backend, store=dist.PrefixStore("judge", store), rank=rank, world_size=world_size,
                                timeout=timeout, **kwargs)
        secret = Secret.from_json(channel.receive()).secret  # first message: never in the environment or on disk
        handler = JudgeRank(rank=rank, world_size=world_size, device=device, secret=secret, run_dir=run_dir,
                            barrier=StoreBarrier(store, world_size, device, prefix="pkb-timing"), store=store,
                            run_id=settings.run_id, local_world_size=settings.local_world_size)
    else:
        from pkb_core.candidate.rank import CandidateRank

        handler = CandidateRank(rank=rank, world_size=world_size, local_rank=local_rank, device=device,
                                store=store, run_id=settings.run_id, run_dir=run_dir, send_event=channel.send,
                                local_world_size=settings.local_world_size, shm_dir=settings.shm_dir,
                                sandbox_uid=settings.sandbox_uid)
        prepared = handler.prepare(settings.backend, settings.custom_kernels, settings.backend_options)
    machine = None
    if role == "judge" and rank == 0:
        from pkb_core.results.records import machine_info

        machine = machine_info(device)
    unsupported = prepared if role == "candidate" else None
    channel.send({"op": "ready", **Ready(pid=os.getpid(), unsupported=unsupported, machine=machine).to_json()})
    serve(channel, handler, role)
    return 0


if __name__ == "__main__":
    sys.exit(main())
