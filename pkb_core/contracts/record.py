"""A job's record: what ``records.jsonl`` holds, one line per job, and what ``pkb run --json`` prints.

Written only by the launcher (and by the CLI for jobs it refuses before any
launch: ``unsupported`` world sizes), through :func:`pkb_core.results.records.job_record`;
read by every report. docs/timing.md explains the timing fields. Read
leniently: fields a record has that this pkb does not know are kept in
``extra`` and written back unchanged.
"""
from __future__ import annotations

import attrs

from pkb_core.contracts.feedback import Feedback
from pkb_core.contracts.job import Built
from pkb_core.contracts.serial import Contract, optional
from pkb_core.contracts.timing import Floor, Timing
from pkb_core.contracts.verdict import Verdict


@attrs.frozen(kw_only=True)
class TimingOptions(Contract):
    """How a timed job was sampled (``pkb run --warmup/--iters/--min-iters/--timing-mode``)."""

    UNKNOWN = "keep"

    warmup: int
    iters: int
    #: None in records written before the stopping rule (the fixed count was `iters`).
    min_iters: int | None = optional()
    timing_modes: tuple[str, ...]
    extra: dict = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class Record(Contract):
    """One job's outcome."""

    UNKNOWN = "keep"

    #: The job's key (:class:`pkb_core.contracts.job.Job`): a rerun skips recorded keys.
    key: str
    problem_id: int
    problem: str
    category: str
    backend: str
    #: The solution's label (its path, its file name among a backend's samples, or ``reference``).
    solution: str
    world_size: int
    size: str
    dtype: str
    mode: str
    verdict: Verdict = attrs.field(converter=Verdict)
    #: Why, in one line, when the verdict is not ``pass`` (or what a pass should know).
    reason: str = ""
    #: Checked trials that passed.
    trials: int = 0
    #: Every timing mode (timed jobs only).
    stats: Timing | None = optional()
    options: TimingOptions | None = optional()
    #: The headline mode's medians (max over ranks) and their ratio.
    reference_ms: float | None = optional()
    solution_ms: float | None = optional()
    speedup: float | None = optional()
    timing_mode: str | None = optional()
    #: The 95 % intervals of the medians and of the speedup, and the reading (docs/timing.md).
    reference_ci_ms: tuple[float, float] | None = optional()
    solution_ci_ms: tuple[float, float] | None = optional()
    clock: str | None = optional()
    speedup_ci: tuple[float, float] | None = optional()
    difference: str | None = optional()
    #: The speedup pkb claims: ``speedup`` where its 95 % interval excludes 1.0
    #: (``difference`` is ``faster`` or ``slower``) and the headline is the judge's own clock
    #: (:data:`pkb_core.contracts.modes.CLAIMABLE_MODES`), else None (no measurable
    #: difference, too few rounds to tell, untimed, or a headline of a launcher-clock mode, whose
    #: batches the candidate's process runs). The field a reward reads (docs/reports.md); None
    #: in records written before it existed.
    claimed_speedup: float | None = optional()
    #: Speed of light, with each side's fraction of it.
    sol: Floor | None = optional()
    #: When (UTC), by which pkb, how long the job took, and on what.
    datetime: str = ""
    pkb_version: str = ""
    seconds: float | None = None
    machine: dict = attrs.field(factory=dict)
    #: Host barriers the candidate called (counted, and inside its time): the candidate's own
    #: account (counted from lines its process wrote), a diagnostic that decides nothing.
    barriers: int | None = optional()
    #: Lockdown layers this system could not apply (docs/trust.md), as the candidate's rank
    #: reported them after its setup: its own account, a diagnostic that decides nothing.
    lockdown_gaps: tuple[str, ...] | None = optional()
    #: What pkb noted about the job besides its verdict (its log reached its cap and the rest was dropped).
    notes: tuple[str, ...] | None = optional()
    #: Why the job ran more than once: one line for each earlier run of it that was lost with its
    #: group, oldest first (the reward service runs such a job again: docs/serve.md, "Faults");
    #: the verdict is the last run's. None when it ran once.
    reruns: tuple[str, ...] | None = optional()
    #: Wall seconds of the job's phases and commands.
    phase_seconds: dict | None = optional()
    compile: Built | None = optional()
    #: What pkb tells the model that wrote the solution (docs/generation.md, "Feedback");
    #: None in records written before it existed.
    feedback: Feedback | None = optional()
    extra: dict = attrs.field(factory=dict)

    @property
    def passed(self) -> bool:
        return self.verdict == Verdict.PASS

    @property
    def timed(self) -> bool:
        """Whether both sides' headline medians are known."""
        return self.reference_ms is not None and self.solution_ms is not None
