"""A lane process: the process that holds one warm group of the reward service (its
handle in the service is a :class:`pkb_core.serve.protocols.Lane`).

``python -m pkb_core.serve.lane_process`` is started by the service
(:class:`pkb_core.serve.local_lane.LocalLane`) for one backend, world size and job
timeout on a fixed set of devices. It is a launcher like ``pkb run``'s
(:class:`pkb_core.launch.launcher.Launch`: it holds the run secret, conducts the
jobs and writes their records), fed one job at a time: between jobs its judge's
ranks, its zygotes and the next job's fresh candidate group stay up, so a job
costs its own work. Every candidate still gets fresh, sealed processes
(docs/trust.md): the lane changes only when they start.

Its standard input carries :class:`~pkb_core.contracts.serve.LaneTask` lines
(the first line is the launch's settings); its answers,
:class:`~pkb_core.contracts.serve.LaneResult` lines, go to the descriptor in
``PKB_LANE_FD``; everything else it or its workers print goes to its log.
End of input ends the lane after the running job. A lane dies with the
service (``PR_SET_PDEATHSIG``), stopping its groups on the way.
"""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

from pkb_core.contracts.batch import LaunchSettings
from pkb_core.contracts.serve import LaneResult, LaneTask
from pkb_core.launch.feed import JobFeed
from pkb_core.plugin.reporter import Reporter
from pkb_core.process.channel import send_line

LANE_FD_ENV = "PKB_LANE_FD"
#: Seconds a lane may take to finish its job and stop when told to.
STOP_GRACE_S = 30.0


class TaskFeed(JobFeed):
    """Jobs from the service, as they come; cancels are acted on at once (by the reader thread)."""

    def __init__(self, stream, fd: int, launch_ref: list):
        self._stream = stream
        self._fd = fd
        self._jobs: queue.Queue = queue.Queue()
        self._ended = False
        self._launch_ref = launch_ref
        #: The id of the job running now, and the ids the service asked to cancel.
        self.current: str | None = None
        self.cancelled: set = set()
        threading.Thread(target=self._read, name="lane-tasks", daemon=True).start()

    def _read(self) -> None:
        for line in self._stream:
            task = LaneTask.from_json(json.loads(line))
            if task.cancel:
                self.cancelled.add(task.job_id)
                if task.job_id == self.current and self._launch_ref:
                    self._launch_ref[0].cancel_current()
            elif task.job is not None:
                self._jobs.put(task)
        self._ended = True
        self._jobs.put(None)

    def next_job(self):
        while True:
            task = self._jobs.get()
            if task is None:
                return None
            if task.job_id not in self.cancelled:
                self.current = task.job_id
                return task.job
            send(self._fd, LaneResult(job_id=task.job_id, cancelled=True))  # cancelled on its way here

    def started(self, launch) -> None:
        if self.current in self.cancelled:  # the cancel came before its candidate group was the current one
            launch.cancel_current()

    def more_expected(self) -> bool:
        return not self._ended


class LaneReporter(Reporter):
    """Hands each record to the service as a :class:`LaneResult` (and keeps it, as any reporter)."""

    def __init__(self, feed: TaskFeed, fd: int):
        super().__init__()
        self._feed = feed
        self._fd = fd

    def job(self, record) -> None:
        super().job(record)
        job_id = self._feed.current or ""
        send(self._fd, LaneResult(job_id=job_id, record=record, cancelled=job_id in self._feed.cancelled))


def send(fd: int, result: LaneResult) -> None:
    data = (json.dumps(result.to_json()) + "\n").encode()
    while data:
        data = data[os.write(fd, data):]


def _die_with_parent() -> None:
    """SIGTERM when the service dies (even by SIGKILL), turned into an exit that stops the groups."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if os.getppid() == 1:  # the service died before the line above
        sys.exit(143)


def main() -> int:
    from pkb_core.launch.launcher import Launch

    _die_with_parent()
    fd = int(os.environ.pop(LANE_FD_ENV))
    stream = sys.stdin
    settings = LaunchSettings.from_json(json.loads(stream.readline()))
    launch_ref: list = []
    feed = TaskFeed(stream, fd, launch_ref)
    launch = Launch(settings, LaneReporter(feed, fd))
    launch_ref.append(launch)
    try:
        launch.run(feed)
    except Exception as exc:  # noqa: BLE001 - the service records the running job as this lane's failure
        from pkb_core.errors import describe

        send(fd, LaneResult(job_id=feed.current or "", error=f"the lane failed: {describe(exc)}"))
        return 1
    return 0



# -- its starter's side (the service's LocalLane, a Ray GroupActor): start it, write to it, stop it
def start_lane_process(settings: dict, log: Path, env: dict) -> tuple[subprocess.Popen, int]:
    """Start ``python -m pkb_core.serve.lane_process`` with ``settings`` as its first line, its output in
    ``log`` and ``env`` over this process's environment; ``(the process, the descriptor its
    LaneResult lines come on)``. The Ray actors start their node's lane with it too."""
    read_fd, write_fd = os.pipe()
    env = dict(os.environ, **env, **{LANE_FD_ENV: str(write_fd)}, PYTHONUNBUFFERED="1")
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "pkb_core.serve.lane_process"], stdin=subprocess.PIPE,
                                stdout=out, stderr=subprocess.STDOUT, env=env, pass_fds=(write_fd,))
    os.close(write_fd)
    write_line(proc, settings)
    return proc, read_fd


def write_line(proc: subprocess.Popen, message: dict) -> bool:
    """One JSON line to a lane's input (False when the lane is gone)."""
    return send_line(proc.stdin, message)


def stop_lane_process(proc: subprocess.Popen, grace: float = STOP_GRACE_S) -> int:
    """End a lane's input (it stops after the running job, stopping its groups); terminate it if it
    lingers, kill it if that does not end it; its exit status."""
    try:
        proc.stdin.close()
    except OSError:
        pass
    try:
        return proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.terminate()  # its SIGTERM handler stops the groups
        try:
            return proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()


if __name__ == "__main__":
    sys.exit(main())
