"""The launcher's side of the zygotes (:mod:`pkb_core.launch.zygote`): one fork server per
launch and backend on this node, started once, asked for a fresh candidate group per job
(a process for each local rank), and, where the launch builds its solutions, for their
builders. A forked child is a :class:`pkb_core.launch.ranks.RankGroup` worker like any
other; its exit status comes from the zygote that reaped it.

One zygote, not one per rank: every rank's child starts from the same imported state
(the rank is in its settings, never in the zygote), and each zygote is a Python that
imported torch and the backend, about 2.5 CPU-seconds that a launch paid once per rank."""
from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from pkb_core.contracts.fork import ForkRequest, ZygoteEnvironment, ZygoteRequest
from pkb_core.contracts.outcome import JobEnded
from pkb_core.contracts.verdict import Verdict
from pkb_core.launch.ranks import _Worker, wait_for_exit
from pkb_core.process.channel import LineReader


class _Forked:
    """A zygote's child: its exit status comes from the zygote, which reaped it."""

    def __init__(self, zygote: "_Zygote", pid: int):
        self.zygote = zygote
        self.pid = pid

    def poll(self):
        self.zygote.read_exits()
        return self.zygote.exits.get(self.pid)

    def wait(self, timeout: float | None = None):
        return wait_for_exit(self.poll, 3600.0 if timeout is None else timeout)


class _Zygote:
    """A fork server process (:mod:`pkb_core.launch.zygote`) and its control socket: started
    for itself, or forked by ``base`` (a :class:`ZygoteBase`) where that one :meth:`forks
    <ZygoteBase.forks>` its environment."""

    def __init__(self, backend: str, env: dict, log, base: "ZygoteBase | None" = None, startup_s: float = 180.0):
        from pkb_core.process.reaper import spawned
        from pkb_core.process.sessions import spawner_environment

        self.sock, child = socket.socketpair()
        if base is not None and base.forks(env):
            try:  # the zygote's environment follows on its own socket, never through the base
                self.proc = base.fork_zygote(backend, child, time.monotonic() + startup_s)
            finally:
                child.close()
            try:
                self.sock.sendall(json.dumps(ZygoteEnvironment(env=env).to_json()).encode() + b"\n")
            except OSError:
                pass  # it died at once: waiting for it to be ready names its exit status
        else:
            env = dict(env, PKB_ZYGOTE_FD=str(child.fileno()), **spawner_environment())
            self.proc = subprocess.Popen([sys.executable, "-m", "pkb_core.launch.zygote", backend], stdout=log,
                                         stderr=subprocess.STDOUT, env=env, pass_fds=(child.fileno(),),
                                         start_new_session=True)
            spawned(self.proc.pid)
            child.close()
        self.reader = LineReader(self.sock.fileno())
        #: Held while the control socket is read or written: a service's compile threads share a zygote.
        self.lock = threading.RLock()
        self.exits: dict = {}
        self.pending: list = []
        self.ready = False
        #: Why the backend cannot run in this group, as its processes said when ready (None: it can).
        self.unsupported = None

    def _wait_for(self, deadline: float, want) -> dict:
        """Read until a message satisfying ``want`` arrives (recording exits on the way)."""
        while True:
            for message in self.pending:
                if want(message):
                    self.pending.remove(message)
                    return message
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.reader.closed:
                try:  # a closed socket is an exit under way: wait a moment to name its status
                    code = self.proc.wait(timeout=5) if self.reader.closed else self.proc.poll()
                except subprocess.TimeoutExpired:
                    code = None
                raise JobEnded(Verdict.ERROR, "a zygote (a fork server of the launch's processes) "
                                        + ("did not answer" if code is None else f"exited with status {code}"))
            with selectors.DefaultSelector() as waiting:
                waiting.register(self.sock.fileno(), selectors.EVENT_READ)
                waiting.select(timeout=min(remaining, 1.0))
            self._take(self.reader.read_messages())

    def _take(self, messages):
        """Record exits and keep other messages, in the order the zygote sent them."""
        for message in messages:
            if "exited" in message:
                self.exits[message["exited"]] = message["code"]
                continue
            if "pid" in message:
                # A new child: an exit of its pid read so far was an earlier child's, which the
                # zygote reaped before the kernel could give the pid again (pids wrap within
                # minutes on a busy machine; that stale exit read as this child's death)
                self.exits.pop(message["pid"], None)
            self.pending.append(message)

    def read_exits(self):
        with self.lock:
            self._take(self.reader.read_messages())

    def stop(self) -> None:
        """Close its socket and kill its session (it and whatever it has not reaped)."""
        self.sock.close()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:  # a forked zygote's exit is reported by its base, which may be gone
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def wait_ready(self, deadline: float) -> None:
        """Return once the zygote has imported what it imports (at once after the first time)."""
        with self.lock:
            if not self.ready:
                self._wait_for(deadline, lambda m: "ready" in m)
                self.ready = True

    def fork(self, request: ForkRequest | ZygoteRequest, fds: list, deadline: float) -> int:
        """A new child as ``request`` says, handed ``fds`` (in the order ``request.fds`` names them)."""
        with self.lock:
            self.wait_ready(deadline)
            socket.send_fds(self.sock, [json.dumps(request.to_json()).encode() + b"\n"], fds)
            return self._wait_for(deadline, lambda m: "pid" in m)["pid"]


