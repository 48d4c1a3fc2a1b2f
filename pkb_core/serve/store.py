"""The service's jobs, their states and records, in one SQLite file.

Every change of a job is one committed transaction, so a service killed at any
instant (``kill -9``) loses nothing that a client was told: on restart
:meth:`JobStore.recover` puts the jobs that were building or running back in
the queue (their processes died with the service) and the finished ones are
served as they were. SQLite is embedded (no server to install); WAL mode lets
the HTTP handlers read while the scheduler writes.

Each job records who submitted it (``owner``: the client of a token, or NULL for the admin
token and a service without tokens, :mod:`pkb_core.serve.access`), the bytes of source it
keeps (``source_bytes``, for the per-client quota, :mod:`pkb_core.serve.quota`) and the
source file it names (``source_path``, for retention, :mod:`pkb_core.serve.retention`). A
store written before those columns existed is migrated when it is opened (:data:`MIGRATIONS`,
SQLite's ``user_version``): its jobs get no owner (only the admin sees them, as everyone
did before), their source bytes and their source file.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from pathlib import Path

import attrs

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

#: Each schema version after the first (:data:`_SCHEMA`, version 0): what takes a store there.
#: Applied in order, each in one transaction with its ``user_version``, when a store is opened.
MIGRATIONS = (
    # 1: who submitted each job, the source bytes it keeps and the source file it names.
    ("ALTER TABLE jobs ADD COLUMN owner TEXT",
     "ALTER TABLE jobs ADD COLUMN source_bytes INTEGER NOT NULL DEFAULT 0",
     "ALTER TABLE jobs ADD COLUMN source_path TEXT",
     # Jobs stored before kept their source in the row (and in its file): its bytes, its file.
     "UPDATE jobs SET source_bytes = COALESCE(length(CAST(json_extract(submission, '$.source') AS BLOB)), 0), "
     "source_path = json_extract(job, '$.solution')",
     "CREATE INDEX IF NOT EXISTS jobs_owner ON jobs(owner, client)",
     "CREATE INDEX IF NOT EXISTS jobs_source ON jobs(source_path)",
     "CREATE INDEX IF NOT EXISTS jobs_finished ON jobs(finished_at)"),
)

#: States a job leaves only by being scheduled or cancelled.
WAITING = (JobState.QUEUED, JobState.BUILDING, JobState.READY)
#: The rerun line of a job that was running when its service stopped (killed or not).
STOPPED_WHILE_RUNNING = "the service stopped while it ran"


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
        self._migrate()
        self._lock = threading.Lock()
        self._waiting_submissions: dict[str, Submission] = {}  # parsed once per waiting job (:meth:`waiting`)

    def _migrate(self) -> None:
        """Bring a store of an older schema to :data:`MIGRATIONS`'s last version (a new one too)."""
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        for number, statements in enumerate(MIGRATIONS[version:], start=version + 1):
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for statement in statements:
                    self._db.execute(statement)
                self._db.execute(f"PRAGMA user_version = {number}")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _run(self, sql: str, args=()) -> list:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # -- writes ------------------------------------------------------------------
    def add(self, job_id: str, submission: Submission, *, problem: str, world_size: int, dedup_key: str,
            state: JobState = JobState.QUEUED, job_json: dict | None = None, record: Record | None = None,
            same_as: str | None = None, note: str = "", owner: str | None = None, source_bytes: int = 0,
            source_path: str | None = None, admit=None) -> None:
        """A new job (``state`` ``done`` with ``record`` for one answered at once).

        :param owner: the client of the token that submitted it (None: the admin, or no tokens).
        :param source_bytes: the bytes of source it keeps (in its file, or in its row).
        :param source_path: the source file it names, if one was written.
        :param admit: ``admit(jobs=, source_bytes=)``, called in the transaction that adds the job with
            what its account (:meth:`usage`) keeps now; what it raises leaves the job out.
        """
        now = time.time()
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                if admit is not None:
                    jobs, kept = self._usage(owner, submission.client)
                    admit(jobs=jobs, source_bytes=kept)
                self._db.execute(
                    "INSERT INTO jobs (id, state, client, priority, problem, backend, world_size, dedup_key, "
                    "submission, job, record, note, same_as, submitted_at, finished_at, owner, source_bytes, "
                    "source_path) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (job_id, JobState(state).value, submission.client, submission.priority, problem,
                     submission.backend, world_size, dedup_key, json.dumps(submission.to_json()),
                     json.dumps(job_json) if job_json else None,
                     json.dumps(record.to_json()) if record else None, note, same_as, now,
                     now if JobState(state).final else None, owner, source_bytes, source_path))
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

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

    def requeue(self, job_id: str, reason: str) -> bool:
        """Put a running job whose group was lost back in the queue (``ready``: it is built), its
        job's ``reruns`` saying why (so the record of its next run says so, and its view meanwhile);
        False if it was not running (cancelled, or finished, meanwhile)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                rows = self._db.execute("SELECT job FROM jobs WHERE id = ? AND state = ?",
                                        (job_id, JobState.RUNNING.value)).fetchall()
                if rows:
                    job = rows[0][0] and json.dumps(_rerun(json.loads(rows[0][0]), reason))
                    self._db.execute("UPDATE jobs SET state = ?, note = ?, job = ? WHERE id = ?",
                                     (JobState.READY.value, f"requeued: {reason}", job, job_id))
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        return bool(rows)

    def finish(self, job_id: str, record: Record, *, state: JobState = JobState.DONE, note: str = "") -> bool:
        """Store ``job_id``'s record; False if it had been cancelled or finished already."""
        with self._lock:
            cursor = self._db.execute(
                "UPDATE jobs SET state = ?, record = ?, note = ?, finished_at = ? WHERE id = ? AND state NOT IN (?, ?)",
                (JobState(state).value, json.dumps(record.to_json()), note, time.time(), job_id,
                 JobState.DONE.value, JobState.CANCELLED.value))
            return cursor.rowcount > 0

    def cancel_waiting(self, *, ids=None, client: str | None = None, owner: str | None = None,
                       note: str = "cancelled before it ran") -> list[str]:
        """Cancel, in one transaction, every waiting job among ``ids`` (None: any) of ``client``
        (None: any) and ``owner`` (None: any); the ids cancelled, oldest first."""
        where, args = _filter(ids=ids, client=client, owner=owner, states=WAITING)
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
        (their processes died with the service), in one transaction; a running one's job
        says in its ``reruns`` that it runs again. How many."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for job_id, job in self._db.execute("SELECT id, job FROM jobs WHERE state = ? AND job IS NOT NULL",
                                                    (JobState.RUNNING.value,)).fetchall():
                    self._db.execute("UPDATE jobs SET job = ? WHERE id = ?",
                                     (json.dumps(_rerun(json.loads(job), STOPPED_WHILE_RUNNING)), job_id))
                cursor = self._db.execute(
                    "UPDATE jobs SET state = ?, note = 'requeued after a service restart' WHERE state IN (?, ?, ?)",
                    (JobState.QUEUED.value, JobState.BUILDING.value, JobState.READY.value, JobState.RUNNING.value))
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            return cursor.rowcount

    def prune(self, *, finished_before: float) -> tuple[int, list[str]]:
        """Remove the final jobs that finished before ``finished_before`` (seconds since the epoch), in
        one transaction: how many, and the source files they named (others may still name them)."""
        where = "state IN (?, ?) AND finished_at < ?"
        args = (JobState.DONE.value, JobState.CANCELLED.value, finished_before)
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                paths = [row[0] for row in self._db.execute(
                    f"SELECT DISTINCT source_path FROM jobs WHERE {where} AND source_path IS NOT NULL", args)]
                removed = self._db.execute(f"DELETE FROM jobs WHERE {where}", args).rowcount
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        return removed, paths

    # -- reads -------------------------------------------------------------------
    def view(self, job_id: str, *, owner: str | None = None) -> JobView | None:
        """The job ``job_id`` (of ``owner`` only, when given), or None."""
        where, args = _filter(ids=None, owner=owner)
        rows = self._run(f"SELECT {_VIEW_COLUMNS} FROM jobs WHERE id = ? AND {where}", (job_id, *args))
        return _view(rows[0]) if rows else None

    def views(self, *, state: str | None = None, client: str | None = None, owner: str | None = None,
              limit: int = 100) -> list[JobView]:
        """The newest ``limit`` jobs (filtered by state, client and owner), newest first."""
        where, args = _filter(client=client or None, owner=owner, states=(state,) if state else ())
        rows = self._run(f"SELECT {_VIEW_COLUMNS} FROM jobs WHERE {where} ORDER BY seq DESC LIMIT ?", (*args, limit))
        return [_view(row) for row in rows]

    def ids(self, *, ids=None, client: str | None = None, owner: str | None = None, states=()) -> list[str]:
        """The ids of the jobs among ``ids`` (None: any) of ``client`` and ``owner`` (None: any) in
        ``states``, oldest first."""
        where, args = _filter(ids=ids, client=client, owner=owner, states=states)
        return [row[0] for row in self._run(f"SELECT id FROM jobs WHERE {where} ORDER BY seq", args)]

    def owners(self, ids) -> dict[str, str | None]:
        """``{job id: owner}`` of the jobs among ``ids``."""
        where, args = _filter(ids=ids)
        return dict(self._run(f"SELECT id, owner FROM jobs WHERE {where}", args))

    def usage(self, owner: str | None, client: str) -> tuple[int, int]:
        """``(jobs, source bytes)`` an account keeps: every job of ``owner`` (a token's client), or
        with no owner the jobs of the ``client`` tag that no token's client owns."""
        with self._lock:
            return self._usage(owner, client)

    def _usage(self, owner: str | None, client: str) -> tuple[int, int]:
        where, args = ("owner = ?", (owner,)) if owner is not None else ("owner IS NULL AND client = ?", (client,))
        jobs, kept = self._db.execute(f"SELECT COUNT(*), COALESCE(SUM(source_bytes), 0) FROM jobs WHERE {where}",
                                      args).fetchone()
        return jobs, kept

    def names_source(self, path: str) -> bool:
        """Whether a job still names the source file ``path``."""
        return bool(self._run("SELECT 1 FROM jobs WHERE source_path = ? LIMIT 1", (path,)))

    def done_with(self, dedup_key: str, owner: str | None) -> JobView | None:
        """The newest finished job of ``owner`` with this content and options (for deduplication).
        Another owner's is never one: its id (``same_as``) and its record (which names the solution
        by that job) would tell one tenant of another's job, which the service keeps from it."""
        rows = self._run(f"SELECT {_VIEW_COLUMNS} FROM jobs WHERE dedup_key = ? AND state = ? AND same_as IS NULL "
                         "AND owner IS ? ORDER BY seq DESC LIMIT 1", (dedup_key, JobState.DONE.value, owner))
        return _view(rows[0]) if rows else None

    def waiting(self) -> list[dict]:
        """Jobs not yet scheduled, oldest first: ``{id, state, client, owner, priority, world_size, submission,
        job}``.

        The scheduler asks on every pass; a submission (its source text) is read
        and parsed once, on the first pass that sees it, and kept while the job
        waits (1000 waiting submissions of 24 KB took 82 ms a pass parsed anew)."""
        rows = self._run("SELECT id, state, client, priority, world_size, job, owner FROM jobs "
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
                 "submission": known[r[0]], "job": json.loads(r[5]) if r[5] else None, "owner": r[6]}
                for r in rows]

    def counts(self) -> dict[str, int]:
        return dict(self._run("SELECT state, COUNT(*) FROM jobs GROUP BY state"))

    def open_by_client(self, *, owner: str | None = None) -> dict[str, int]:
        """Unfinished jobs by client tag (of ``owner`` only, when given)."""
        where, args = _filter(owner=owner)
        return dict(self._run(f"SELECT client, COUNT(*) FROM jobs WHERE state NOT IN (?, ?) AND {where} "
                              "GROUP BY client", (JobState.DONE.value, JobState.CANCELLED.value, *args)))

    def started_since(self, since: float) -> int:
        """Jobs that left the queue for a group since ``since`` (their last start): the rate at which
        a full queue makes room (a job answered at submission never queued, and is not counted)."""
        return self._run("SELECT COUNT(*) FROM jobs WHERE started_at >= ?", (since,))[0][0]

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


