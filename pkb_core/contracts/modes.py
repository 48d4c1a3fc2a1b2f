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
MODES = ("latency", "back-to-back", "graph", "window")
#: The mode whose speedup is the record's headline, the service's ``claimed_speedup`` and the
#: reward when none is asked for: the judge's device clock. The others are the launcher's
#: clock around batches whose contents a candidate's process decides: labelled diagnostics.
HEADLINE_MODE = "window"
#: Modes timed by a clock around work that the candidate's own process runs (its batch loop,
#: graph replays, alignment): never what a reward or ``claimed_speedup`` reads.
DIAGNOSTIC_MODES = ("latency", "back-to-back", "graph")