def fork_builder(zygote: _Zygote, request: bytes, log, reply_fd: int, environment: dict, containment,
                 deadline: float) -> _Forked:
    """A builder (:mod:`pkb_core.compile.builder`) forked by ``zygote``, as a
    :attr:`BuildPhase.starter <pkb_core.compile.phase.BuildPhase.starter>` starts one: ``request``
    (the build request's line) on its standard input, its answer on ``reply_fd``, its output in
    ``log``, ``environment`` (what builders get over the zygote's: ``MAX_JOBS``, the device's
    mode) set, and in ``containment``'s cgroup and network before it reads its request, so
    before any of the solution's code runs."""
    child_stdin, stdin = os.pipe()
    log_fd = os.dup(log.fileno())
    try:
        names, fds = ["stdin", "reply", "output"], [child_stdin, reply_fd, log_fd]
        if containment.netns_fd is not None:
            names.append("netns")
            fds.append(containment.netns_fd)
        fork = ForkRequest(role="builder", env={"PYTHONUNBUFFERED": "1", **environment}, fds=names,
                           cgroup=containment.procs_files(), own_ipc=containment.own_ipc)
        pid = zygote.fork(fork, fds, deadline)
    except BaseException:
        os.close(stdin)
        raise
    finally:
        os.close(child_stdin)
        os.close(log_fd)
    with os.fdopen(stdin, "wb") as pipe:
        pipe.write(request)
    return _Forked(zygote, pid)


def _fork_worker(zygote: _Zygote, rank: int, request: ForkRequest, fds: list, deadline: float) -> _Worker:
    """A rank's process forked by ``zygote`` as ``request`` says, with a new command pipe and reply
    pipe as its first two descriptors (``request.fds`` names them first) and then ``fds``."""
    child_stdin, stdin = os.pipe()
    reply_read, reply_write = os.pipe()
    try:
        pid = zygote.fork(request, [child_stdin, reply_write, *fds], deadline)
    except BaseException:
        os.close(stdin)
        os.close(reply_read)
        raise
    finally:
        os.close(child_stdin)
        os.close(reply_write)
    return _Worker(rank, _Forked(zygote, pid), os.fdopen(stdin, "wb"), reply_read)


