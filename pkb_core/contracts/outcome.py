"""How a job ends, as the launcher's conduct of it concludes: :class:`JobEnded` (raised
where the job cannot go on, with its verdict and reason) and :class:`Outcome` (what a
job concluded, before :func:`pkb_core.results.records.job_record` makes it a record)."""
from __future__ import annotations

from dataclasses import dataclass, field

from pkb_core.contracts.timing import Timing
from pkb_core.contracts.verdict import Verdict


class JobEnded(Exception):
    """The job cannot go on: ``verdict`` and ``reason`` are its record's."""

    def __init__(self, verdict: str, reason: str, finding: dict | None = None):
        super().__init__(f"{verdict}: {reason}")
        self.verdict = verdict
        self.reason = reason
        #: The judge's structured detail of a wrong answer (rank, output, elements), if any.
        self.finding = finding


@dataclass
class Outcome:
    """What a job concluded, before it becomes a record."""

    verdict: Verdict = Verdict.PASS
    reason: str = ""
    trials: int = 0
    timing: Timing | None = None
    barriers: int = 0
    lockdown: list = field(default_factory=list)
    #: Wall seconds of each phase (``ready``, ``setup``, ``trials``, ``timing``, ``stop``), and
    #: under ``commands`` of each command to either side.
    phases: dict = field(default_factory=dict)
    #: The judge's structured detail of a wrong answer (:class:`JobEnded`'s ``finding``).
    finding: dict | None = None
    #: What was running when the job ended otherwise than by passing (``trial 2: the
    #: candidate's `trial` command``), for a timeout's or a crash's feedback.
    running: str | None = None
    #: What pkb noted about the job besides its verdict (its log reached its cap).
    notes: list = field(default_factory=list)
