"""Jobs over several nodes: node 0's launcher conducts, every other node's hosts ranks.

Every node runs the same ``pkb run --nnodes N --node-rank I --rdzv-endpoint
HOST:PORT``. Node 0 (global ranks ``0 .. nproc-1``) is the launch of
:mod:`pkb_core.launch.launcher`: it holds the secret, conducts every job and writes the
records. Node ``I`` runs an :class:`Agent` that connects to ``HOST:PORT`` and,
for every group of processes the conductor starts (the judge's, each job's
candidate), starts its local ranks (``I*nproc ..``) the same way node 0
does (spawned judges, candidates forked by its own zygotes) and relays their
command and reply streams over one TCP connection each. Freezing, stopping,
the host-activity probe and exit statuses go over the agent's control
connection. The workers of every node reach the group's c10d store on node 0.

So a remote rank is, to the conductor, one more :class:`pkb_core.launch.ranks._Worker`
whose pipes happen to be a socket: the protocol, the watchdog and the judge's
rules are the same on every node.
"""
from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import socket
import time

from pkb_core.process.channel import LineReader
from pkb_core.errors import PkbError
from pkb_core.launch.ranks import _Worker, wait_for_exit
from pkb_core.launch.zygotes import JudgeZygote, Zygotes
from pkb_core.process.sessions import cpu_ms_during, signal_sessions

#: The part of a group's worker settings the conductor sends along with it (the rest, the run
#: directory included, is the node's own: :meth:`pkb_core.launch.launcher.Launch.node_env`).
FORWARDED = ("store", "store_token", "run_id", "scratch", "sandbox_uid")


def _send(sock, message: dict) -> None:
    sock.sendall((json.dumps(message) + "\n").encode())


def _read_line(sock, deadline: float) -> dict:
    """One JSON line from a blocking socket, byte by byte (what follows belongs to someone else)."""
    data = b""
    sock.settimeout(max(0.1, deadline - time.monotonic()))
    while not data.endswith(b"\n"):
        chunk = sock.recv(1)
        if not chunk:
            raise ConnectionError("closed before the first line")
        data += chunk
    sock.settimeout(None)
    return json.loads(data)


class _RemoteProc:
    """A rank on another node, as :class:`pkb_core.launch.ranks.RankGroup` polls it."""

    pid = None

    def __init__(self, conductor: "Conductor", group: str, rank: int):
        self.conductor, self.group, self.rank = conductor, group, rank

    def poll(self):
        self.conductor.read_control()
        return self.conductor.exits.get((self.group, self.rank))

    def wait(self, timeout):
        return wait_for_exit(self.poll, timeout)


class _SocketWriter:
    """The command stream of a remote rank: whole writes on a socket that its
    reply reader keeps non-blocking."""

    def __init__(self, sock):
        self.sock = sock

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[self.sock.send(view):]
            except BlockingIOError:
                with selectors.DefaultSelector() as writable:
                    writable.register(self.sock, selectors.EVENT_WRITE)
                    writable.select(1.0)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.sock.close()


