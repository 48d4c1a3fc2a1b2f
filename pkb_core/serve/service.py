"""The reward service's core, without HTTP: submit, read, wait, cancel, list, statistics.

:class:`Service` joins the intake (:mod:`pkb_core.serve.intake`), the SQLite
store (:mod:`pkb_core.serve.store`) and the scheduler
(:mod:`pkb_core.serve.scheduler`). The HTTP app (:mod:`pkb_core.serve.app`)
is a thin layer over it; tests and embedders may call it directly.

Deduplication: a submission whose source, problem and options equal a finished
job's of the same owner is answered at once with that job's record (a new job id, ``same_as``
naming the original), unless it asks for a ``fresh`` run; another token's job is never one (its
id would leak). Overload: more than
``max_queued`` jobs waiting refuses new ones (HTTP 429 with a Retry-After).
One service per data directory: it holds the folder's lock
(:mod:`pkb_core.serve.data_lock`) from its construction to :meth:`Service.stop`.

Who asks: every method takes the ``caller`` (:class:`pkb_core.serve.access.Caller`; default
the admin, as for an embedder such as :class:`pkb_core.ray.EvaluatorPool`). A token's client
submits jobs of its own and sees, lists and cancels only those: another's job is "no job", as
an unknown id. Storage: each account keeps at most its quota of jobs and source bytes
(:mod:`pkb_core.serve.quota`), and finished jobs leave after the retention
(:mod:`pkb_core.serve.retention`, pruned at :meth:`Service.start` and hourly).

Its jobs are planned, settled and reported by one session
(:class:`pkb_core.launch.session.Session`), as ``pkb run``'s are: the intake plans through
it, each lane's launch settings are made by it, and every record — a lane's, the compile
pool's, one answered at intake — is handed to its reporter, whose first observer is the store
(:class:`pkb_core.serve.store.StoreObserver`); the plugins' ``pkb_report_job`` sees each job
once, as it does under ``pkb run``.
"""
from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

import attrs

from pkb_core.compile.source_defects import source_bytes
from pkb_core.contracts.serve import CancelRequest, Cancelled, Health, JobState, JobView, QueueStats, Submission
from pkb_core.serve.access import ADMIN, Caller
from pkb_core.serve.data_lock import DataLock
from pkb_core.serve.intake import Intake
from pkb_core.serve.refusal import Refused
from pkb_core.serve.quota import DEFAULT_MAX_JOBS, DEFAULT_MAX_SOURCE_BYTES, Quota
from pkb_core.serve.retention import Pruned, Retention, SourcesGuard
from pkb_core.serve.scheduler import Scheduler
from pkb_core.serve.store import WAITING, JobStore, StoreObserver

#: The longest span (s) over which the rate of jobs leaving the queue for a group sets a full queue's ``Retry-After``.
RATE_SPAN_S = 3600.0
#: The client tag of a submission that names none (:class:`Submission`'s default); a token's
#: client submitting one gets its own name as the tag.
UNTAGGED = attrs.fields(Submission).client.default


@dataclass
class ServiceConfig:
    """How ``pkb serve`` was started (its options, checked by the command)."""

    data_dir: Path
    device: str
    #: Devices groups may use: the node's GPUs, or CPU rank slots in CPU mode.
    devices: int
    max_queued: int = 1000
    max_source_bytes: int = 512 << 10
    #: Seconds a job may run (None: ``pkb run``'s default for the device); a submission may ask for less.
    job_timeout: float | None = None
    max_timeout: float = 3600.0
    build_workers: int | None = None
    build_timeout: float = 600.0
    #: Seconds a job waits for a group its placement can never hold (a Ray cluster without a node
    #: of its world size) before it is recorded as ``error``.
    place_timeout: float = 600.0
    #: Each job's limits (``--memory-limit``, ``--max-processes``, ``--log-cap``: the
    #: :func:`pkb_core.launch.plan.launch_settings` keywords; absent: the machine's defaults).
    limits: dict = field(default_factory=dict)
    #: Jobs, and bytes of source, one client keeps at most (:mod:`pkb_core.serve.quota`).
    client_max_jobs: int = DEFAULT_MAX_JOBS
    client_max_source_bytes: int = DEFAULT_MAX_SOURCE_BYTES
    #: Days a finished job is kept (0: for ever; :mod:`pkb_core.serve.retention`).
    retention_days: float = 30.0