def _filter(*, ids=None, client: str | None = None, owner: str | None = None, states=()) -> tuple[str, tuple]:
    """A ``WHERE`` clause and its arguments: jobs among ``ids`` (None: any; ids are bound as JSON,
    so a bulk cancel of thousands is one statement), of ``client`` (None: any), submitted by the
    token client ``owner`` (None: any), in ``states``."""
    where, args = ["1"], []
    if ids is not None:
        where.append("id IN (SELECT value FROM json_each(?))")
        args.append(json.dumps(list(ids)))
    if client is not None:
        where.append("client = ?")
        args.append(client)
    if owner is not None:
        where.append("owner = ?")
        args.append(owner)
    if states:
        where.append(f"state IN ({', '.join('?' * len(states))})")
        args += [JobState(s).value for s in states]
    return " AND ".join(where), tuple(args)


def _rerun(job_json: dict, reason: str) -> dict:
    """A job's JSON (:class:`Job`'s form) with ``reason`` added to its ``reruns``."""
    job = Job.from_json(job_json)
    return attrs.evolve(job, reruns=(*(job.reruns or ()), reason)).to_json()


# The reruns come from the job, so a view says them while the job waits and runs again.
_VIEW_COLUMNS = ("id, state, client, priority, problem, backend, world_size, submitted_at, started_at, "
                 "finished_at, note, same_as, record, json_extract(job, '$.reruns')")


def _view(row) -> JobView:
    (job_id, state, client, priority, problem, backend, world_size, submitted, started, finished, note,
     same_as, record, reruns) = row
    return JobView(id=job_id, state=state, client=client, priority=priority, problem=problem, backend=backend,
                   world_size=world_size, submitted_at=submitted, started_at=started, finished_at=finished,
                   note=note or "", same_as=same_as, reruns=tuple(json.loads(reruns)) if reruns else None,
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

