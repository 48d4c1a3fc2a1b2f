"""Fresh candidate processes in milliseconds: fork servers, one of each kind per launch.

Every job gets new candidate processes (nothing of one candidate may reach the
next job), but starting Python and importing torch and a backend takes seconds
per process. A *zygote* pays that once per launch: it imports the harness and
the backend's modules, and then only forks. It never imports a
solution, never initialises CUDA (a process that did cannot fork usable
children) and never runs a job itself, so every child starts from the same
clean state. The child puts itself in a new session (its own process group,
which the launcher freezes and kills), takes the command and reply pipes the
launcher sent along, and becomes a candidate worker (:mod:`pkb_core.candidate.worker`).

The zygote reaps its children and reports each exit status to the launcher,
which needs it to name the signal a crashed candidate died of.

A launch's judge ranks come from a zygote of their own, ``python -m pkb_core.launch.zygote
--judge`` (:class:`pkb_core.launch.zygotes.JudgeZygote`): it has the launcher's environment and
imports the judge's modules, never a backend's, so nothing the candidate side preloads or is
handed reaches the judge, and nothing the judge is handed (its store's token, the launcher's
environment) is in the memory that candidates are forked from. Its children become judge ranks
(:mod:`pkb_core.judge.worker`) in sessions of their own, in no job's cgroup.

A launch's zygotes are forked from its *base* (``python -m pkb_core.launch.zygote --base``,
:func:`serve_base`), the one process of the launch that starts Python and imports torch; a zygote
whose environment the base cannot give it is started as ``python -m pkb_core.launch.zygote BACKEND``
(or ``--judge``). Protocol on the zygote's
control socket (a socketpair with the launcher): a
:class:`pkb_core.contracts.fork.ForkRequest` line (the role, the candidate's
:class:`pkb_core.contracts.worker_settings.WorkerSettings` and rank variables, the
cgroup to join, the log cap) with the descriptors it names attached (the child's
stdin, its reply pipe, its output; for global rank 0 also its group's store
keeper's listening socket and report pipe, :func:`pkb_core.keeper.process.start_keeper`;
the group's network namespace) -> ``{"pid": N}``; ``{"exited": N, "code": C}``
whenever a child ends (``C`` negative for a signal, as ``subprocess`` reports it).

The child's first acts, before any of pkb's worker code: its own session, death
with the zygote, its cgroup (every process it forks is then the job's, the store
keeper and the log pump included: :mod:`pkb_core.process.cgroups`), its group's
network namespace (:mod:`pkb_core.process.netns`), its output through a capped
pump (:mod:`pkb_core.process.log_cap`).

The zygote is the child subreaper of its children (:mod:`pkb_core.process.reaper`):
a process a candidate forked and left behind becomes the zygote's child when its
parent dies, still in the job's cgroup, and is reaped here when it ends.
"""
from __future__ import annotations

import gc
import json
import os
import selectors
import signal
import socket
import sys

from pkb_core.contracts.fork import DESCRIPTORS, ForkRequest, ZygoteEnvironment, ZygoteRequest
from pkb_core.process.sessions import die_with_parent


#: The argument that makes a judge zygote (its children are judge ranks).
JUDGE = "--judge"
#: The argument that makes a launch's base, which forks its zygotes (:func:`serve_base`).
BASE = "--base"


def _warm_imports(backend: str) -> None:
    """Import what every candidate of ``backend`` imports, without touching a GPU."""
    import torch  # noqa: F401
    import torch.distributed  # noqa: F401

    import pkb_core.compile.builder  # noqa: F401 - a zygote of the service's compile pool forks builders
    import pkb_core.candidate.rank  # noqa: F401
    import pkb_core.candidate.sealed  # noqa: F401
    from pkb_core.plugin.manager import get_plugin_manager

    get_plugin_manager(backend=backend)  # the backend's plugin module
    try:
        import triton  # noqa: F401 - most backends' solutions use it; importing initialises no device

        import pkb_core.harness.barrier_kernel  # noqa: F401 - every timed candidate makes a device barrier
    except Exception:  # noqa: BLE001
        pass


