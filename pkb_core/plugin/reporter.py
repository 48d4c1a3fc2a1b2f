"""Where a run's results go as they are made: the report hooks, and the stop flag.

pkb makes each record once — the launcher from a job's outcome, the compile
phase for a solution that did not build, the plan for a world size a problem
refuses — writes it, and hands it to :meth:`Reporter.job`, which calls the
``pkb_report_job`` hook of every plugin registered for the run
(:mod:`pkb_core.plugin.hookspecs`): the progress display, ``-x``,
``--junitxml`` and the reward service's store are such plugins. Builds are
reported the same way (``pkb_report_build``). Every way into a run reports
through one reporter, its session's (:mod:`pkb_core.launch.session`); the
reward service re-reports each lane's records there, as pytest-xdist's
controller re-fires its workers' reports.

A reporter holds the run's own observers (``observers``): registered on the
plugin manager while it is open (``with reporter:``), so they see this run
only; the plugins installed through entry points see every run.

An observer that wants the run to end calls :meth:`Reporter.stop`; the
launcher checks the flag between jobs and never interrupts one, so every job
that ran has its record and the others have none (``pkb run -x``).
"""
from __future__ import annotations

import threading


class Reporter:
    """The report hooks of one run, its observers, and its stop flag.

    :param pm: the run's plugin manager (its registered plugins observe the
        run); ``None`` reports to nobody (a SLURM shard, a lane: their records
        are read back by the process that reports them).
    :param observers: plugins of this run alone (objects with ``pkb_report_*``
        hook implementations), registered while the reporter is open.
    :param keep: keep every record in :attr:`records` (a service, which runs for
        weeks, keeps none: its store holds them).
    """

    def __init__(self, pm=None, observers=(), *, keep: bool = True):
        self._pm = pm
        self._hook = pm.hook if pm is not None else None
        self.observers = list(observers)
        self._keep = keep
        self._registered: list = []
        # The service reports from its scheduler's thread and from the threads that answer a
        # submission at once: one record at a time reaches the observers.
        self._lock = threading.RLock()
        #: Why an observer asked the run to stop, or None.
        self.stop_reason: str | None = None
        #: Every record reported, in order (what an interrupted run had made).
        self.records: list = []
        #: The id the way in gave the job whose record is being reported (the service's job id),
        #: while its observers run; None elsewhere.
        self.job_id: str | None = None

    def open(self) -> Reporter:
        """Register the run's observers (each once)."""
        if self._pm is not None:
            for observer in self.observers:
                if observer not in self._registered and not self._pm.is_registered(observer):
                    self._pm.register(observer)
                    self._registered.append(observer)
        return self

    def close(self) -> None:
        """Unregister what :meth:`open` registered."""
        while self._registered:
            self._pm.unregister(self._registered.pop())

    def __enter__(self) -> Reporter:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    def job(self, record, job_id: str | None = None) -> None:
        """``record`` has been written: tell every observer (``job_id``: the way in's name for its job)."""
        with self._lock:
            if self._keep:
                self.records.append(record)
            if self._hook is not None:
                self.job_id = job_id
                try:
                    self._hook.pkb_report_job(record=record, reporter=self)
                finally:
                    self.job_id = None

    def build(self, solution: str, result, done: int, total: int) -> None:
        """The compile phase finished ``solution`` (``done`` of ``total``)."""
        if self._hook is not None:
            self._hook.pkb_report_build(solution=solution, result=result, done=done, total=total)

    def stop(self, reason: str) -> None:
        """Ask the run to start no further job (the first reason is kept)."""
        if self.stop_reason is None:
            self.stop_reason = reason

    @property
    def stopped(self) -> bool:
        return self.stop_reason is not None
