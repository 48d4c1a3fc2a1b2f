"""Host side of ``pkb run``: plan jobs, start torchrun launches, watch them.

Jobs that share a backend and a world size run in one torchrun launch (a
launch costs seconds: process start, torch import, process-group init). A
watchdog reads each rank's status file: a job that makes no progress within
its timeout becomes ``timeout``; an error reported by one rank while its peers
hang becomes ``error`` after a short grace period; a launch that dies becomes
``crash`` (with the signal's name) for the job that was running. The process
group is killed, shared-memory segments are swept, and the remaining jobs of
the batch go on in a fresh launch, so one bad job never takes others with it.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from pkb_core.preload import preload_environment
from pkb_core.results import append_record, job_record, read_records

#: Seconds to wait, after one rank reported an error, for the others to finish.
ERROR_GRACE_S = 10.0
#: Seconds a launch may take to reach its first job (imports, rendezvous).
STARTUP_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class Nodes:
    """A job spanning several nodes through torchrun's c10d rendezvous.

    Every node runs the same ``pkb run`` with its own ``node_rank``; the same
    ``rdzv_id`` gives every node the same run secret (so replicated inputs
    agree) and the same shared-memory names. Only the node that holds global
    rank 0 writes records.
    """

    nnodes: int
    node_rank: int
    endpoint: str
    rdzv_id: str

    def torchrun_args(self) -> tuple:
        return ("--nnodes", str(self.nnodes), "--node-rank", str(self.node_rank), "--rdzv-backend", "c10d",
                "--rdzv-endpoint", self.endpoint, "--rdzv-id", self.rdzv_id)


@dataclass
class LaunchSettings:
    """How to start workers: ``nproc`` ranks per node, one node unless ``nodes``."""

    nproc: int
    device: str
    backend: str
    run_dir: Path
    job_timeout: float
    options: dict = field(default_factory=dict)
    calibration: dict | None = None
    nodes: Nodes | None = None
    #: Libraries the workers load before torch (``BackendInfo.preload``).
    preload: tuple = ()

    @property
    def world_size(self) -> int:
        return self.nproc * (self.nodes.nnodes if self.nodes else 1)


def run_jobs(jobs: list[dict], settings: LaunchSettings, on_record=None) -> list[dict]:
    """Run ``jobs`` (skipping keys already recorded) and return their records."""
    run_dir = Path(settings.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    done = {r["key"] for r in read_records(run_dir)}
    pending = [job for job in jobs if job["key"] not in done]
    if settings.nodes:
        # Nodes cannot agree on a relaunch: one launch, whatever happens.
        if pending:
            _launch(pending, settings, hashlib.sha256(settings.nodes.rdzv_id.encode()).hexdigest(), on_record)
        pending = []
    secret = secrets.token_hex(16)
    while pending:
        finished = _launch(pending, settings, secret, on_record)
        pending = [job for job in pending if job["key"] not in finished]
    by_key = {r["key"]: r for r in read_records(run_dir)}
    return [by_key[job["key"]] for job in jobs if job["key"] in by_key]


def _launch(jobs, settings: LaunchSettings, secret, on_record) -> set:
    """One torchrun launch over ``jobs``; returns the keys that now have a record."""
    if settings.nodes:
        launch_id = hashlib.sha256(f"{settings.nodes.rdzv_id}/{secret}".encode()).hexdigest()[:8]
        scratch = Path(settings.run_dir) / ".scratch" / f"{launch_id}-node{settings.nodes.node_rank}"
        torchrun_args = settings.nodes.torchrun_args()
    else:
        launch_id = secrets.token_hex(4)
        scratch = Path(settings.run_dir) / ".scratch" / launch_id
        torchrun_args = ("--standalone",)
    scratch.mkdir(parents=True)
    batch = {
        "run_dir": str(settings.run_dir), "scratch": str(scratch), "run_id": launch_id,
        "backend": settings.backend, "device": settings.device, "secret": secret,
        "job_timeout": settings.job_timeout, "options": settings.options, "jobs": jobs,
        "calibration": settings.calibration,
    }
    batch_file = scratch / "batch.json"
    batch_file.write_text(json.dumps(batch))
    node = f"-node{settings.nodes.node_rank}" if settings.nodes else ""  # nodes may share --out
    log_path = Path(settings.run_dir) / "logs" / f"launch-{launch_id}{node}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(settings.nproc),
           *torchrun_args, "-m", "pkb_core.worker", str(batch_file)]
    env = dict(os.environ, PYTHONUNBUFFERED="1", **preload_environment(settings.preload))
    if settings.device == "cpu":
        env.setdefault("OMP_NUM_THREADS", "1")
        env.setdefault("TRITON_INTERPRET", "1")
    watch = _Watch(scratch, settings.nproc, Path(settings.run_dir), {j["key"] for j in jobs}, on_record)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        killed_for = None
        while proc.poll() is None:
            time.sleep(0.2)
            watch.poll()
            killed_for = watch.verdict_if_stuck(settings.job_timeout)
            if killed_for:
                _kill(proc, watch)
                break
        proc.wait()
    watch.poll()
    _sweep_shared_memory(launch_id)
    unfinished = [job for job in jobs if job["key"] not in watch.finished]
    if settings.nodes and not killed_for and proc.returncode == 0:
        return watch.finished  # the records went to the node that holds global rank 0
    if unfinished:
        _record_failure(unfinished, watch, killed_for, proc.returncode, log_path, settings, on_record)
    return watch.finished


class _Watch:
    """Follows the rank status files and the records file of one launch."""

    def __init__(self, scratch: Path, nproc: int, run_dir: Path, keys: set, on_record):
        self.scratch, self.nproc, self.run_dir, self.keys = scratch, nproc, run_dir, keys
        self.on_record = on_record
        self.finished: set = set()
        self.statuses: dict = {}
        self.job_started: dict = {}
        self.started_at = time.time()
        self._offset = 0

    def poll(self):
        for rank in range(self.nproc):
            try:
                self.statuses[rank] = json.loads((self.scratch / f"rank{rank}.json").read_text())
            except (OSError, ValueError):
                continue
        for status in self.statuses.values():
            if status["job"] and status["job"] not in self.job_started:
                self.job_started[status["job"]] = time.time()
        self._read_new_records()

    def _read_new_records(self):
        path = self.run_dir / "records.jsonl"
        if not path.exists():
            return
        with open(path) as f:
            f.seek(self._offset)
            chunk = f.read()
        complete = chunk[: chunk.rfind("\n") + 1]
        self._offset += len(complete.encode())
        for line in complete.splitlines():
            record = json.loads(line)
            if record["key"] in self.keys and record["key"] not in self.finished:
                self.finished.add(record["key"])
                if self.on_record:
                    self.on_record(record)

    def current_job(self):
        running = [s["job"] for s in self.statuses.values() if s["job"] and s["job"] not in self.finished]
        return running[0] if running else None

    def errors(self):
        return [(rank, s["error"]) for rank, s in sorted(self.statuses.items())
                if s.get("error") and s["job"] not in self.finished]

    def verdict_if_stuck(self, job_timeout):
        """``(verdict, reason)`` when the launch must be killed, else ``None``."""
        now = time.time()
        job = self.current_job()
        if job is None:
            if not self.finished and now - self.started_at > STARTUP_TIMEOUT_S:
                return "error", f"the launch did not start a job within {STARTUP_TIMEOUT_S:.0f} s"
            return None
        errors = self.errors()
        last_error_time = max((s["time"] for s in self.statuses.values() if s.get("error")), default=None)
        if errors and now - last_error_time > min(ERROR_GRACE_S, job_timeout / 2):
            rank, message = errors[0]
            return "error", f"rank {rank}: {message} (its peers did not finish)"
        if now - self.job_started[job] > job_timeout:
            phases = ", ".join(f"rank {r}: {s['phase']}" for r, s in sorted(self.statuses.items()) if s["job"] == job)
            return "timeout", f"no result after {job_timeout:.0f} s ({phases})"
        return None


def _kill(proc, watch):
    """Kill torchrun's process group and every rank: torchrun starts each rank
    in a session of its own, out of reach of the group signal."""
    ranks = [s["pid"] for s in watch.statuses.values() if s.get("pid")]
    for pid in ranks:  # stacks into the log first (see worker.run_batch)
        try:
            os.kill(pid, signal.SIGUSR1)
        except (ProcessLookupError, PermissionError):
            pass
    time.sleep(1.0)
    targets = [("group", proc.pid)] + [("pid", pid) for pid in ranks]
    for kind, pid in targets:
        try:
            os.killpg(pid, signal.SIGKILL) if kind == "group" else os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _sweep_shared_memory(launch_id: str):
    from pkb_core.symmetric.shm import SHM_DIR

    prefix = f"pkb-{launch_id}-"
    if os.path.isdir(SHM_DIR):
        for name in os.listdir(SHM_DIR):
            if name.startswith(prefix):
                try:
                    os.unlink(os.path.join(SHM_DIR, name))
                except OSError:
                    pass


_EXITCODE = re.compile(r"exitcode\s*:\s*(-\d+)")
#: Signals torchrun sends to the surviving ranks after the first one fails.
_CLEANUP_SIGNALS = {"SIGTERM", "SIGKILL"}


def _signal_death(log_path: Path, returncode) -> str | None:
    """"a rank died with SIGxxx" when the log or the exit status shows a signal."""
    text = log_path.read_text(errors="replace") if log_path.exists() else ""
    names = [signal.Signals(-int(code)).name for code in _EXITCODE.findall(text)]
    # The cause is a signal other than the ones torchrun uses to clean up.
    names.sort(key=lambda name: name in _CLEANUP_SIGNALS)
    if names:
        return f"a rank died with {names[0]}"
    if returncode is not None and returncode < 0:
        return f"the launcher died with {signal.Signals(-returncode).name}"
    return None


def _record_failure(unfinished, watch: _Watch, killed_for, returncode, log_path, settings, on_record):
    """Give the job that was running its verdict; leave the rest for the next launch."""
    job_key = watch.current_job()
    culprit = next((j for j in unfinished if j["key"] == job_key), None)
    if killed_for:
        verdict, reason = killed_for
    else:
        # A signal explains everything after it (peers see "connection reset"),
        # so it wins over the errors the surviving ranks reported.
        died, errors = _signal_death(log_path, returncode), watch.errors()
        if died:
            verdict, reason = "crash", died
        elif errors:
            verdict, reason = "error", f"rank {errors[0][0]}: {errors[0][1]}"
        else:
            verdict, reason = "crash", f"a rank exited with status {returncode} ({log_path})"
    if culprit is None:
        # Nothing started: the launch itself failed. Every job shares that fate
        # (retrying would fail the same way).
        tail = " | ".join(log_path.read_text(errors="replace").strip().splitlines()[-3:]) if log_path.exists() else ""
        targets, reason = unfinished, f"{reason}; launch log {log_path}: {tail}"[:2000]
    else:
        targets = [culprit]
        if verdict == "crash":
            phases = ", ".join(f"rank {r}: {s['phase']}" for r, s in sorted(watch.statuses.items()))
            reason = f"{reason} ({phases})"
    for job in targets:
        record = job_record(job, settings.world_size, verdict, reason)
        append_record(settings.run_dir, record)
        watch.finished.add(job["key"])
        if on_record:
            on_record(record)
