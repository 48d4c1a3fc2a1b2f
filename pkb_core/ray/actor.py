"""The Ray actor of one group: a relay that owns the group's lane process on its node.

``pkb serve --ray`` (:class:`pkb_core.ray.placement.RayPlacement`) places a
:class:`GroupActor` in a placement group of W devices on one node. The actor
starts there the same lane process as a local service does
(``python -m pkb_core.serve.lane``: a warm Launch holding the run secret,
the judge's ranks, the zygotes and the next job's fresh candidate group) and
relays :class:`~pkb_core.contracts.serve.LaneTask` to it and its
:class:`~pkb_core.contracts.serve.LaneResult` lines back. It runs no solution
code and holds no secret of the run: those stay in the lane, exactly as on one
node (docs/trust.md).

Authentication: the service creates the actor with a token of its own. Every
call must carry it (a driver that finds the actor cannot feed it jobs), and
every result comes back with an HMAC of the token over it, which the service
checks before it reads the result (:func:`seal`, :func:`opened`).

The lane process dies with the actor (its ``PR_SET_PDEATHSIG``), so a killed
actor or a node that leaves takes its candidates with it.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

#: Seconds the lane may take to stop its groups when the actor is told to stop.
STOP_GRACE_S = 30.0


def seal(token: str, payload: dict) -> dict:
    """``payload`` with the token's HMAC over its canonical JSON."""
    text = json.dumps(payload, sort_keys=True)
    return {"payload": text, "mac": hmac.new(token.encode(), text.encode(), hashlib.sha256).hexdigest()}


def opened(token: str, sealed: dict) -> dict | None:
    """The payload of a :func:`seal`, or None when its HMAC is not the token's."""
    text = sealed.get("payload", "")
    expected = hmac.new(token.encode(), text.encode(), hashlib.sha256).hexdigest()
    return json.loads(text) if hmac.compare_digest(expected, str(sealed.get("mac", ""))) else None


class GroupActor:
    """See the module docstring. Wrapped with ``ray.remote`` by the placement (this module imports no Ray).

    :param token: what every call must carry, and the key of the results' HMAC.
    :param settings: the lane's :class:`~pkb_core.contracts.batch.LaunchSettings` as JSON.
    :param log: the lane's log on this node (the service's path; made here when missing).
    """

    def __init__(self, token: str, settings: dict, log: str):
        from pkb_core.serve.lane import LANE_FD_ENV

        self._token = token
        self._results: queue.Queue = queue.Queue()
        read_fd, write_fd = os.pipe()
        # Ray set CUDA_VISIBLE_DEVICES to the GPUs of this actor's placement group: the lane sees just those.
        env = dict(os.environ, **{LANE_FD_ENV: str(write_fd)}, PYTHONUNBUFFERED="1")
        Path(log).parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            self._proc = subprocess.Popen([sys.executable, "-m", "pkb_core.serve.lane"], stdin=subprocess.PIPE,
                                          stdout=out, stderr=subprocess.STDOUT, env=env, pass_fds=(write_fd,))
        os.close(write_fd)
        self._lock = threading.Lock()
        self._write(settings)
        threading.Thread(target=self._read, args=(read_fd,), name="pkb-lane-results", daemon=True).start()

    def _check(self, token: str) -> None:
        if not hmac.compare_digest(str(token), self._token):
            raise PermissionError("this group answers only the service that started it")

    def _write(self, message: dict) -> bool:
        with self._lock:
            try:
                self._proc.stdin.write((json.dumps(message) + "\n").encode())
                self._proc.stdin.flush()
                return True
            except (BrokenPipeError, OSError, ValueError):
                return False

    def _read(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as stream:
            for line in stream:
                try:
                    self._results.put({"result": json.loads(line)})
                except ValueError:
                    self._results.put({"malformed": line[:200].decode(errors="replace")})
        self._results.put({"ended": self._proc.wait()})

    # -- the service's calls ------------------------------------------------------------
    def where(self, token: str) -> dict:
        """The node it runs on (for the service's view of its groups)."""
        import ray

        self._check(token)
        context = ray.get_runtime_context()
        return {"node_id": context.get_node_id(), "ip": ray.util.get_node_ip_address(), "pid": os.getpid()}

    def run(self, token: str, task: dict, source: str | None) -> bool:
        """Hand the lane a :class:`~pkb_core.contracts.serve.LaneTask`; ``source`` is the solution's
        text, written on this node when the service's file is not here (another node)."""
        self._check(token)
        job = task.get("job")
        if job and job.get("solution") and source is not None:
            job["solution"] = _solution_here(job["solution"], source)
        return self._write(task)

    def cancel(self, token: str, job_id: str) -> bool:
        self._check(token)
        return self._write({"job_id": job_id, "cancel": True})

    def next_result(self, token: str, timeout: float) -> dict | None:
        """The lane's next message, sealed (None after ``timeout`` s without one): ``{"result": LaneResult
        JSON}``, ``{"malformed": text}``, or ``{"ended": exit status}`` once the lane process has ended."""
        self._check(token)
        try:
            return seal(self._token, self._results.get(timeout=timeout))
        except queue.Empty:
            return None

    def stop(self, token: str, grace: float = STOP_GRACE_S) -> int | None:
        """End the lane's input (it stops after the running job); terminate it if it lingers."""
        self._check(token)
        try:
            self._proc.stdin.close()
        except OSError:
            pass
        try:
            return self._proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self._proc.terminate()  # the lane's SIGTERM handler stops its groups
            try:
                return self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                return self._proc.wait()


def _solution_here(path: str, source: str) -> str:
    """A path on this node holding ``source``: the service's own path when it is here with that
    text (one machine, a shared file system), else written under the node's temporary folder."""
    here = Path(path)
    try:
        if here.read_text() == source:
            return path
    except OSError:
        pass
    digest = hashlib.sha256(source.encode()).hexdigest()
    target = Path(tempfile.gettempdir()) / "pkb-ray-sources" / digest / here.name
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".tmp")
        tmp.write_text(source)
        tmp.replace(target)
    return str(target)
