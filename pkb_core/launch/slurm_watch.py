"""Job states of SLURM shards, with or without accounting (used by :mod:`pkb_core.launch.fanout`).

submitit learns whether a SLURM job is still running from ``sacct``. Many
clusters, and every small one without ``slurmdbd``, run with accounting off;
there ``sacct`` fails on every call ("Slurm accounting storage is disabled"),
submitit logs a warning each time (every few seconds at first), and a shard
that died without writing its result is never seen to end, so ``pkb run``
would wait for it forever.

:class:`QueueWatcher` asks ``sacct`` while it answers and ``squeue`` when it
does not: ``squeue --states=all`` lists the jobs the controller still holds,
finished ones included (``MinJobAge``, 300 s by default), and a job it no
longer lists has ended. Errors are kept quiet while one of the two answers;
when neither does, each distinct error is printed once.
"""
from __future__ import annotations

import subprocess
import time

import click
from submitit.slurm.slurm import SlurmInfoWatcher

#: At most one ``sacct``/``squeue`` call per this many seconds for a whole run (submitit's default is 600).
DELAY_S = 60
#: Seconds a status command may take.
COMMAND_TIMEOUT_S = 60
#: State given to a job that ``squeue`` no longer lists (it ended at least ``MinJobAge`` ago).
ENDED = "ENDED (no longer listed by squeue)"


class QueueWatcher(SlurmInfoWatcher):
    """submitit's SLURM watcher, falling back from ``sacct`` to ``squeue``."""

    def __init__(self, delay_s: int = DELAY_S, echo=None) -> None:
        super().__init__(delay_s=delay_s)
        #: False once ``sacct`` said that accounting is disabled: it is not asked again.
        self.accounting = True
        self._echo = echo or (lambda text: click.echo(text, err=True))
        self._reported: set = set()

    def update(self) -> None:
        to_check = self._registered - self._finished
        if not to_check:
            return
        self._num_calls += 1
        info = self._from_sacct() if self.accounting else None
        if info is None:
            info = self._from_squeue(to_check)
        if info is not None:
            self._info_dict.update(info)
        self._last_status_check = time.time()
        for job_id in to_check:
            if self.is_done(job_id, mode="cache"):
                self._finished.add(job_id)

    def _from_sacct(self) -> dict | None:
        command = self._make_command()
        if command is None:
            return {}
        ok, out = _run(command)
        if ok:
            self._output = out
            return self.read_info(out)
        if "accounting storage is disabled" in out.lower():
            self.accounting = False
        return None  # disabled, or slurmdbd unreachable this time: squeue answers instead

    def _from_squeue(self, to_check: set) -> dict | None:
        main_ids = sorted({job_id.split("_")[0] for job_id in to_check})
        ok, out = _run(["squeue", "--noheader", "--array", "--states=all", "--format=%i|%T|%N",
                        "--jobs=" + ",".join(main_ids)])
        if not ok and "invalid job id" not in out.lower():  # all of them purged is an answer, not an error
            self._report(f"cannot read the shards' states (sacct: accounting disabled or failing; "
                         f"squeue: {out.strip() or 'no output'}); retrying")
            return None
        info = {}
        for line in out.splitlines() if ok else []:
            job_id, _, rest = line.strip().partition("|")
            state, _, nodes = rest.partition("|")
            if job_id:
                info[job_id] = {"JobID": job_id, "State": state, "NodeList": nodes}
        for job_id in to_check:
            info.setdefault(job_id, {"JobID": job_id, "State": ENDED, "NodeList": ""})
        return info

    def _report(self, text: str) -> None:
        if text not in self._reported:
            self._reported.add(text)
            self._echo(f"slurm: {text}")


def _run(command: list) -> tuple:
    """``(succeeded, stdout or the error)`` of a status command, never raising."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    if done.returncode == 0:
        return True, done.stdout
    return False, (done.stderr or done.stdout).strip() or f"{command[0]} exited {done.returncode}"


def watch(engine_jobs: list, watcher: QueueWatcher | None = None) -> QueueWatcher:
    """Make ``engine_jobs`` (submitit ``SlurmJob`` objects) ask ``watcher`` for their states
    instead of submitit's process-wide one."""
    watcher = watcher or QueueWatcher()
    for job in engine_jobs:
        job.watcher = watcher
        watcher.register_job(job.job_id)
    return watcher
