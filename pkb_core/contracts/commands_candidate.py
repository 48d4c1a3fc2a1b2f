"""A candidate's commands and answers (handled by :class:`pkb_core.candidate.rank.CandidateRank`'s
``on_<op>``; :mod:`pkb_core.contracts.commands` pairs them). Every answer here is written
by the process a solution runs in: it is read once, strictly, at the launcher's boundary,
and what it says is only data (a skeleton the judge reads under limits, a diagnostic)."""
from __future__ import annotations

import typing

import attrs

from pkb_core.contracts.job import Job
from pkb_core.contracts.serial import optional
from pkb_core.contracts.messages import NOTE_CHARS, Answer, Request, notes, optional_text, text


@attrs.frozen(kw_only=True)
class Setup(Request):
    """Lock the process down, then compile the job's solution."""

    OP = "setup"
    job: Job


@attrs.frozen(kw_only=True)
class SetupDone(Answer):
    """What setup found. ``verdict``, when set, may only be ``compile-error``: anything else
    a candidate claims is flagged by the launcher (:meth:`pkb_core.conduct.jobrun.JobRun._setup`),
    so it is kept as the text it sent, not read as a :class:`Verdict`. ``lockdown``: the
    protections the lockdown could not apply here."""

    verdict: str | None = optional_text(NOTE_CHARS)
    reason: str = text()
    lockdown: tuple[str, ...] = notes()


@attrs.frozen(kw_only=True)
class Trial(Request):
    """Place one trial's inputs (the judge's parcel), call the solution once, write its
    outputs and arguments to a parcel at ``out_path``. ``slots``: each tensor leaf's byte
    count, the largest over the ranks (every rank allocates the same buffers). ``late_rank``:
    the rank that starts its call late, the others overwriting their inputs once theirs has
    returned (:mod:`pkb_core.conduct.staggered_trials`); None: every rank in step."""

    OP = "trial"
    skeleton: typing.Any
    path: str
    slots: list[int]
    out_path: str
    late_rank: int | None = None


@attrs.frozen(kw_only=True)
class WarmCandidate(Request):
    """Start timing mode ``mode`` on its own warm-up sets (never timed later): place them,
    ``count`` warm-up calls, the capture in graph mode. ``slots``: per set, as for a trial."""

    OP = "warm"
    mode: str
    count: int
    skeleton: typing.Any
    path: str
    slots: list[list[int]]


@attrs.frozen(kw_only=True)
class TimeCandidate(Request):
    """One timed batch: place the round's sets, call the solution on each, write every
    output and argument buffer to a parcel at ``out_path``."""

    OP = "time"
    mode: str
    skeleton: typing.Any
    path: str
    slots: list[list[int]]
    out_path: str
    #: Graph mode: how many times the captured batch is replayed.
    replays: int = 0


@attrs.frozen(kw_only=True)
class CandidateTimed(Answer):
    """A candidate's batch. ``times`` is its own account of itself: an untrusted diagnostic,
    kept as sent and read only by :func:`pkb_core.conduct.timed_rounds._reported` (which
    records it as absent unless it is one finite number per call)."""

    skeleton: typing.Any = None
    times: typing.Any = None
    alignment: str | None = optional_text(NOTE_CHARS)


@attrs.frozen(kw_only=True)
class End(Request):
    """The backend's finalize hook (a healthy job ends with it)."""

    OP = "end"


@attrs.frozen(kw_only=True)
class RunWindows(Request):
    """Call the solution once in each of the timekeeper's windows of a round (epoch
    ``epoch``): set ``w`` is laid out in the gate region's ``in_slot`` as ``skeletons[w]``
    says; ``slots`` are the heap buffers' sizes; ``region`` is the gate region to attach.

    ``harness_only`` (sent to window mode's reference group alone, for the ``harness`` batch):
    each window runs pkb's harness with no call (the set placed, the device barrier, the placed
    set exported as a call's arguments after it, with a stand-in for the outputs in front of it:
    :func:`pkb_core.harness.parcel.stand_in_outputs`) and so fills the ``fill`` bytes of
    ``out_slot`` the reference's calls fill: its windows export, and the host engine copies out of
    them, as much as a real call's."""

    OP = "windows"
    epoch: int
    skeletons: list
    slots: list[int]
    region: dict
    timeout_s: float
    harness_only: bool = False
    fill: int = 0


@attrs.frozen(kw_only=True)
class WindowsRan(Answer):
    """Where each call's outputs and arguments lie in ``out_slot``: the candidate's word,
    read by the judge under the untrusted limits, never trusted. ``host_us``: the process's own
    account of its host time per call, an untrusted diagnostic used for nothing."""

    skeletons: typing.Any = None
    host_us: typing.Any = optional()
    #: Its garbage collections during the batch (its own account, as ``host_us``).
    collections: typing.Any = optional()
    #: The median span of its own events around each call (``PKB_CALL_EVENTS=on``), in
    #: microseconds: its own account, a yardstick for the judge's clock, used for nothing else.
    call_event_us: typing.Any = optional()
    #: Of that span, the median part before the solution's own work: the set's placing and the
    #: ranks' barrier (the same account, the same use).
    place_event_us: typing.Any = optional()
