"""Where a launch takes its jobs from: a list (``pkb run``) or a feed that waits for
the next job (the reward service's lanes, :mod:`pkb_core.serve.lane_process`).

A :class:`pkb_core.launch.launcher.Launch` asks its feed for one job at a time
and, while more may follow, starts the next job's candidate group ahead; a feed
that waits keeps the launch warm between jobs: its judge's ranks, its zygotes
and a candidate group ready for whatever job comes next.
"""
from __future__ import annotations

from pkb_core.contracts.job import Job


class JobFeed:
    """Where a :class:`Launch` takes its jobs from, one at a time (a subclass overrides both)."""

    def next_job(self) -> Job | None:
        """The next job, waiting for one if need be; None ends the launch."""
        raise NotImplementedError

    def more_expected(self) -> bool:
        """Whether a job may follow the one just taken (then the launch starts its
        candidate group ahead, off the next job's critical path)."""
        raise NotImplementedError


    def started(self, launch) -> None:
        """The job just taken is about to run in ``launch`` (its candidate group is
        :attr:`launch.current <pkb_core.launch.launcher.Launch.current>`): a feed that
        was told to cancel it meanwhile calls ``launch.cancel_current()`` here."""


class ListFeed(JobFeed):
    """The jobs of a list, in order (``pkb run``)."""

    def __init__(self, jobs):
        self._jobs = list(jobs)

    def next_job(self) -> Job | None:
        return self._jobs.pop(0) if self._jobs else None

    def more_expected(self) -> bool:
        return bool(self._jobs)