def _warm_judge_imports() -> None:
    """Import what a judge rank imports before its first job, without touching a GPU."""
    import torch  # noqa: F401
    import torch.distributed  # noqa: F401

    import pkb_core.judge.rank  # noqa: F401
    import pkb_core.judge.worker  # noqa: F401


def serve(sock: socket.socket, backend: str) -> int:
    """Fork children on ``sock``'s requests until the launcher goes away; ``backend`` names the
    modules to import first (:data:`JUDGE` for a judge zygote)."""
    if backend == JUDGE:
        _warm_judge_imports()
    else:
        _warm_imports(backend)
    _settle()
    zygote = os.getpid()

    def request_of(line: bytes) -> ForkRequest:
        request = ForkRequest.from_json(json.loads(line))
        if (request.role == "judge") != (backend == JUDGE):  # the two kinds never mix
            raise SystemExit(f"pkb: a {backend} zygote was asked for a {request.role}")
        return request

    return _fork_on_requests(sock, request_of, lambda request, fds: _become(sock, request, fds, zygote),
                             len(DESCRIPTORS))


def serve_base(sock: socket.socket) -> int:
    """A launch's base (``python -m pkb_core.launch.zygote --base``): import torch once, then fork a
    zygote (:func:`serve`) on each :class:`pkb_core.contracts.fork.ZygoteRequest`, until the launcher
    goes away.

    The base is started with the candidates' environment (pkb's allow-list, no preload) and reads
    nothing but the kind of each zygote, so whatever it holds any zygote may hold. A judge's zygote
    forked from it takes the launcher's environment from its own control socket, in its own memory;
    a zygote forked later never sees it. The launcher forks only the zygotes whose environment
    differs from the base's in variables read after start-up
    (:meth:`pkb_core.launch.zygotes.ZygoteBase.forks`): a backend that preloads a library gets a
    zygote of its own making, since the library must load before torch."""
    import torch  # noqa: F401
    import torch.distributed  # noqa: F401

    _settle()
    base = os.getpid()

    def request_of(line: bytes) -> ZygoteRequest:
        return ZygoteRequest.from_json(json.loads(line))

    return _fork_on_requests(sock, request_of, lambda request, fds: _become_zygote(sock, request, fds, base), 1)


def _settle() -> None:
    """Make this process fit to fork from: out of its peers' reach, its imports out of the
    collector's sight."""
    from pkb_core.confine.lockdown import protect_from_peers

    # No candidate may write into this process's memory (through /proc) and so
    # into every later job's processes; the children inherit the setting.
    protect_from_peers()
    # What was imported is never freed: out of the collector's sight, a child's collections
    # neither walk it nor write its objects' headers, which would copy every page of it.
    gc.collect()
    gc.freeze()


def _fork_on_requests(sock: socket.socket, request_of, become, max_fds: int) -> int:
    """Say ready, then for each request line on ``sock`` (``request_of(line)``, in this process)
    fork a child that runs ``become(request, fds)`` and never returns; answer ``{"pid": N}``, and
    ``{"exited": N, "code": C}`` when a child ends. Returns when the launcher goes away."""
    sock.sendall(b'{"ready": true}\n')
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    buffer = b""
    children = set()
    while True:
        for _key, _ in selector.select(timeout=0.05):
            try:
                data, fds, _flags, _addr = socket.recv_fds(sock, 1 << 16, max_fds)
            except OSError:
                data, fds = b"", []
            if not data:
                return 0  # the launcher went away
            buffer += data
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                request = request_of(line)
                pid = os.fork()
                if pid == 0:
                    become(request, fds)  # never returns
                for fd in fds:
                    os.close(fd)
                children.add(pid)
                sock.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        # Every child of this process is reaped: its own, and the orphans it adopted.
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if not pid:
                break
            if pid in children:
                children.discard(pid)
                code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
                sock.sendall(json.dumps({"exited": pid, "code": code}).encode() + b"\n")