class Conductor:
    """Node 0's end: the agents of the other nodes and their part of every group.

    :param endpoint: ``host:port`` this node listens on (the other nodes connect to it).
    """

    def __init__(self, endpoint: str, nnodes: int, nproc: int, *, startup_s: float):
        self.host, port = endpoint.rsplit(":", 1)
        self.nproc = nproc
        self.server = socket.create_server(("", int(port)), reuse_port=True)
        self.agents = {}
        self.exits: dict = {}
        self._busy: dict = {}
        deadline = time.monotonic() + startup_s
        while len(self.agents) < nnodes - 1:
            sock = self._accept(deadline)
            hello = _read_line(sock, deadline)
            self.agents[hello["node"]] = (sock, LineReader(sock.fileno()))

    def _accept(self, deadline):
        self.server.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            sock, _ = self.server.accept()
        except socket.timeout:
            raise PkbError("the other nodes did not connect to the rendezvous endpoint in time") from None
        sock.settimeout(None)
        return sock

    def start_group(self, role: str, group: str, forwarded: dict, *, deadline: float) -> list:
        """Have every agent start its ranks of ``group`` (``forwarded``: the group's part of
        its workers' settings); return them as workers."""
        forwarded = {k: forwarded[k] for k in FORWARDED if k in forwarded}
        for sock, _ in self.agents.values():
            _send(sock, {"op": "start", "role": role, "group": group, "env": forwarded})
        workers = []
        for _ in range(self.nproc * len(self.agents)):
            sock = self._accept(deadline)
            hello = _read_line(sock, deadline)
            workers.append(_Worker(hello["rank"], _RemoteProc(self, group, hello["rank"]), _SocketWriter(sock),
                                   sock.fileno()))
        return workers

    # -- control -----------------------------------------------------------------
    def read_control(self) -> None:
        for sock, reader in self.agents.values():
            for message in reader.read_messages():
                if "exited" in message:
                    self.exits[(message["group"], message["rank"])] = message["code"]
                elif "busy" in message:
                    self._busy.setdefault(message["group"], []).append(message["busy"])

    def signal(self, group: str, sig: int) -> None:
        for sock, _ in self.agents.values():
            _send(sock, {"op": "signal", "group": group, "sig": int(sig)})

    def request_busy(self, group: str, probe_s: float) -> None:
        self._busy[group] = []
        for sock, _ in self.agents.values():
            _send(sock, {"op": "busy", "group": group, "probe": probe_s})

    def busy(self, group: str) -> list:
        """The agents' answers to :meth:`request_busy`: ``[(rank, cpu_ms)]`` above the threshold."""
        deadline = time.monotonic() + 10
        while len(self._busy.get(group, [])) < len(self.agents) and time.monotonic() < deadline:
            time.sleep(0.002)
            self.read_control()
        return [tuple(item) for answer in self._busy.pop(group, []) for item in answer]

    def stop(self, group: str) -> None:
        for sock, _ in self.agents.values():
            _send(sock, {"op": "stop", "group": group})

    def close(self) -> None:
        for sock, _ in self.agents.values():
            try:
                _send(sock, {"op": "exit"})
                sock.close()
            except OSError:
                pass
        self.server.close()


