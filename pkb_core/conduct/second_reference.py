"""``PKB_SECOND_REFERENCE``: a second reference group in window mode, timed in every round beside the
first (a diagnostic; docs/timing.md, "Two groups of the same code, the device's queues").

Two groups of processes running the same code read apart on 2xH200 by 4-40 % for a whole job on
problems of many short kernels (55, 56; 79 and 84 by 4-5 %), each process in one of two states
for its life, so that no interval over a job's rounds sees it
(docs/benchmarks/2026-11-30-h200x2-process-states.md). ``on`` forks a second reference group for
each window-mode job, made and set up exactly as the first (pkb's own code, the problem's
reference as its solution), whose batch of calls (``reference_b``) runs after the compared pair
in every round, among the trailing batches in a balanced order; the record keeps
``second_reference``:

* ``speedup``: the second group's reading against the first, as a speedup is read (value, low,
  high: the reference against itself in two groups, the pair's rounds' median ratio);
* ``apart_us``: the median over rounds of the second group's time a call less the first's (us).

One job then reads three groups of the same code where a candidate is the reference too (``pkb run
--backend reference``), and, for any candidate, what the reference's own code reads in two groups
of the job. It costs a group's processes and a batch a round, and is used for nothing (not the
speedup, not a verdict). ``off`` (the default): no second group.
"""
from __future__ import annotations

import statistics

from pkb_core.conduct.intervals import ratio_reading
from pkb_core.env_settings import setting_from_env

SECOND_REFERENCE_ENV = "PKB_SECOND_REFERENCE"
#: The second reference group's batch of calls.
SECOND_REFERENCE = "reference_b"


def second_reference_choice() -> str:
    """What ``PKB_SECOND_REFERENCE`` asks for (``off`` unset); ValueError, one line, for another value."""
    return setting_from_env(SECOND_REFERENCE_ENV, ("off", "on"), "off",
                            "a second reference group in window mode, a diagnostic: docs/timing.md")


def second_reference_on() -> bool:
    return second_reference_choice() == "on"


def second_reference_reading(per_call: dict) -> dict:
    """``{"speedup", "apart_us"}`` from window mode's rounds: ``per_call`` holds, per round, the
    first reference group's time a call (``reference``) and the second's (:data:`SECOND_REFERENCE`),
    in ms."""
    pairs = list(zip(per_call["reference"], per_call[SECOND_REFERENCE]))
    return {"speedup": ratio_reading(pairs),
            "apart_us": round(statistics.median((b - a) * 1e3 for a, b in pairs), 3)}
