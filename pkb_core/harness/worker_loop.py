"""What the judge's and a candidate's worker processes share: their start (the start
settings read once, the device, the stack dump on SIGUSR1) and their command loop.

Each role's entry point is its own (:mod:`pkb_core.judge.worker`,
:mod:`pkb_core.candidate.worker`); this module holds only what both run, the same code,
and imports nothing of either side. The launcher starts the processes itself (no
torchrun): each gets its start settings
(:class:`pkb_core.contracts.worker_settings.WorkerSettings`: rank, world size, store,
run directory, backend, ...) as one environment variable, its commands on standard
input and a reply pipe (:mod:`pkb_core.process.channel`).

The launcher sends SIGUSR1 before it kills a stuck worker: the worker then
writes every thread's Python stack into the log, which names where it hung.
"""
from __future__ import annotations

import faulthandler
import os
import signal
from datetime import timedelta

from pkb_core.contracts.worker_settings import WorkerSettings


def begin(role: str) -> WorkerSettings:
    """This process's start settings (read once: nothing after reads pkb's settings from the
    environment), checked to be ``role``'s; the stack dump on SIGUSR1; the group's own folder
    for the shared-memory heap's segments."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    settings = WorkerSettings.from_environ()
    if settings.role != role:
        raise SystemExit(f"started as {role} with a {settings.role}'s settings")
    if settings.shm_dir:
        from pkb_core.symmetric.shm import SHM_DIR_ENV

        os.environ[SHM_DIR_ENV] = settings.shm_dir
    return settings


def connect(settings: WorkerSettings):
    """``(device, store timeout, torch.distributed)``: this rank's device picked (on CPU one thread,
    on the core of its local rank: :mod:`pkb_core.machine.placement`, before gloo starts the threads
    that inherit it)."""
    import torch
    import torch.distributed as dist

    if settings.device_type == "cuda":
        device = torch.device("cuda", settings.local_rank)
        torch.cuda.set_device(device)
    else:
        from pkb_core.machine.placement import place_cpu_rank

        device = torch.device("cpu")
        torch.set_num_threads(1)
        place_cpu_rank(settings.local_rank)
    return device, timedelta(seconds=settings.store_timeout), dist


def ready(channel, *, unsupported=None, machine=None) -> None:
    """Tell the launcher this process is ready for commands."""
    from pkb_core.contracts.messages import Ready

    channel.send({"op": "ready", **Ready(pid=os.getpid(), unsupported=unsupported, machine=machine).to_json()})


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
