"""Feedback: what a record says to the model that wrote the solution, as data.

A record's ``feedback`` (:class:`pkb_core.contracts.record.Record`) is made by pkb once
the job ends (:func:`pkb_core.results.feedback.feedback_of`), from the verdict, the
reason, the judge's structured finding and the timing; ``pkb generate --rounds``
renders it into the next round's prompt (:mod:`pkb_core.generate.feedback_text`).
It is bounded (a few differing elements, a few compiler lines) and carries nothing
of the run secret or the judge's internals, and of the reference's outputs only
the expected values at the differing elements it shows.
"""
from __future__ import annotations

import attrs

from pkb_core.contracts.serial import Contract, optional
from pkb_core.contracts.verdict import Verdict


@attrs.frozen(kw_only=True)
class Element(Contract):
    """One differing element: its index in the output, the solution's value and the reference's."""

    UNKNOWN = "keep"

    index: tuple[int, ...]
    got: str
    expected: str
    extra: dict = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class Mismatch(Contract):
    """Where a wrong answer is wrong: the first rank (lowest) whose output differs, which
    output, in which trial or timed call, and by how much."""

    UNKNOWN = "keep"

    #: The rank whose comparison failed (the lowest one that did).
    rank: int | None = optional()
    #: The output's path in the returned tree (``out[0]``, ``argument 1 (updated in place)``).
    output: str = ""
    trial: int | None = optional()
    #: ``timed call 3 of a batch`` when the mismatch was in a timed call.
    call: str | None = optional()
    #: Elements out of tolerance, of how many, in an output of this shape.
    count: int | None = optional()
    numel: int | None = optional()
    shape: tuple[int, ...] | None = optional()
    #: The first differing elements in memory order, then the one with the largest error.
    elements: tuple[Element, ...] = ()
    max_abs_err: str | None = optional()
    #: The rule the elements broke (``rtol=0.0001, atol=1e-05*max|ref|=...``, ``exact comparison``).
    tolerance: str | None = optional()
    extra: dict = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class Perf(Contract):
    """A passing, timed job's numbers: both medians, the speedup with its 95 % interval and
    reading, and the speed-of-light floor with each side's fraction of it."""

    UNKNOWN = "keep"

    reference_ms: float
    solution_ms: float
    speedup: float | None = optional()
    speedup_ci: tuple[float, float] | None = optional()
    #: ``faster``, ``slower``, ``no measurable difference``, ``too few rounds to tell``.
    difference: str | None = optional()
    timing_mode: str | None = optional()
    #: ``host`` in CPU mode (host timings, not a GPU kernel's).
    clock: str | None = optional()
    floor_ms: float | None = optional()
    bound: str | None = optional()
    reference_sol_fraction: float | None = optional()
    solution_sol_fraction: float | None = optional()
    extra: dict = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class Feedback(Contract):
    """What pkb tells a model about one job of its solution.

    Exactly the parts that apply are set: ``compiler`` for ``compile-error``, ``mismatch``
    for a wrong answer, ``rule`` for ``flagged``, ``running`` for ``timeout``, ``crash``
    and ``error``, ``perf`` for a timed pass."""

    UNKNOWN = "keep"

    verdict: Verdict = attrs.field(converter=Verdict)
    #: The record's reason, trimmed (one paragraph at most).
    summary: str = ""
    #: Checked trials that passed, of how many were asked.
    trials: int | None = optional()
    compiler: tuple[str, ...] | None = optional()
    mismatch: Mismatch | None = optional()
    rule: str | None = optional()
    running: str | None = optional()
    perf: Perf | None = optional()
    extra: dict = attrs.field(factory=dict)