class Zygotes:
    """The candidate side's fork server of one launch and backend on this node (see
    :mod:`pkb_core.launch.zygote`).

    :param ranks: this node's global ranks, in local-rank order.
    :param backend: the backend whose modules the zygote imports once.
    :param env: the zygote's environment (its children's, but for their settings).
    :param base: the launch's :class:`ZygoteBase`, which forks the zygote where it can (None: started
        for itself).
    """

    def __init__(self, ranks, backend: str, *, env: dict, log_path: Path, startup_s: float,
                 base: "ZygoteBase | None" = None):
        self.ranks = list(ranks)
        self.startup_s = startup_s
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        self.log = open(log_path, "ab")
        self.zygote = _Zygote(backend, env, self.log, base, startup_s)

    def fork_workers(self, settings, log_path: Path | None = None, keeper_fds=(), containment=None) -> list:
        """One fresh candidate process per local rank, each with ``settings``
        (:class:`pkb_core.contracts.worker_settings.WorkerSettings`, the group's) for its rank.

        :param log_path: the group's own log, its processes' standard output
            and error (else the launch log): a candidate writes no other
            job's log, nor the launch's.
        :param keeper_fds: the group's store keeper's listening socket and report
            pipe; they go to global rank 0, which forks the keeper
            (:mod:`pkb_core.keeper`).
        :param containment: the group's :class:`pkb_core.launch.containment.Containment`
            (each rank's cgroup, the group's network namespace, the log cap), if any."""
        workers = []
        log_fd = os.open(log_path or self.log.name, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        try:
            for local, rank in enumerate(self.ranks):
                names, fds = ["output"], [log_fd]
                if rank == 0 and keeper_fds:
                    names += ["keeper_listen", "keeper_report"]
                    fds += list(keeper_fds)
                cgroup, log_cap, pump_cgroup, own_ipc = (), None, (), False
                if containment is not None:
                    own_ipc = containment.own_ipc
                    cgroup, log_cap = containment.procs_files(local), containment.log_cap_per_rank
                    pump_cgroup = containment.pump_procs_files()
                    if containment.netns_fd is not None:
                        names.append("netns")
                        fds.append(containment.netns_fd)
                request = ForkRequest(role="candidate", env=settings.for_rank(rank, local).environ(),
                                      fds=["stdin", "reply", *names], cgroup=cgroup, log_cap=log_cap,
                                      pump_cgroup=pump_cgroup, own_ipc=own_ipc)
                workers.append(_fork_worker(self.zygote, rank, request, fds, time.monotonic() + self.startup_s))
        finally:
            os.close(log_fd)
        return workers

    def stop(self) -> None:
        self.zygote.stop()
        self.log.close()


class JudgeZygote:
    """The fork server of a launch's judge ranks on this node (``python -m
    pkb_core.launch.zygote --judge``), started with the judge's first group.

    :param env: the judge ranks' environment (the launcher's own: :meth:`Launch.node_env
        <pkb_core.launch.launcher.Launch.node_env>`), their settings aside.
    :param base: the launch's :class:`ZygoteBase`, which forks the zygote where it can (None: started
        for itself).
    """

    def __init__(self, *, env: dict, log, startup_s: float, base: "ZygoteBase | None" = None):
        from pkb_core.launch.zygote import JUDGE

        self.startup_s = startup_s
        self.log = log
        self.zygote = _Zygote(JUDGE, env, log, base, startup_s)

    def fork_workers(self, settings, ranks) -> list:
        """A judge rank for each of ``ranks`` (this node's global ranks, in local-rank order),
        each in a session of its own with its rank's part of ``settings`` (the judge's
        :class:`pkb_core.contracts.worker_settings.WorkerSettings`), its output the launch log."""
        return [_fork_worker(self.zygote, rank, ForkRequest(role="judge", env=settings.for_rank(rank, local).environ(),
                                                           fds=["stdin", "reply", "output"]),
                             [self.log.fileno()], time.monotonic() + self.startup_s)
                for local, rank in enumerate(ranks)]

    def stop(self) -> None:
        self.zygote.stop()
        self.log.close()


class ZygoteBase:
    """A launch's base on this node (``python -m pkb_core.launch.zygote --base``): one Python that
    imported torch, from which the launch's zygotes are forked instead of each starting Python and
    importing torch again (about 3 CPU-seconds each on a CPU machine).

    It is started with the candidates' environment (``env``: pkb's allow-list, no preload) and
    never sees another: a zygote forked from it reads its own environment on its own socket.

    :param env: the base's environment.
    :param log_path: the launch log, its output and its zygotes'.
    """

    #: What a process reads of its environment as it starts, before any line of pkb runs (the
    #: interpreter's settings, the dynamic loader's, the C library's): a zygote whose environment
    #: differs from the base's in one of these must start for itself.
    STARTUP = ("PYTHON", "LD_", "GLIBC_", "MALLOC_")

    def __init__(self, *, env: dict, log_path: Path):
        from pkb_core.launch.zygote import BASE

        self.env = dict(env)
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        self.log = open(log_path, "ab")
        self.server = _Zygote(BASE, self.env, self.log)

    def forks(self, env: dict) -> bool:
        """Whether a zygote with ``env`` can be forked from this base: ``env`` holds the base's
        variables unchanged, and the others are none that is read at start-up (:data:`STARTUP`)
        nor a preload (a preloaded library must load before torch)."""
        from pkb_core.plugin.preload import PRELOAD_ENV

        if any(env.get(name) != value for name, value in self.env.items()):
            return False
        added = env.keys() - self.env.keys()
        return not any(name.startswith(self.STARTUP) or name == PRELOAD_ENV for name in added)

    def fork_zygote(self, kind: str, control: socket.socket, deadline: float) -> _Forked:
        """A new zygote of ``kind`` (a backend, or ``--judge``), whose control socket is ``control``;
        its environment is the caller's to send on the other end."""
        return _Forked(self.server, self.server.fork(ZygoteRequest(kind=kind), [control.fileno()], deadline))

    def stop(self) -> None:
        """Kill the base (its zygotes are stopped first: :meth:`Launch.stop_zygotes
        <pkb_core.launch.launcher.Launch.stop_zygotes>`; any left die with it)."""
        self.server.stop()
        self.log.close()
