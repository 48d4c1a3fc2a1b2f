"""The one table of the commands a worker answers: op -> request class, answer class, role.

The launcher sends with it (:meth:`pkb_core.launch.ranks.RankGroup.command` takes a
request object and reads every answer with its answer class) and the worker dispatches
with it (:func:`pkb_core.harness.worker_loop.serve` builds the request object from the line it
read and calls its role's ``on_<op>`` with it). The same op name may mean different
commands for the two roles (``warm``, ``time``, ``profile``), so a command is found by
role and op, or by its request class. ``tests/test_layout.py`` checks that the table
names exactly the ``on_*`` handlers of :class:`pkb_core.judge.rank.JudgeRank` and
:class:`pkb_core.candidate.rank.CandidateRank`.

The messages outside the table (a worker's ``ready``, ``exit``, the judge's secret)
are in :mod:`pkb_core.contracts.messages`.
"""
from __future__ import annotations

import attrs

from pkb_core.contracts import commands_candidate as candidate
from pkb_core.contracts import commands_judge as judge
from pkb_core.contracts.messages import (Done, Exit, Failure, Finding, Packed, Profiled, ProfileRequest, Request,
                                         Warmed)
from pkb_core.contracts.serial import ContractError

JUDGE, CANDIDATE = "judge", "candidate"


@attrs.frozen
class Command:
    """One op of one role: what is sent, what comes back."""

    role: str
    request: type
    answer: type

    @property
    def op(self) -> str:
        return self.request.OP


COMMANDS: tuple[Command, ...] = (
    Command(JUDGE, judge.LoadJob, Done),
    Command(JUDGE, judge.DrawInputs, Packed),
    Command(JUDGE, judge.Check, Finding),
    Command(JUDGE, judge.Save, Done),
    Command(JUDGE, judge.DrawPool, Packed),
    Command(JUDGE, judge.WarmReference, Warmed),
    Command(JUDGE, judge.TimeReference, judge.ReferenceTimed),
    Command(JUDGE, judge.CheckSample, Finding),
    Command(JUDGE, judge.ReadClocks, judge.Clocks),
    Command(JUDGE, judge.ArmWindows, judge.Armed),
    Command(JUDGE, judge.OpenWindows, judge.WindowTimes),
    Command(JUDGE, judge.CheckWindows, Finding),
    Command(JUDGE, ProfileRequest, Profiled),
    Command(CANDIDATE, candidate.Setup, candidate.SetupDone),
    Command(CANDIDATE, candidate.Trial, Packed),
    Command(CANDIDATE, candidate.WarmCandidate, Warmed),
    Command(CANDIDATE, candidate.TimeCandidate, candidate.CandidateTimed),
    Command(CANDIDATE, candidate.RunWindows, candidate.WindowsRan),
    Command(CANDIDATE, ProfileRequest, Profiled),
    Command(CANDIDATE, candidate.End, Done),
)
_BY_OP = {(c.role, c.op): c for c in COMMANDS}
#: ``exit`` is every role's, answered by the worker's loop itself.
_EXIT = Command("", Exit, Done)


def command_for(role: str, op: str) -> Command:
    """The command ``op`` of ``role`` (``exit`` for any role); :class:`ContractError` if none."""
    if op == Exit.OP:
        return _EXIT
    try:
        return _BY_OP[(role, op)]
    except KeyError:
        raise ContractError(f"no command {str(op)[:40]!r} for the {role}") from None


def command_of(role: str, request: Request) -> Command:
    """The command whose request ``request`` is, for ``role``."""
    found = command_for(role, request.OP)
    if not isinstance(request, found.request):
        raise ContractError(f"{type(request).__name__} is not the {role}'s {request.OP!r} command")
    return found


def encode(request: Request, nonce: str | None) -> dict:
    """The line a request is sent as."""
    return {"op": request.OP, "nonce": nonce, **request.to_json()}


def decode_answer(op: str, answer: type, message: dict):
    """A rank's answer line to ``op`` (``op`` and ``nonce`` already taken off) as the
    ``answer`` class, or a :class:`Failure`: the rank's own, or one saying that the line did
    not fit. Never raises: what a candidate wrote becomes its job's verdict, not the launcher's end."""
    try:
        if "error" in message:
            return Failure.from_json(message)
        return answer.from_json(message)
    except (ContractError, TypeError, ValueError) as exc:  # TypeError, ValueError: a converter's
        return Failure(error=f"sent a malformed {op} answer ({str(exc)[:200]})")
