"""Retention of the reward service: finished jobs older than ``--retention-days`` leave its data.

What is pruned: every job that is ``done`` or ``cancelled`` and finished more than the
retention ago, its row in the store (submission, record), and each source file no job left
in the store names any more (two submissions of one text share one file,
:meth:`pkb_core.serve.intake.Intake._write_source`). Jobs that wait or run are never pruned.
When: once when the service starts, before it answers a request, then every
:data:`PRUNE_EVERY_S` seconds in a thread of its own. SQLite reuses the pages of pruned rows
for new jobs; the file does not shrink. In the lanes' run directories (``DATA/runs/<lane>/``) every
log (a job's, a launch's, a build's: up to ``--log-cap`` MiB each) last written before the
retention goes too; ``records.jsonl`` stays (a few KiB a job, what ``pkb report`` of the folder
reads, appended to by running lanes).

A source file is written by a submission before the row that names it is added; the pruner
must not remove a file between those two steps. :class:`SourcesGuard` orders them:
submissions hold it shared (they run side by side), the pruner exclusive while it checks
and removes files.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from pathlib import Path
from typing import NamedTuple

#: Seconds between two prunes after the first.
PRUNE_EVERY_S = 3600.0


class SourcesGuard:
    """A shared/exclusive lock: many submissions write source files and add their rows at once;
    the pruner removes files alone. A waiting pruner goes before new submissions (an hourly prune
    of milliseconds is never starved by a steady stream of them)."""

    def __init__(self):
        self._cond = threading.Condition()
        self._sharing = 0
        self._exclusive = False
        self._waiting = 0

    @contextlib.contextmanager
    def shared(self):
        with self._cond:
            while self._exclusive or self._waiting:
                self._cond.wait()
            self._sharing += 1
        try:
            yield
        finally:
            with self._cond:
                self._sharing -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self):
        with self._cond:
            self._waiting += 1
            while self._exclusive or self._sharing:
                self._cond.wait()
            self._waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


class Pruned(NamedTuple):
    """What one prune removed."""

    jobs: int
    sources: int
    logs: int

    def __str__(self) -> str:
        return f"{self.jobs} job(s), {self.sources} source file(s) and {self.logs} log(s)"


class Retention:
    """Prunes ``store`` (a :class:`pkb_core.serve.store.JobStore`), the source files under
    ``sources`` and the logs under ``runs`` (the lanes' run directories).

    :param days: the retention; 0 keeps every job (nothing is pruned and no thread starts).
    """

    def __init__(self, store, sources: Path, days: float, guard: SourcesGuard, runs: Path | None = None):
        self.store = store
        self.sources = Path(sources)
        self.runs = Path(runs) if runs is not None else None
        self.days = days
        self.guard = guard
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def prune(self, now: float | None = None) -> Pruned:
        """Prune once: what was removed."""
        if self.days <= 0:
            return Pruned(0, 0, 0)
        before = (time.time() if now is None else now) - self.days * 86400
        jobs, paths = self.store.prune(finished_before=before)
        files = 0
        with self.guard.exclusive():
            for path in sorted(set(paths)):
                if self._inside(path) and not self.store.names_source(path):
                    files += _remove(Path(path), self.sources)
        return Pruned(jobs, files, self._prune_logs(before))

    def _prune_logs(self, before: float) -> int:
        """Remove the logs under the run directories last written before ``before``: a running
        job's or lane's log is written as it runs, so only ended ones are that old."""
        if self.runs is None or not self.runs.is_dir():
            return 0
        removed = 0
        for logs in self.runs.glob("*/logs"):
            for folder, _, names in os.walk(logs):  # links are not followed
                for name in names:
                    path = os.path.join(folder, name)
                    try:
                        if name.endswith(".log") and os.lstat(path).st_mtime < before:
                            os.unlink(path)
                            removed += 1
                    except FileNotFoundError:
                        continue
        return removed

    def start(self) -> Pruned:
        """Prune now, then every :data:`PRUNE_EVERY_S` seconds in a thread; what the first prune removed."""
        first = self.prune()
        if self.days > 0:
            self._thread = threading.Thread(target=self._loop, name="pkb-retention", daemon=True)
            self._thread.start()
        return first

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(PRUNE_EVERY_S):
            try:
                pruned = self.prune()
            except Exception as exc:  # noqa: BLE001 - a failed prune is tried again at the next hour
                print(f"pkb serve: pruning finished jobs failed ({exc}); trying again in an hour",
                      file=sys.stderr, flush=True)
                continue
            if any(pruned):
                print(f"pkb serve: pruned {pruned} older than {self.days:g} days", file=sys.stderr, flush=True)

    def _inside(self, path: str) -> bool:
        """Only files under the service's own sources folder are ever removed."""
        try:
            return Path(path).resolve().is_relative_to(self.sources.resolve())
        except OSError:
            return False


def _remove(path: Path, root: Path) -> int:
    """Remove ``path`` and the folders above it that it leaves empty, up to ``root``; 1 if it was there."""
    try:
        path.unlink()
    except FileNotFoundError:
        return 0
    folder = path.parent
    while folder != root and root in folder.parents:
        try:
            folder.rmdir()
        except OSError:  # not empty: another problem's file of the same text, or another digest
            break
        folder = folder.parent
    return 1
