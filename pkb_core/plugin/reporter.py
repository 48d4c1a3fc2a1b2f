"""Where a run's results go as they are made: the report hooks, and the stop flag.

pkb makes each record once — the launcher from a job's outcome, the compile
phase for a solution that did not build, the plan for a world size a problem
refuses — writes it to the run directory, and hands it to :meth:`Reporter.job`,
which calls the ``pkb_report_job`` hook of every plugin registered for the run
(:mod:`pkb_core.plugin.hookspecs`): the progress display, ``-x``,
``--junitxml`` and the reward service are such plugins. Builds are reported the
same way (``pkb_report_build``).

An observer that wants the run to end calls :meth:`Reporter.stop`; the
launcher checks the flag between jobs and never interrupts one, so every job
that ran has its record and the others have none (``pkb run -x``).
"""
from __future__ import annotations


class Reporter:
    """The report hooks of one run, and its stop flag.

    :param pm: the run's plugin manager (its registered plugins observe the
        run); ``None`` reports to nobody (a SLURM shard: its records are read
        back by the submitting process, which reports them).
    """

    def __init__(self, pm=None):
        self._hook = pm.hook if pm is not None else None
        #: Why an observer asked the run to stop, or None.
        self.stop_reason: str | None = None
        #: Every record reported, in order (what an interrupted run had made).
        self.records: list = []

    def job(self, record) -> None:
        """``record`` has been written: tell every observer."""
        self.records.append(record)
        if self._hook is not None:
            self._hook.pkb_report_job(record=record, reporter=self)

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
