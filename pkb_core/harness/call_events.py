"""``PKB_CALL_EVENTS``: each side's own events around its windowed calls, a yardstick for the judge's
clock (docs/timing.md).

``on``: each side of a group (the reference's, the candidate's, the harness batch) also brackets
each windowed call with CUDA events of its own (on CPU, its host clock) and reports their median
(``window_diagnostics.<side>.call_event_us``; :class:`pkb_core.harness.windows.WindowSide`), and
of that span the part before the solution's own work, its set's placing and the ranks' barrier
(``place_event_us``: a third event where the side's call says it crossed the barrier). It
is the side's own account, used for nothing the judge decides: what issue 53's target 7 compares
the judge's reading with, since both ranks' calls start together there, at the gate, where a
collective's events in latency mode held one rank's wait for the other's. ``off`` (the default):
nothing more in any window. The judge reads it and tells each side with its gate region.
"""
from __future__ import annotations

from pkb_core.env_settings import setting_from_env

CALL_EVENTS_ENV = "PKB_CALL_EVENTS"


def call_events_choice() -> str:
    """What ``PKB_CALL_EVENTS`` asks for (``off`` unset); ValueError, one line, for another value."""
    return setting_from_env(CALL_EVENTS_ENV, ("off", "on"), "off",
                            "each side's own events around its windowed calls: docs/timing.md")
