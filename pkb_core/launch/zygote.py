"""Fresh candidate processes in milliseconds: one fork server per rank.

Every job gets new candidate processes (nothing of one candidate may reach the
next job), but starting Python and importing torch and a backend takes seconds
per process. A *zygote* pays that once per launch: it imports torch, the
harness and the backend's modules, and then only forks. It never imports a
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

Started as ``python -m pkb_core.launch.zygote BACKEND``. Protocol on the zygote's
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

import json
import os
import selectors
import signal
import socket
import sys

from pkb_core.contracts.fork import DESCRIPTORS, ForkRequest
from pkb_core.process.sessions import die_with_parent


#: The argument that makes a judge zygote (its children are judge ranks).
JUDGE = "--judge"


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
    from pkb_core.confine.lockdown import protect_from_peers

    if backend == JUDGE:
        _warm_judge_imports()
    else:
        _warm_imports(backend)
    # No candidate may write into this process's memory (through /proc) and so
    # into every later job's processes; the children inherit the setting.
    protect_from_peers()
    sock.sendall(b'{"ready": true}\n')
    zygote = os.getpid()
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    buffer = b""
    children = set()
    while True:
        for _key, _ in selector.select(timeout=0.05):
            try:
                data, fds, _flags, _addr = socket.recv_fds(sock, 1 << 16, len(DESCRIPTORS))
            except OSError:
                data, fds = b"", []
            if not data:
                return 0  # the launcher went away
            buffer += data
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                request = ForkRequest.from_json(json.loads(line))
                if (request.role == "judge") != (backend == JUDGE):  # the two kinds never mix
                    raise SystemExit(f"pkb: a {backend} zygote was asked for a {request.role}")
                pid = os.fork()
                if pid == 0:
                    _become(sock, request, fds, zygote)  # never returns
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
    return serve(sock, sys.argv[1])  # the backend whose modules its children import, or JUDGE


if __name__ == "__main__":
    sys.exit(main())
