"""The service's jobs, their states and records, in one SQLite file.

Every change of a job is one committed transaction, so a service killed at any
instant (``kill -9``) loses nothing that a client was told: on restart
:meth:`JobStore.recover` puts the jobs that were building or running back in
the queue (their processes died with the service) and the finished ones are
served as they were. SQLite is embedded (no server to install); WAL mode lets
the HTTP handlers read while the scheduler writes.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from pathlib import Path

from pkb_core.contracts.job import Job
from pkb_core.contracts.record import Record
from pkb_core.contracts.serve import JobState, JobView, Submission
from pkb_core.plugin.hookspecs import hookimpl

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE NOT NULL,
    state TEXT NOT NULL,
    client TEXT NOT NULL,
    priority INTEGER NOT NULL,
    problem TEXT NOT NULL,
    backend TEXT NOT NULL,
    world_size INTEGER NOT NULL,
    dedup_key TEXT NOT NULL,
    submission TEXT NOT NULL,
    job TEXT,
    record TEXT,
    note TEXT NOT NULL DEFAULT '',
    same_as TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    submitted_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
CREATE INDEX IF NOT EXISTS jobs_dedup ON jobs(dedup_key, state);
CREATE INDEX IF NOT EXISTS jobs_client ON jobs(client);
"""

#: States a job leaves only by being scheduled or cancelled.
WAITING = (JobState.QUEUED, JobState.BUILDING, JobState.READY)


class JobStore:
    """The jobs table (one connection, serialised by a lock: writes are few and short)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # Every client's source and record: the service's alone (SQLite gives its -wal and -shm
        # files the database's mode).
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
        os.chmod(self.path, 0o600)
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a committed row survives a killed process
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()
        self._waiting_submissions: dict[str, Submission] = {}  # parsed once per waiting job (:meth:`waiting`)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _run(self, sql: str, args=()) -> list:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # -- writes ------------------------------------------------------------------
    def add(self, job_id: str, submission: Submission, *, problem: str, world_size: int, dedup_key: str,
            state: JobState = JobState.QUEUED, job_json: dict | None = None, record: Record | None = None,
            same_as: str | None = None, note: str = "") -> None:
        """A new job (``state`` ``done`` with ``record`` for one answered at once)."""
        now = time.time()
        self._run("INSERT INTO jobs (id, state, client, priority, problem, backend, world_size, dedup_key, "
                  "submission, job, record, note, same_as, submitted_at, finished_at) "
                  "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                  (job_id, JobState(state).value, submission.client, submission.priority, problem,
                   submission.backend, world_size, dedup_key, json.dumps(submission.to_json()),
                   json.dumps(job_json) if job_json else None,
                   json.dumps(record.to_json()) if record else None, note, same_as, now,
                   now if JobState(state).final else None))

    def set_state(self, job_id: str, state: JobState, *, note: str | None = None, only_from=None) -> bool:
        """Move a job to ``state`` (from one of ``only_from`` when given); False if it was not there."""
        sets, args = ["state = ?"], [JobState(state).value]
        if note is not None:
            sets.append("note = ?")
            args.append(note)
        if state == JobState.RUNNING:
            sets += ["started_at = ?", "attempts = attempts + 1"]
            args.append(time.time())
        if JobState(state).final:
            sets.append("finished_at = ?")
            args.append(time.time())
        where, wargs = "id = ?", [job_id]
        if only_from:
            where += f" AND state IN ({', '.join('?' * len(only_from))})"
            wargs += [JobState(s).value for s in only_from]
        with self._lock:
            cursor = self._db.execute(f"UPDATE jobs SET {', '.join(sets)} WHERE {where}", args + wargs)
            return cursor.rowcount > 0

    def set_job(self, job_id: str, job_json: dict) -> None:
        """The planned (and built) job a lane will run."""
        self._run("UPDATE jobs SET job = ? WHERE id = ?", (json.dumps(job_json), job_id))

    def finish(self, job_id: str, record: Record, *, state: JobState = JobState.DONE, note: str = "") -> bool:
        """Store ``job_id``'s record; False if it had been cancelled or finished already."""
        with self._lock:
            cursor = self._db.execute(
                "UPDATE jobs SET state = ?, record = ?, note = ?, finished_at = ? WHERE id = ? AND state NOT IN (?, ?)",
                (JobState(state).value, json.dumps(record.to_json()), note, time.time(), job_id,
                 JobState.DONE.value, JobState.CANCELLED.value))
            return cursor.rowcount > 0

    def cancel_waiting(self, *, ids=None, client: str | None = None, note: str = "cancelled before it ran") -> list[str]:
        """Cancel, in one transaction, every waiting job among ``ids`` (None: any) of ``client``
        (None: any); the ids cancelled, oldest first."""
        where, args = _filter(ids=ids, client=client, states=WAITING)
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                found = [row[0] for row in self._db.execute(f"SELECT id FROM jobs WHERE {where} ORDER BY seq", args)]
                self._db.execute(f"UPDATE jobs SET state = ?, note = ?, finished_at = ? WHERE {where}",
                                 (JobState.CANCELLED.value, note, time.time(), *args))
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        return found

    def recover(self) -> int:
        """After a restart: jobs that were building, built or running go back to the queue
        (their processes died with the service). How many."""
        with self._lock:
            cursor = self._db.execute(
                "UPDATE jobs SET state = ?, note = 'requeued after a service restart' WHERE state IN (?, ?, ?)",
                (JobState.QUEUED.value, JobState.BUILDING.value, JobState.READY.value, JobState.RUNNING.value))
            return cursor.rowcount

    # -- reads -------------------------------------------------------------------
    def view(self, job_id: str) -> JobView | None:
        rows = self._run(f"SELECT {_VIEW_COLUMNS} FROM jobs WHERE id = ?", (job_id,))
        return _view(rows[0]) if rows else None

    def views(self, *, state: str | None = None, client: str | None = None, limit: int = 100) -> list[JobView]:
        """The newest ``limit`` jobs (filtered by state and client), newest first."""
        where, args = [], []
        if state:
            where.append("state = ?")
            args.append(state)
        if client:
            where.append("client = ?")
            args.append(client)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        rows = self._run(f"SELECT {_VIEW_COLUMNS} FROM jobs {clause} ORDER BY seq DESC LIMIT ?", (*args, limit))
        return [_view(row) for row in rows]

    def ids(self, *, ids=None, client: str | None = None, states=()) -> list[str]:
        """The ids of the jobs among ``ids`` (None: any) of ``client`` (None: any) in ``states``, oldest first."""
        where, args = _filter(ids=ids, client=client, states=states)
        return [row[0] for row in self._run(f"SELECT id FROM jobs WHERE {where} ORDER BY seq", args)]

    def done_with(self, dedup_key: str) -> JobView | None:
        """The newest finished job with this content and options (for deduplication)."""
        rows = self._run(f"SELECT {_VIEW_COLUMNS} FROM jobs WHERE dedup_key = ? AND state = ? AND same_as IS NULL "
                         "ORDER BY seq DESC LIMIT 1", (dedup_key, JobState.DONE.value))
        return _view(rows[0]) if rows else None

    def waiting(self) -> list[dict]:
        """Jobs not yet scheduled, oldest first: ``{id, state, client, priority, world_size, submission, job}``.

        The scheduler asks on every pass; a submission (its source text) is read
        and parsed once, on the first pass that sees it, and kept while the job
        waits (1000 waiting submissions of 24 KB took 82 ms a pass parsed anew)."""
        rows = self._run("SELECT id, state, client, priority, world_size, job FROM jobs "
                         f"WHERE state IN ({', '.join('?' * len(WAITING))}) ORDER BY seq",
                         tuple(s.value for s in WAITING))
        known = self._waiting_submissions
        missing = [r[0] for r in rows if r[0] not in known]
        for start in range(0, len(missing), 500):
            chunk = missing[start:start + 500]
            for job_id, text in self._run(f"SELECT id, submission FROM jobs WHERE id IN ({', '.join('?' * len(chunk))})",
                                          chunk):
                known[job_id] = Submission.from_json(json.loads(text))
        self._waiting_submissions = {r[0]: known[r[0]] for r in rows}
        return [{"id": r[0], "state": JobState(r[1]), "client": r[2], "priority": r[3], "world_size": r[4],
                 "submission": known[r[0]], "job": json.loads(r[5]) if r[5] else None}
                for r in rows]

    def counts(self) -> dict[str, int]:
        return dict(self._run("SELECT state, COUNT(*) FROM jobs GROUP BY state"))

    def open_by_client(self) -> dict[str, int]:
        return dict(self._run("SELECT client, COUNT(*) FROM jobs WHERE state NOT IN (?, ?) GROUP BY client",
                              (JobState.DONE.value, JobState.CANCELLED.value)))

    def done_since(self, since: float) -> int:
        return self._run("SELECT COUNT(*) FROM jobs WHERE state = ? AND finished_at >= ?",
                         (JobState.DONE.value, since))[0][0]

    def planned(self, job_id: str):
        """``(Job, world size)`` of a planned job, or None."""
        rows = self._run("SELECT job, world_size FROM jobs WHERE id = ?", (job_id,))
        if not rows or not rows[0][0]:
            return None
        return Job.from_json(json.loads(rows[0][0])), rows[0][1]

    def attempts(self, job_id: str) -> int:
        rows = self._run("SELECT attempts FROM jobs WHERE id = ?", (job_id,))
        return rows[0][0] if rows else 0


