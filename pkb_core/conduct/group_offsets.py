"""``PKB_GROUP_OFFSETS``: what the candidate's group and the reference group differ by on pkb's own
harness, measured in every round of window mode (a diagnostic; docs/timing.md, "Two groups of the
same code, measured").

Two groups of processes running the same code read apart by a steady offset on 2xH200: at 4 KiB
the reference against itself read 0.949-1.051 with each job's rounds' interval (before the
widening by :data:`pkb_core.conduct.window_rounds.GROUP_US`) often excluding 1.00, and the
ruler's delays, run in the candidate's group, read up to 1.8 us off
(docs/benchmarks/2026-11-30-h200x2-clock-targets-d.md). The reference group's ``harness`` batch
reads one side of that offset. ``on`` has the candidate's group run the same batch too
(``candidate_harness``: placing, barrier and export, no call) after the compared pair in every
round, the two harness batches in a random order balanced over pairs of rounds, and the record
keeps:

* ``group_offsets.offset_us``: the median over rounds of the candidate group's harness window less
  the reference group's (us);
* ``group_offsets.corrected_speedup``: the speedup with each round's offset taken from the
  candidate's time a call (value, low, high): what the speedup would read were the offset
  corrected; None where that leaves a round's time at or below zero (an offset as long as the
  candidate's call), and ``group_offsets.rounds_below_zero`` says in how many rounds.

It is the candidate's process that runs ``candidate_harness``, after its solution was imported: a
file can slow those batches to make the correction favour it. So it is a diagnostic, used for
nothing (not the speedup, not a verdict), to learn on GPUs whether a harness batch of each group
predicts their offset; a correction the judge could use would be measured where no solution code
has run yet. ``off`` (the default): no such batch.
"""
from __future__ import annotations

import statistics

from pkb_core.conduct.intervals import ratio_reading
from pkb_core.contracts.commands_judge import CANDIDATE_GROUP_SIDES
from pkb_core.env_settings import setting_from_env

GROUP_OFFSETS_ENV = "PKB_GROUP_OFFSETS"
#: The candidate group's harness batch.
CANDIDATE_HARNESS = CANDIDATE_GROUP_SIDES[1]


def group_offsets_choice() -> str:
    """What ``PKB_GROUP_OFFSETS`` asks for (``off`` unset); ValueError, one line, for another value."""
    return setting_from_env(GROUP_OFFSETS_ENV, ("off", "on"), "off",
                            "the candidate group's harness batch, a diagnostic: docs/timing.md")


def group_offsets_on() -> bool:
    return group_offsets_choice() == "on"


def offset_reading(raw: dict, per_call: dict) -> dict:
    """``{"offset_us", "rounds_below_zero", "corrected_speedup"}`` from window mode's rounds: ``raw`` (per side, each
    round's median window in us, ``harness`` and :data:`CANDIDATE_HARNESS` among them) and
    ``per_call`` (the two compared sides' time a call per round, in ms)."""
    offsets = [c - h for c, h in zip(raw[CANDIDATE_HARNESS], raw["harness"])]
    pairs = [(ref, cand - offset / 1e3) for ref, cand, offset in
             zip(per_call["reference"], per_call["candidate"], offsets)]
    below = sum(1 for pair in pairs if min(pair) <= 0)
    return {"offset_us": round(statistics.median(offsets), 3), "rounds_below_zero": below,
            "corrected_speedup": ratio_reading(pairs) if pairs and not below else None}
