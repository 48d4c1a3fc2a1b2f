"""The verdicts a job can end with: one enumeration for records, exit codes and colours.

A :class:`Verdict` is a ``str`` (``Verdict.PASS == "pass"``), so records keep
plain strings in JSON and code may compare either way.
"""
from __future__ import annotations

import enum


class Verdict(str, enum.Enum):
    """How a job ended."""

    #: correct on every rank and every trial (and, when timed, honest about its time)
    PASS = "pass"
    #: an output (or a mutated argument) differs from the reference's
    FAIL = "fail"
    #: the solution, or the reference, raised; or a rank ended otherwise than asked
    ERROR = "error"
    #: the solution could not be built or imported
    COMPILE_ERROR = "compile-error"
    #: no answer by the job's deadline
    TIMEOUT = "timeout"
    #: a rank's process died
    CRASH = "crash"
    #: the backend cannot run here, or the problem not at this world size
    UNSUPPORTED = "unsupported"
    #: a rule was broken (a collective in a custom-kernel solution, a forbidden
    #: system call, times the launcher's clock contradicts): never a win
    FLAGGED = "flagged"
    #: stopped from outside before it ended (a cancel of the reward service's):
    #: nothing was found about the solution
    CANCELLED = "cancelled"
    #: ran without a check (``--mode dryrun``: the outputs saved, never compared), so nothing
    #: was found about its correctness; never counted as a pass
    UNCHECKED = "unchecked"

    def __str__(self) -> str:
        return self.value

    @property
    def failing(self) -> bool:
        """Whether a run that has this verdict failed (``unsupported``, ``cancelled`` and
        ``unchecked`` do not: none is a finding about the solution)."""
        return self not in (Verdict.PASS, Verdict.UNSUPPORTED, Verdict.CANCELLED, Verdict.UNCHECKED)


#: Every verdict's text, in the order reports list them.
VERDICTS = tuple(v.value for v in Verdict)
#: The verdicts that make ``pkb run`` exit non-zero.
FAILING = frozenset(v.value for v in Verdict if v.failing)
