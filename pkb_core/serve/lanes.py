"""The service's handle on one lane process (:mod:`pkb_core.serve.lane`): start it on
its devices, hand it a job, cancel it, read its results, stop it.

A lane runs one job at a time. Its results arrive on a pipe read by a thread of
its own, which hands each :class:`~pkb_core.contracts.serve.LaneResult` to the
scheduler's callback; a lane that dies reports itself with a result that has an
``error`` (the scheduler requeues or records its job).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from pkb_core.contracts.batch import LaunchSettings
from pkb_core.contracts.serial import ContractError
from pkb_core.contracts.serve import GroupView, LaneResult, LaneTask
from pkb_core.process.channel import send_line
from pkb_core.serve.lane import LANE_FD_ENV

#: Seconds a lane may take to finish its job and stop when told to.
STOP_GRACE_S = 30.0


class Lane:
    """One lane (see the module docstring).

    :param key: ``(backend, world size, job timeout)``: the jobs it can run.
    :param devices: the device indices it holds (GPUs: ``CUDA_VISIBLE_DEVICES``).
    :param on_result: ``on_result(lane, LaneResult)``, called from the lane's reader thread.
    """

    def __init__(self, lane_id: str, key: tuple, devices: tuple, settings: LaunchSettings, *, on_result, log: Path):
        self.id = lane_id
        self.key = key
        self.devices = tuple(devices)
        #: The job it runs now (None: idle), when it went idle, how many it has run.
        self.job_id: str | None = None
        self.idle_since = time.monotonic()
        self.jobs_done = 0
        self.dead = False
        self._on_result = on_result
        env = {}
        if settings.device == "cuda":
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in self._physical(devices))
        self.proc, read_fd = start_lane_process(settings.to_json(), Path(log), env)
        self._reader = threading.Thread(target=self._read, args=(read_fd,), name=f"lane-{lane_id}", daemon=True)
        self._reader.start()

    @staticmethod
    def _physical(devices) -> list:
        """Device indices as this node names them (a service itself limited by
        ``CUDA_VISIBLE_DEVICES`` hands on the devices it was given)."""
        visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        return [visible[d] if d < len(visible) else d for d in devices]

    def _write(self, message: dict) -> bool:
        return write_line(self.proc, message)

    def run(self, job_id: str, job) -> bool:
        """Hand it ``job`` (False when the lane is gone: the job stays the caller's)."""
        self.job_id = job_id
        if not self._write(LaneTask(job_id=job_id, job=job).to_json()):
            self.job_id = None
            return False
        return True

    def cancel(self, job_id: str) -> None:
        self._write(LaneTask(job_id=job_id, cancel=True).to_json())

    def _read(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as stream:
            for line in stream:
                try:
                    result = LaneResult.from_json(json.loads(line))
                except (ValueError, ContractError) as exc:
                    result = LaneResult(job_id=self.job_id or "", error=f"the lane sent a malformed result ({exc})")
                self._on_result(self, result)
        self.proc.wait()
        self.dead = True
        how = f"status {self.proc.returncode}" if self.proc.returncode >= 0 else f"signal {-self.proc.returncode}"
        self._on_result(self, LaneResult(job_id=self.job_id or "", error=f"the lane's process ended ({how})"))

    def stop(self, grace: float = STOP_GRACE_S) -> None:
        """End its input (it stops after the running job, stopping its groups); kill it if it lingers."""
        stop_lane_process(self.proc, grace)

    def view(self) -> GroupView:
        return GroupView(id=self.id, backend=self.key[0], world_size=self.key[1], devices=self.devices,
                         job=self.job_id, jobs_done=self.jobs_done)


def start_lane_process(settings: dict, log: Path, env: dict) -> tuple[subprocess.Popen, int]:
    """Start ``python -m pkb_core.serve.lane`` with ``settings`` as its first line, its output in
    ``log`` and ``env`` over this process's environment; ``(the process, the descriptor its
    LaneResult lines come on)``. The Ray actors start their node's lane with it too."""
    read_fd, write_fd = os.pipe()
    env = dict(os.environ, **env, **{LANE_FD_ENV: str(write_fd)}, PYTHONUNBUFFERED="1")
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "pkb_core.serve.lane"], stdin=subprocess.PIPE,
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