class Agent:
    """A node other than 0: hosts its ranks of every group and relays them to the conductor."""

    def __init__(self, settings, env_for):
        """:param env_for: ``env_for(role, forwarded) -> (environment, WorkerSettings)`` of this node's workers."""
        self.settings = settings
        self.env_for = env_for
        nodes = settings.nodes
        self.ranks = list(range(nodes.node_rank * settings.nproc, (nodes.node_rank + 1) * settings.nproc))
        host, port = nodes.endpoint.rsplit(":", 1)
        self.address = (host, int(port))
        self.control = self._connect(time.monotonic() + 180)
        _send(self.control, {"node": nodes.node_rank})
        self.reader = LineReader(self.control.fileno())
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.control.fileno(), selectors.EVENT_READ, ("control", None))
        self.groups: dict = {}  # group -> list of (worker, socket)
        self.leftovers: dict = {}  # group -> (its shared-memory folder, its user, the launch's folder)
        self.zygotes = None
        self.judge_zygote = None
        logs = os.path.join(settings.run_dir, "logs")
        os.makedirs(logs, exist_ok=True)
        self.log = open(os.path.join(logs, f"node{nodes.node_rank}.log"), "ab")

    def _connect(self, deadline):
        while True:
            try:
                return socket.create_connection(self.address, timeout=5)
            except OSError:
                if time.monotonic() > deadline:
                    raise PkbError(f"node 0 did not answer at {self.address[0]}:{self.address[1]}") from None
                time.sleep(0.2)

    def serve(self) -> None:
        try:
            while True:
                for key, _ in self.selector.select(timeout=0.05):
                    kind, item = key.data
                    if kind == "control":
                        for message in self.reader.read_messages():
                            if self._obey(message) is False:
                                return
                        if self.reader.closed:
                            return
                    else:
                        self._relay(kind, item)
                for members in self.groups.values():
                    for worker, _ in members:
                        if getattr(worker, "pending", b""):
                            self._flush(worker)
                self._report_exits()
        finally:
            for group in list(self.groups):
                self._stop(group)
            for zygotes in (self.zygotes, self.judge_zygote):
                if zygotes is not None:
                    zygotes.stop()
            for _folder, _uid, launch_folder in self.leftovers.values():
                if launch_folder:
                    shutil.rmtree(launch_folder, ignore_errors=True)

    def _obey(self, message):
        op = message.get("op")
        if op == "exit":
            return False
        group = message.get("group")
        if op == "start":
            self._start(message["role"], group, message["env"])
        elif op == "signal":
            signal_sessions([w.proc.pid for w, _ in self.groups.get(group, [])], message["sig"])
        elif op == "busy":
            members = self.groups.get(group, [])
            used = cpu_ms_during(message["probe"], [w.proc.pid for w, _ in members])
            limit = message["probe"] * 1e3 / 3
            _send(self.control, {"group": group, "busy": [[w.rank, ms] for (w, _), ms in zip(members, used)
                                                          if ms > limit]})
        elif op == "stop":
            self._stop(group)
        return True

    def _start(self, role, group, forwarded):
        env, worker = self.env_for(role, forwarded)
        if role == "judge":
            if self.judge_zygote is None:
                self.judge_zygote = JudgeZygote(env=env, log=open(self.log.name, "ab"), startup_s=180)
            workers = self.judge_zygote.fork_workers(worker, self.ranks)
        else:
            if self.zygotes is None:
                self.zygotes = Zygotes(self.ranks, self.settings.backend, env=env,
                                       log_path=self.log.name, startup_s=180)
            log = os.path.join(os.path.dirname(self.log.name),
                               f"job-{forwarded.get('run_id') or group}-node{self.settings.nodes.node_rank}.log")
            workers = self.zygotes.fork_workers(worker, log_path=log)
        # What the group leaves on this node: its shared-memory folder, files of its user.
        self.leftovers[group] = (worker.shm_dir, worker.sandbox_uid, forwarded.get("scratch"))
        members = []
        for worker in workers:
            sock = self._connect(time.monotonic() + 60)
            _send(sock, {"group": group, "rank": worker.rank})
            members.append((worker, sock))
            self.selector.register(sock.fileno(), selectors.EVENT_READ, ("to-worker", (worker, sock)))
            self.selector.register(worker.reader.fd, selectors.EVENT_READ, ("to-conductor", (worker, sock)))
        self.groups[group] = members

    def _relay(self, direction, member):
        worker, sock = member
        try:
            if direction == "to-worker":
                data = sock.recv(1 << 16)
                if data:
                    # Queued, never a blocking write: a frozen worker reads nothing until the
                    # conductor's SIGCONT, which comes on the control connection.
                    worker.pending = getattr(worker, "pending", b"") + data
                    self._flush(worker)
                    return
            else:
                data = os.read(worker.reader.fd, 1 << 16)
                if data:
                    sock.sendall(data)
                    return
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            pass
        self._unregister(member)  # one side closed: the other side sees it through the exit report

    def _flush(self, worker) -> None:
        fd = worker.stdin.fileno()
        os.set_blocking(fd, False)
        try:
            while worker.pending:
                worker.pending = worker.pending[os.write(fd, worker.pending):]
        except BlockingIOError:
            pass
        except OSError:
            worker.pending = b""

    def _unregister(self, member):
        worker, sock = member
        for fd in (sock.fileno(), worker.reader.fd):
            try:
                self.selector.unregister(fd)
            except (KeyError, ValueError):
                pass

    def _report_exits(self):
        for group, members in self.groups.items():
            for worker, _ in members:
                if getattr(worker, "reported", False):
                    continue
                code = worker.proc.poll()
                if code is not None:
                    worker.reported = True
                    _send(self.control, {"exited": True, "group": group, "rank": worker.rank, "code": code})

    def _stop(self, group):
        from pkb_core.launch.scratch import sweep_owned

        members = self.groups.pop(group, [])
        folder, uid, _ = self.leftovers.get(group, (None, None, None))
        for sig in (signal.SIGKILL, signal.SIGCONT):
            signal_sessions([w.proc.pid for w, _ in members], sig)
        for member in members:
            worker, sock = member
            self._unregister(member)
            worker.proc.wait(10)
            for close in (sock.close, worker.stdin.close, lambda: os.close(worker.reader.fd)):
                try:
                    close()
                except OSError:
                    pass
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
        if uid:
            sweep_owned(int(uid))