def write_copy(run_dir: Path, record) -> None:
    """Append ``record`` to ``run_dir``'s ``records.jsonl``: a record of the service that no
    launch wrote there. The store's copy is the client's answer; one that cannot be written here
    (a full disk) is a line on the service's stderr, never a job left unfinished."""
    import sys

    from pkb_core.errors import PkbError, describe
    from pkb_core.results.records import append_record

    try:
        append_record(run_dir, record)
    except (OSError, PkbError) as exc:
        print(f"pkb serve: the record of {record.solution} could not be written to {run_dir}: {describe(exc)}",
              file=sys.stderr)


def private_folder(path: Path) -> None:
    """Make ``path`` (the service's data directory) a folder only its owner may enter (0700).
    Jobs and builds never see it at all (the lockdown hides it: docs/trust.md); the mode keeps
    the machine's other users out too."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)


class Overloaded(Refused):
    """The queue is full: HTTP 429, with the seconds to wait."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message, 429)
        self.retry_after = retry_after


class Service:
    """See the module docstring. :meth:`start` recovers the jobs a killed service left.

    :param placement: where its groups run (:mod:`pkb_core.serve.placement`); default this node's devices.
    :param pkb_config: the pkb configuration (:class:`pkb_core.config.Config`: each backend's
        ``[backends.<name>]`` options); default none.
    """

    def __init__(self, config: ServiceConfig, pm, placement=None, *, pkb_config=None):
        from pkb_core.compile.resources import default_workers
        from pkb_core.launch.session import Session

        # Absolute: a lane may start elsewhere (a Ray actor's working folder) and is told its run folder.
        config.data_dir = Path(config.data_dir).absolute()
        self.config = config
        self.pm = pm
        data = config.data_dir
        # First: a second service on the folder is refused before it reads or changes anything there.
        self.data_lock = DataLock.acquire(data)
        try:
            private_folder(data)  # its queue and every client's sources: the service's alone
            self.store = JobStore(data / "jobs.sqlite")
            # A service runs for weeks: its reporter keeps no records (the store holds them).
            self.session = Session(pm, pkb_config, device=config.device, observers=[StoreObserver(self.store)],
                                   keep_records=False)
            self.intake = Intake(self.session, devices=config.devices, sources=data / "sources",
                                 max_source_bytes=config.max_source_bytes, job_timeout=config.job_timeout,
                                 max_timeout=config.max_timeout)
            self.quota = Quota(config.client_max_jobs, config.client_max_source_bytes, config.retention_days)
            self.sources_guard = SourcesGuard()
            self.retention = Retention(self.store, data / "sources", config.retention_days, self.sources_guard,
                                       runs=data / "runs")
            self.scheduler = Scheduler(self.store, devices=config.devices, data_dir=data,
                                       settings_for=self._settings_for, lane_key_of=self._lane_key_of,
                                       report=self._report, build_workers=config.build_workers or default_workers(64),
                                       placement=placement, place_timeout=config.place_timeout)
            self.session.reporter.open()  # its observers, the store first, for the service's life
        except BaseException:
            self.data_lock.release()
            raise
        self.started = time.time()
        self.recovered = 0
        #: What the prune at start removed: ``(jobs, source files)``.
        self.pruned = Pruned(0, 0, 0)

    def start(self) -> None:
        self.recovered = self.store.recover()
        self.pruned = self.retention.start()  # before the first request: what is kept is what is served
        self.scheduler.start()
        self.scheduler.wake()

    def stop(self) -> None:
        self.retention.stop()
        self.scheduler.stop()
        self.session.reporter.close()
        self.store.close()
        self.data_lock.release()

    # -- what lanes need ---------------------------------------------------------------
    def _lane_key_of(self, submission: Submission, world_size: int) -> tuple:
        """The lane of a job the intake did not plan in this process (one recovered after a restart)."""
        return self.intake.lane_key(submission, world_size)

    def run_dir(self, backend: str, world_size: int) -> Path:
        """The run directory of the jobs of ``backend`` at ``world_size``: their records and logs."""
        return self.config.data_dir / "runs" / f"{backend}-W{world_size}"

    def _report(self, job_id: str, record, *, write: bool = False) -> None:
        """A job's record, from wherever it was made: to the session's observers (the store first).
        ``write``: a record the service made itself (at intake, or the scheduler's), which it also
        writes to the job's run directory, where its lanes and builds write theirs, so ``pkb report``
        of that folder counts every job."""
        if write:
            write_copy(self.run_dir(record.backend, record.world_size), record)
        self.session.report(record, job_id=job_id)

    def _settings_for(self, key: tuple):
        """The launch settings of a lane for ``(backend, world size, timeout)``, with the machine's
        ceilings (the physics floor and speed of light of timed jobs, read once per service), as
        ``pkb run --measure-perf`` has them, in CPU mode too."""
        backend, world_size, timeout = key
        self.intake.backend(backend)  # still installed and able to run here
        session = self.session.sibling(backend=backend, world_size=world_size)
        return session.settings(self.run_dir(backend, world_size), calibrated=True, job_timeout=timeout,
                                build_timeout=self.config.build_timeout, build_workers=1,
                                hidden=(self.config.data_dir,), **self.config.limits)

    # -- the API ------------------------------------------------------------------------
    def submit(self, submission: Submission, caller: Caller = ADMIN) -> JobView:
        """Queue ``submission`` (or answer it at once: from an identical finished job, ``compile-error``
        for a source that is no solution file, ``unsupported`` for a world size its problem refuses);
        :class:`Refused` / :class:`Overloaded` when its request cannot be queued,
        :class:`~pkb_core.serve.quota.OverQuota` when its account keeps its quota already."""
        if caller.owner is not None and submission.client == UNTAGGED:
            submission = attrs.evolve(submission, client=caller.owner)
        waiting = sum(n for state, n in self.store.counts().items() if JobState(state) in WAITING)
        if waiting >= self.config.max_queued:
            raise Overloaded(f"the queue is full ({waiting} jobs waiting, at most {self.config.max_queued})",
                             retry_after=self._retry_after(waiting))
        account = caller.owner if caller.owner is not None else submission.client
        size = len(source_bytes(submission.source))
        # Refused before its source is written; checked again, exactly, as the job is added.
        jobs, kept = self.store.usage(caller.owner, submission.client)
        self.quota.admit(account, jobs=jobs, source_bytes=kept,
                         adding_bytes=size if size <= self.config.max_source_bytes else 0)
        with self.sources_guard.shared():  # its source file is not pruned before its row names it
            return as_seen_by(self._submit(submission, caller.owner, account), caller)

    def _submit(self, submission: Submission, owner: str | None, account: str) -> JobView:
        from pkb_core.results.records import job_record
        from pkb_core.contracts.verdict import Verdict

        job_id = f"j{int(time.time() * 1000):x}{secrets.token_hex(4)}"
        planned = self.intake.plan(submission, job_id, owner)
        submission = planned.submission

        def admit(*, jobs: int, source_bytes: int) -> None:
            self.quota.admit(account, jobs=jobs, source_bytes=source_bytes, adding_bytes=planned.kept_bytes)

        common = dict(problem=planned.problem, world_size=planned.world_size, dedup_key=planned.dedup_key,
                      job_json=planned.job.to_json(), owner=owner, source_bytes=planned.kept_bytes,
                      source_path=planned.source_path, admit=admit)
        if not submission.fresh:
            earlier = self.store.done_with(planned.dedup_key, owner)
            if earlier is not None and earlier.record is not None:
                self.store.add(job_id, submission, state=JobState.DONE, record=earlier.record, same_as=earlier.id,
                               note=f"the same source and options as {earlier.id}: its record", **common)
                return self.store.view(job_id)
        answered_now = ((Verdict.COMPILE_ERROR, planned.compile_error) if planned.compile_error is not None else
                        (Verdict.UNSUPPORTED, planned.refusal) if planned.refusal is not None else None)
        if answered_now is not None:
            record = job_record(planned.job, planned.world_size, *answered_now)
            self.store.add(job_id, submission, state=JobState.DONE, record=record, **common)
            self._report(job_id, record, write=True)
            return self.store.view(job_id)
        self.scheduler.lane_keys[job_id] = planned.lane_key
        self.store.add(job_id, submission, **common)
        self.scheduler.wake()
        return self.store.view(job_id)

    def _retry_after(self, waiting: int) -> int:
        """Seconds until the queue likely has room for one more (1 to 600): the jobs over its bound
        (and one) at the rate jobs left it for a group lately, over the last hour or since the
        service started, if later (the whole queue at an hour's rate, a service up for a minute told
        a service user 600 s for a queue that emptied in 1.4 s); 30 before any job started."""
        now = time.time()
        span = max(1.0, min(RATE_SPAN_S, now - self.started))
        per_second = self.store.started_since(now - span) / span
        over = max(1, waiting - self.config.max_queued + 1)
        return int(min(600, max(1, round(over / per_second)))) if per_second > 0 else 30

    def view(self, job_id: str, caller: Caller = ADMIN) -> JobView:
        """The job; 404 for an unknown one and for another client's alike (ids do not leak)."""
        view = self.store.view(job_id, owner=caller.owner)
        if view is None:
            raise Refused(f"no job {job_id!r}", 404)
        return as_seen_by(view, caller)

    def cancel(self, job_id: str, caller: Caller = ADMIN) -> JobView:
        view = self.view(job_id, caller)
        if not view.state.final:
            self.scheduler.cancel(job_id)
        return self.view(job_id, caller)

    def cancel_jobs(self, request: CancelRequest, caller: Caller = ADMIN) -> Cancelled:
        """Cancel the unfinished jobs ``request`` selects among the caller's (a client's own; the
        admin's: every job), in one call: the waiting ones at once (one transaction), the running
        ones by killing their candidates."""
        if request.ids is None and request.client is None and not request.all:
            raise Refused("say which jobs to cancel: ids, client, or all: true")
        selection = dict(ids=request.ids, client=request.client, owner=caller.owner)
        cancelled = self.store.cancel_waiting(**selection)
        for job_id in cancelled:
            self.scheduler.cancelled_waiting(job_id)
        running = self.store.ids(**selection, states=(JobState.RUNNING,))
        for job_id in running:
            self.scheduler.cancel(job_id)
        return Cancelled(cancelled=tuple(cancelled), stopping=tuple(running))

    def jobs(self, *, state: str | None = None, client: str | None = None, limit: int = 100,
             caller: Caller = ADMIN) -> list[JobView]:
        """The newest jobs the caller may see (a client: its own)."""
        if state is not None and state not in {s.value for s in JobState}:
            raise Refused(f"state {state!r} is not one of {', '.join(s.value for s in JobState)}")
        if not 1 <= limit <= 10_000:
            raise Refused(f"limit {limit} is out of range (1 to 10000)")
        return [as_seen_by(view, caller) for view in
                self.store.views(state=state, client=client, owner=caller.owner, limit=limit)]

    def stats(self, caller: Caller = ADMIN) -> QueueStats:
        """The queue at a glance. A client sees every state's count and every group, but the client
        tags of its own jobs only, and a group's job id only when the job is its own."""
        groups = tuple(self.scheduler.groups())
        if caller.owner is not None:
            owners = self.store.owners([g.job for g in groups if g.job])
            groups = tuple(g if g.job is None or owners.get(g.job) == caller.owner else attrs.evolve(g, job=None)
                           for g in groups)
        return QueueStats(states=self.store.counts(), clients=self.store.open_by_client(owner=caller.owner),
                          groups=groups,
                          devices=self.config.devices, devices_held=sum(len(g.devices) for g in groups),
                          builds_running=len(self.scheduler.building),
                          done_last_hour=self.store.done_since(time.time() - 3600),
                          max_queued=self.config.max_queued)

    def health(self) -> Health:
        from pkb_core import __version__

        return Health(ok=True, version=__version__, device=self.config.device, devices=self.config.devices,
                      uptime_s=round(time.time() - self.started, 3))


def as_seen_by(view: JobView, caller: Caller) -> JobView:
    """``view`` as ``caller`` may see it: a token's client gets its record without ``compile`` (the
    build's seconds and whether the build cache had it), since that cache is shared by content
    across clients and ``cached`` told one tenant that another had submitted the same source (a
    hostile review's probe of a guessed source). The admin, and the run folders, keep all of it."""
    if caller.owner is None or view.record is None or view.record.compile is None:
        return view
    return attrs.evolve(view, record=attrs.evolve(view.record, compile=None))
