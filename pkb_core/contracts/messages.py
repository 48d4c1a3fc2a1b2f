"""What every command and answer on a worker's channel is made of: the bases, the error
envelope, the answers both roles give, and the messages outside the command table.

A command is one :class:`Request` subclass per op and role; its answer one
:class:`Answer` subclass (:mod:`pkb_core.contracts.commands` pairs them). On
the wire both are the flat JSON objects :mod:`pkb_core.process.channel`
carries: ``{"op": ..., "nonce": ..., **request.to_json()}`` one way and
``{"op": ..., "nonce": ..., **answer.to_json()}`` (or a :class:`Failure`'s
fields) the other.

A candidate writes its own answers: each is read once, at the launcher's
boundary, with the answer class's strict :meth:`Contract.from_json` (an
unknown field, a wrong type or a list longer than its bound does not fit, and
the job ends as a malformed message does). Text is cut to a bound rather than
refused, as verdict reasons always were, so a long compiler message is still
a ``compile-error``.
"""
from __future__ import annotations

import typing

import attrs

from pkb_core.contracts.serial import Contract, ContractError, optional
from pkb_core.contracts.verdict import Verdict

#: Characters of a rank's text (an error, a verdict's reason) that crosses to a record.
REASON_CHARS = 4000
#: Characters of a short note (a lockdown gap, a barrier's alignment, a claimed verdict).
NOTE_CHARS = 200
#: Entries a list of notes may hold (more does not fit: no honest process sends them).
MAX_NOTES = 64


def _cut(limit: int):
    return lambda value: value[:limit] if isinstance(value, str) else value


def text(limit: int = REASON_CHARS, default="") -> typing.Any:
    """A string field cut to ``limit`` characters."""
    return attrs.field(default=default, converter=_cut(limit))


def optional_text(limit: int = REASON_CHARS) -> typing.Any:
    """An optional string field (absent while None) cut to ``limit`` characters."""
    return optional(converter=_cut(limit))


def notes(limit: int = NOTE_CHARS, items: int = MAX_NOTES) -> typing.Any:
    """A tuple of strings, each cut to ``limit`` characters; more than ``items`` does not fit."""
    def check(instance, attribute, value):
        if len(value) > items:
            raise ContractError(f"{type(instance).__name__}.{attribute.name}: {len(value)} entries, "
                                f"at most {items}")

    return attrs.field(factory=tuple, converter=lambda v: tuple(s[:limit] if isinstance(s, str) else s for s in v),
                       validator=check)


class Request(Contract):
    """A command to one rank. ``OP`` is its name on the wire (the handler is ``on_<OP>``)."""

    OP: typing.ClassVar[str]


class Answer(Contract):
    """A rank's answer to a command."""


@attrs.frozen(kw_only=True)
class Done(Answer):
    """An answer that carries nothing but that the command was done."""


@attrs.frozen(kw_only=True)
class Failure(Contract):
    """The answer of a rank whose command raised, in place of the op's answer.

    The launcher ends the job on it (:meth:`pkb_core.launch.ranks.RankGroup.gather`):
    ``error`` unless ``refused``, which is ``flagged`` (a candidate's solution called a
    collective its sealed group refuses), or ``multicast_off``, the rank's word that the
    solution failed for want of NVLink multicast, off on this machine
    (:mod:`pkb_core.candidate.multicast_gate`): ``unsupported`` where the launcher
    believes it, else ``error``."""

    error: str = text()
    refused: bool = False
    multicast_off: bool = False


# -- answers both roles give -------------------------------------------------------------------
@attrs.frozen(kw_only=True)
class Parcel(Contract):
    """Where a rank's parcel is (:mod:`pkb_core.harness.parcel`): its skeleton and its file.
    A candidate's skeleton is data the judge reads under ``UNTRUSTED`` limits, nothing more."""

    skeleton: typing.Any
    path: str


@attrs.frozen(kw_only=True)
class Packed(Answer):
    """A parcel was written: its skeleton (the judge's inputs, or a candidate's outputs and
    arguments). None when a candidate sent none: the judge then cannot read its outputs (``fail``)."""

    skeleton: typing.Any = None


@attrs.frozen(kw_only=True)
class Warmed(Answer):
    """A timing mode's warm-up is done; ``failure``: why the mode cannot be timed (a graph
    that could not be captured), which the record keeps as the mode's ``unavailable``."""

    failure: str | None = optional_text(2000)


@attrs.frozen(kw_only=True)
class ProfileRequest(Request):
    """A profiler trace of a few calls, written to ``path``."""

    OP = "profile"
    path: str


@attrs.frozen(kw_only=True)
class Profiled(Answer):
    """The profiler's kernel table (:func:`pkb_core.harness.profiling.profile_calls`)."""

    summary: typing.Any = None


@attrs.frozen(kw_only=True)
class Finding(Answer):
    """A judge rank's comparison: a verdict (``fail``, or ``error`` for a reference that
    raised) with its reason, or None when the candidate's outputs match."""

    verdict: Verdict | None = None
    reason: str = text()
    #: Where a wrong answer differs (:class:`pkb_core.judge.check.Finding`'s detail), for the record's feedback.
    finding: dict | None = optional()
    #: A window check's cost on this rank (ms per part: the reference's calls and bounds, the
    #: snapshots' unpacking, their copy to the device, the comparisons), where nothing was found: a
    #: diagnostic of the record.
    spent_ms: dict | None = optional()


# -- outside the command table --------------------------------------------------------------------
@attrs.frozen(kw_only=True)
class Secret(Contract):
    """The judge's first message: the run secret inputs are drawn from (never in the environment)."""

    secret: str


@attrs.frozen(kw_only=True)
class Ready(Answer):
    """A worker's first line once started (op ``ready``). ``unsupported``: why the backend
    cannot run here, said before any solution code ran; ``machine``: the judge's rank 0
    describes the machine for the records."""

    pid: int
    unsupported: str | None = optional_text(2000)
    machine: dict | None = optional()


@attrs.frozen(kw_only=True)
class Exit(Request):
    """End the worker's loop (answered with :class:`Done`)."""

    OP = "exit"
