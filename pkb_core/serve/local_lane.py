"""The service's handle on one lane process on this node (:class:`LocalLane`, a
:class:`pkb_core.serve.protocols.Lane`; the process itself is :mod:`pkb_core.serve.lane_process`,
and a group on a Ray cluster has :class:`pkb_core.ray.ray_lane.RayLane`): start it on its
devices, hand it a job, cancel it, read its results, stop it.

A lane runs one job at a time. Its results arrive on a pipe read by a thread of
its own, which hands each :class:`~pkb_core.contracts.serve.LaneResult` to the
scheduler's callback; a lane that dies reports itself with a result that has an
``error`` (the scheduler requeues or records its job).
"""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from pkb_core.contracts.batch import LaunchSettings
from pkb_core.contracts.serial import ContractError
from pkb_core.contracts.serve import GroupView, LaneResult, LaneTask
from pkb_core.serve.lane_process import STOP_GRACE_S, start_lane_process, stop_lane_process, write_line

class LocalLane:
    """A lane process on this node (see the module docstring); a :class:`pkb_core.serve.protocols.Lane`.

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
