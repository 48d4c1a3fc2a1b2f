"""The Ray actor of one group: a relay that owns the group's lane process on its node.

``pkb serve --ray`` (:class:`pkb_core.ray.placement.RayPlacement`) places a
:class:`GroupActor` in a placement group of W devices on one node. The actor
starts there the same lane process as a local service does
(``python -m pkb_core.serve.lane_process``: a warm Launch holding the run secret,
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

Builds: the service's compile pool builds every job on the service's node (its
verdict if it fails). A compiled backend's candidates load their build from the
node's build cache, so on another node the actor runs the same compile phase
for the job first (:func:`pkb_core.launch.jobs.compile_phase`: locked-down
builder processes, the outcome cache by content), as ``pkb run`` builds on
every node of a multi-node launch; an identical build is a cache hit.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import queue
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
    :param front_node: the Ray node id of the service (jobs arrive built there; elsewhere they are built again).
    """

    def __init__(self, token: str, settings: dict, log: str, front_node: str | None = None):
        import ray

        from pkb_core.serve.lane_process import start_lane_process

        self._token = token
        self._settings = settings
        self._elsewhere = front_node is not None and front_node != ray.get_runtime_context().get_node_id()
        self._results: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        # Ray set CUDA_VISIBLE_DEVICES to the GPUs of this actor's placement group: the lane sees just those.
        self._proc, read_fd = start_lane_process(settings, Path(log), {})
        threading.Thread(target=self._read, args=(read_fd,), name="pkb-lane-results", daemon=True).start()

    def _check(self, token: str) -> None:
        if not hmac.compare_digest(str(token), self._token):
            raise PermissionError("this group answers only the service that started it")

    def _write(self, message: dict) -> bool:
        from pkb_core.serve.lane_process import write_line

        with self._lock:  # calls come on several threads of the actor
            return write_line(self._proc, message)

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
            if self._elsewhere and not self._built_here(task):
                return True  # the record of a build that failed here went back as the job's result
        return self._write(task)

    def _built_here(self, task: dict) -> bool:
        """Build the task's job on this node (see the module docstring); False, with its record
        queued as the result, when it does not build here."""
        import attrs

        from pkb_core.contracts.batch import LaunchSettings
        from pkb_core.contracts.job import Job
        from pkb_core.contracts.serve import LaneResult
        from pkb_core.launch.jobs import compile_phase

        settings = attrs.evolve(LaunchSettings.from_json(self._settings), build_workers=1)
        built, records = compile_phase([Job.from_json(task["job"])], settings)
        if built:
            return True
        self._results.put({"result": LaneResult(job_id=task["job_id"], record=records[0]).to_json()})
        return False

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
        from pkb_core.serve.lane_process import stop_lane_process

        self._check(token)
        return stop_lane_process(self._proc, grace)


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
    root = Path(tempfile.gettempdir()) / "pkb-ray-sources"
    # 0700: every client's sources are here, and no job's candidate may read another's (a
    # candidate reads its own through its lockdown, which binds its solution's folder back).
    root.mkdir(mode=0o700, exist_ok=True)
    if root.stat().st_mode & 0o077:
        os.chmod(root, 0o700)
    target = root / digest / here.name
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".tmp")
        tmp.write_text(source)
        tmp.replace(target)
    return str(target)
