"""The timing modes' names: ``pkb run --timing-mode``'s choices (docs/timing.md).

The one list that the command line, the service's intake, the noise floor and
the harness (:mod:`pkb_core.harness.timing`, which runs the modes) check against.
It lives here, apart from the harness, because the harness imports torch: the
command line refuses an unknown mode before anything heavy is imported.
"""
from __future__ import annotations

#: Every timing mode, the headline's default first. ``window``: every call in its own window of the
#: judge's timekeeper (pkb_core.conduct.window_rounds); the others are batches timed by the launcher's
#: clock around them (pkb_core.harness.timing).
MODES = ("window", "latency", "back-to-back", "graph")
#: The mode whose speedup is the record's headline, the service's ``claimed_speedup`` and the
#: reward when none is asked for, on GPUs: window mode, the judge's device clock, since
#: 2026-11-30. On 2xH200 the reference against itself at the default ``--iters`` read 26 of 27
#: intervals containing 1.00 over 19 problems and no order flag, where ``latency`` (the launcher's
#: clock around batches that run in the candidate's process) read identical code 1.16-1.18x
#: "faster" in two of four (docs/timing.md, "The headline"; what is still not met is there too).
HEADLINE_MODE = "window"
#: The headline in CPU mode: window mode, whose target there holds (the reference against itself,
#: 10 runs on the 2-core machine: median 0.94, every interval containing 1.00), where the
#: launcher's clock read a difference in 3 of 16 (docs/timing.md).
CPU_HEADLINE_MODE = "window"
#: The modes whose every number is the judge's own (its timekeeper's windows, armed, opened and
#: checked by the judge): the only ones whose speedup a record claims (``claimed_speedup``, what
#: a reward reads). The launcher-clock modes time batches whose contents run in the candidate's
#: process, which a solution can rebind and fuse (docs/trust.md): their speedups are shown and
#: kept under ``stats.modes``, never claimed, whatever ``--timing-mode`` puts first.
CLAIMABLE_MODES = ("window",)
#: Which rules a record's claim was made under: changed whenever what a record claims changes
#: (2: only :data:`CLAIMABLE_MODES` are claimed, 2026-11-30), so that a stored record made under
#: other rules is never handed back as the answer to a new request (the reward service's finished
#: job of the same request: :mod:`pkb_core.serve.intake`).
CLAIM_RULES = 2


def claimable(mode: str | None) -> bool:
    """Whether a speedup timed in ``mode`` (a record's ``timing_mode``; None in records of versions
    before it was kept, all of them the launcher's clock) is a speed pkb claims and counts: in
    ``claimed_speedup``, fast_p, the geomean and a refinement loop's "measurably faster"."""
    return mode in CLAIMABLE_MODES


def headline_mode(device: str) -> str:
    """The headline mode on ``device`` (``cuda`` or ``cpu``): what a job times when no mode is asked for."""
    return HEADLINE_MODE if device == "cuda" else CPU_HEADLINE_MODE