def _filter(*, ids=None, client: str | None = None, states=()) -> tuple[str, tuple]:
    """A ``WHERE`` clause and its arguments: jobs among ``ids`` (None: any; ids are bound as JSON,
    so a bulk cancel of thousands is one statement), of ``client`` (None: any), in ``states``."""
    where, args = ["1"], []
    if ids is not None:
        where.append("id IN (SELECT value FROM json_each(?))")
        args.append(json.dumps(list(ids)))
    if client is not None:
        where.append("client = ?")
        args.append(client)
    if states:
        where.append(f"state IN ({', '.join('?' * len(states))})")
        args += [JobState(s).value for s in states]
    return " AND ".join(where), tuple(args)


_VIEW_COLUMNS = ("id, state, client, priority, problem, backend, world_size, submitted_at, started_at, "
                 "finished_at, note, same_as, record")


def _view(row) -> JobView:
    (job_id, state, client, priority, problem, backend, world_size, submitted, started, finished, note,
     same_as, record) = row
    return JobView(id=job_id, state=state, client=client, priority=priority, problem=problem, backend=backend,
                   world_size=world_size, submitted_at=submitted, started_at=started, finished_at=finished,
                   note=note or "", same_as=same_as,
                   record=Record.from_json(json.loads(record)) if record else None)


class StoreObserver:
    """The store as an observer of the service's session (:mod:`pkb_core.launch.session`): each
    job's record, reported with its job id (a lane's, the compile pool's, the scheduler's own),
    finishes the job. It runs first, so the other observers see a record the store holds; a job
    answered at intake is stored with its record in the one transaction that adds it, before it
    is reported (it never waits), and a job cancelled meanwhile keeps its state."""

    def __init__(self, store: JobStore):
        self.store = store

    @hookimpl(tryfirst=True)
    def pkb_report_job(self, record, reporter):
        if reporter.job_id is not None:
            self.store.finish(reporter.job_id, record)

