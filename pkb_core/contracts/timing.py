"""A job's timing, as the launcher measures it and as its record keeps it (``stats``).

Built by :mod:`pkb_core.conduct.timed_rounds` from the rounds of every timing
mode (:mod:`pkb_core.harness.timing`, :mod:`pkb_core.conduct.intervals`,
:mod:`pkb_core.machine.roofline`); read by
reports, plots, ``pkb compare`` and the noise floor. Every time is in ms.
docs/timing.md says what each number means. Read leniently (``UNKNOWN =
"keep"``): run directories outlive pkb versions.
"""
from __future__ import annotations

import attrs

from pkb_core.contracts.serial import Contract, optional


@attrs.frozen(kw_only=True)
class SideStats(Contract):
    """One side's (the reference's or the candidate's) calls in one mode, by the launcher's clock.

    Since records carry ``ModeTiming.calls_per_batch``, every value is one batch's
    wall time over its calls (the launcher's clock around the whole batch, all
    ranks); older records kept each call's self-reported time, max over ranks."""

    UNKNOWN = "keep"

    min: float
    p10: float
    median: float
    p90: float
    max: float
    mean: float
    stddev: float
    #: How many calls were timed (the name is kept for old records).
    rounds: int
    #: The median's distribution-free interval over the rounds' medians (None below 6 rounds).
    ci_low: float | None = optional()
    ci_high: float | None = optional()
    ci_level: float | None = optional()
    #: The interval's half-width relative to the median.
    ci_rel: float | None = optional()
    #: How many values the interval came from (rounds).
    ci_units: int | None = optional()
    extra: dict = attrs.field(factory=dict)


#: What a speedup reads as (:attr:`Speedup.difference`): its 95 % interval lies above 1.0, below it,
#: or contains it (pkb_core.conduct.intervals decides).
FASTER, SLOWER, SAME = "faster", "slower", "no measurable difference"


@attrs.frozen(kw_only=True)
class Speedup(Contract):
    """Reference over candidate in one mode: the median of the rounds' paired ratios and its
    interval (:func:`pkb_core.conduct.intervals.speedup`)."""

    UNKNOWN = "keep"

    #: The median of the rounds' ``reference / candidate`` ratios, inside ``[low, high]`` (records
    #: before 2026-11-29: the ratio of the two sides' medians); None in records that say ``too few
    #: rounds to tell``, where there is no interval.
    value: float | None
    #: The interval over the rounds' paired ratios (None with fewer than 6 rounds).
    low: float | None = optional()
    high: float | None = optional()
    level: float | None = optional()
    rounds: int = 0
    #: ``faster``, ``slower``, ``no measurable difference`` or ``too few rounds to tell``
    #: (no interval; older records said ``no measurable difference`` there): what reports count as a win.
    difference: str = "no measurable difference"
    extra: dict = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class CrossCheck(Contract):
    """One mode's self-reported times against the launcher's clock: written by
    versions that used the candidate's own times (then cross-checked them); read
    back from old records, never written now."""

    UNKNOWN = "keep"

    reference_overhead_ms: float
    candidate_overhead_ms: float
    allowance_ms: float
    reference_overhead_median_ms: float
    candidate_overhead_median_ms: float
    batches: int
    #: Why the candidate's times cannot be believed, or None.
    flag: str | None = None
    extra: dict = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class Floor(Contract):
    """Speed of light: the least time one call can take at the calibrated rates (:mod:`pkb_core.machine.roofline`)."""

    UNKNOWN = "keep"

    floor_ms: float
    #: Which term dominates: ``link``, ``memory`` or ``compute``.
    bound: str
    link_ms: float
    hbm_ms: float
    compute_ms: float
    #: Added by the record: the floor over each side's median.
    reference_fraction: float | None = optional()
    solution_fraction: float | None = optional()
    extra: dict = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class ModeTiming(Contract):
    """One timing mode: both sides, the speedup, why sampling stopped; or why the mode could not run."""

    UNKNOWN = "keep"

    reference: SideStats | None = optional()
    candidate: SideStats | None = optional()
    speedup: Speedup | None = optional()
    #: ``precise``, ``cap`` or ``time`` (:mod:`pkb_core.conduct.stopping`).
    stopped: str | None = optional()
    #: Rounds timed.
    batches: int | None = optional()
    #: Per side: ``device barrier``, or why only the host barrier aligned the ranks.
    alignment: dict | None = optional()
    #: Why this mode was not timed (the problem mutates its arguments, no GPU, ...).
    unavailable: str | None = optional()
    #: Calls in each timed batch (None in records from before times came from the launcher's clock).
    calls_per_batch: int | None = optional()
    #: UNTRUSTED diagnostic: per side, the median of the per-call times the side's own
    #: processes reported (max over ranks). A candidate can write anything here; pkb never
    #: uses it for a time, a speedup, a verdict or the physics floor.
    self_reported_ms: dict | None = optional()
    extra: dict = attrs.field(factory=dict)

    def speedup_value(self) -> float | None:
        """The speedup this mode reads: its rounds' own where it kept one, else the ratio of the
        two sides' medians (records from before it was kept); None where neither says one."""
        if self.speedup:
            return self.speedup.value
        if self.reference and self.candidate and self.candidate.median > 0:
            return self.reference.median / self.candidate.median
        return None


@attrs.frozen(kw_only=True)
class Timing(Contract):
    """Every mode of one job. The headline (:attr:`reference`, :attr:`candidate`,
    :attr:`speedup`) is the primary mode's, read from :attr:`modes`, never stored twice;
    records of versions that stored it beside the modes keep it, unread, in ``extra``."""

    UNKNOWN = "keep"

    modes: dict[str, ModeTiming] = attrs.field(factory=dict)
    #: The headline mode (the first asked for).
    primary: str = "latency"
    #: Per mode: only in records of versions that cross-checked self-reported times.
    crosscheck: dict[str, CrossCheck] | None = optional()
    #: ``device`` (a GPU run) or ``host`` (CPU mode); None in records written before it was kept.
    #: Records with ``calls_per_batch`` were timed by the launcher's clock either way (older
    #: ones: CUDA events or the host clock in the candidate's own processes).
    clock: str | None = optional()
    sol: Floor | None = optional()
    #: The problem's bus-bandwidth convention: bytes moved and the factor (nccl-tests' busbw).
    bus: dict | None = optional()
    #: Per rank, SM and memory clocks while timing (GPU).
    clocks: list | None = optional()
    #: Per side and rank, the profiler's top kernels (``pkb run --profile``).
    profile: dict | None = optional()
    extra: dict = attrs.field(factory=dict)

    @property
    def headline(self) -> ModeTiming | None:
        """The headline mode's timing, if it ran."""
        return self.modes.get(self.primary)

    @property
    def reference(self) -> SideStats | None:
        """The reference's calls in the headline mode."""
        return self.headline.reference if self.headline else None

    @property
    def candidate(self) -> SideStats | None:
        """The candidate's calls in the headline mode."""
        return self.headline.candidate if self.headline else None

    @property
    def speedup(self) -> Speedup | None:
        """The headline mode's speedup."""
        return self.headline.speedup if self.headline else None