def _become_zygote(base_sock, request: ZygoteRequest, fds, base: int) -> None:
    """A zygote forked by the base: its own session, death with the base, the environment that
    comes first on its control socket (``fds[0]``), then :func:`serve`."""
    code = 1
    try:
        base_sock.close()
        os.setsid()
        die_with_parent(base)
        from pkb_core.process.reaper import become_subreaper

        become_subreaper()  # not inherited across fork
        sock = socket.socket(fileno=fds[0])
        environment = ZygoteEnvironment.from_json(json.loads(_first_line(sock)))
        os.environ.clear()
        os.environ.update(environment.env)
        code = serve(sock, request.kind)
    except BaseException:  # noqa: BLE001 - report and leave; never return into the base's loop
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _first_line(sock: socket.socket) -> bytes:
    """The first line on ``sock``: the launcher sends nothing more until this zygote is ready."""
    data = b""
    while b"\n" not in data:
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise SystemExit("pkb: the launcher went away before it sent the zygote's environment")
        data += chunk
    line, rest = data.split(b"\n", 1)
    if rest:
        raise SystemExit("pkb: the launcher sent more than the zygote's environment before it was ready")
    return line


def _become(sock, request: ForkRequest, fds, zygote: int) -> None:
    """The child's life: a candidate worker (:mod:`pkb_core.candidate.worker`), a builder
    (:mod:`pkb_core.compile.builder`: its request on the standard input, its answer on the
    reply pipe) or, from a judge zygote, a judge rank (:mod:`pkb_core.judge.worker`)."""
    code = 1
    try:
        sock.close()
        os.setsid()
        die_with_parent(zygote)  # a zygote ends with its launcher, and takes its children along
        named = dict(zip(request.fds, fds))
        if request.cgroup:
            from pkb_core.process.cgroups import join_cgroup

            try:
                join_cgroup(request.cgroup)  # first: whatever it starts from here on is the job's
            except OSError as exc:
                print(f"pkb: could not join the job's cgroup ({exc})", file=sys.stderr, flush=True)
        if "netns" in named:
            from pkb_core.process.netns import enter

            try:
                enter(named["netns"])
            except OSError as exc:
                print(f"pkb: {exc}", file=sys.stderr, flush=True)
            os.close(named["netns"])
        if request.own_ipc:  # a rank or a builder: a solution's code runs in it
            from pkb_core.process.ipcns import own_ipc_namespace

            try:
                own_ipc_namespace()
            except OSError as exc:
                print(f"pkb: {exc}", file=sys.stderr, flush=True)
        os.dup2(named["stdin"], 0)
        os.close(named["stdin"])
        # Its own log: the launch log (the zygote's output) is no candidate's to write.
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(named["output"], 1)
        os.dup2(named["output"], 2)
        os.close(named["output"])
        if request.log_cap:
            from pkb_core.process.log_cap import cap_output

            cap_output(request.log_cap, request.pump_cgroup)
        env = dict(request.env)
        if "keeper_listen" in named:  # known only here, once the descriptors arrived: the settings say where
            import attrs

            from pkb_core.contracts.worker_settings import WorkerSettings

            settings = attrs.evolve(WorkerSettings.from_environ(env),
                                    keeper_fds=(named["keeper_listen"], named["keeper_report"]))
            env = dict(env, **{WorkerSettings.ENV: settings.environ()[WorkerSettings.ENV]})
        os.environ.update(env)
        os.environ["PKB_REPLY_FD"] = str(named["reply"])
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        if request.role == "builder":
            from pkb_core.compile.builder import main as build

            code = build()
        elif request.role == "judge":
            from pkb_core.judge.worker import main as judge

            code = judge()
        else:
            from pkb_core.candidate.worker import main

            code = main()
    except BaseException:  # noqa: BLE001 - report and leave; never return into the zygote's loop
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main() -> int:
    from pkb_core.plugin.preload import import_torch_after_preloads
    from pkb_core.process.reaper import become_subreaper
    from pkb_core.process.sessions import die_with_spawner

    die_with_spawner()  # no zygote outlives the launcher that started it, however it ends
    become_subreaper()
    import_torch_after_preloads()  # a backend's own build of a library must load before torch's
    sock = socket.socket(fileno=int(os.environ["PKB_ZYGOTE_FD"]))
    if sys.argv[1] == BASE:
        return serve_base(sock)
    return serve(sock, sys.argv[1])  # the backend whose modules its children import, or JUDGE


if __name__ == "__main__":
    sys.exit(main())
