"""The candidate's reported times against the launcher's clock (docs/trust.md).

A candidate's processes time its calls and report the times; nothing stops them
from reporting what they like. The launcher therefore also measures, with its
own clock, the wall time of every batch: from sending the command to the last
rank's answer. Whatever a batch does besides the timed calls (barriers, the
hold before each call, exporting its outputs, the messages) is its *overhead*:
wall time minus the reported times (per call, the slowest rank's). The
reference's batches run the same harness code on the same machine with outputs
of the same size, so the reference's overhead is what the candidate's should be.
Time that a candidate hides (work deferred to another thread or stream that
the batch's final device synchronisation still waits for, work done only
when its outputs are exported, or simply smaller numbers than the truth) shows
up as overhead the reference does not have.

The check compares the *least* overhead of any of the candidate's batches with
the least of the reference's: work a candidate hides is in every one of its
batches, while a busy machine (another process taking the core, a page
fault) only ever adds to some batches, so the minima are what the harness
costs and a loaded machine does not flag an honest candidate. It flags a
candidate whose least overhead exceeds the reference's by more than the
*allowance*: three times the spread of the
reference's overheads above their least (their noise), plus a floor (the
clock's and the scheduler's jitter), plus 10 % of the candidate's batch wall
time, plus, in the modes that hold the device before each call, one hold per
call (a launch that the hold hides in one side's events is in the other's).
Its resolution is therefore that allowance: forged time smaller than it is
not detected here (the physics floor, :mod:`pkb_core.machine.roofline`, bounds what
remains). Both numbers are in the record.
"""
from __future__ import annotations

import statistics

from pkb_core.contracts.timing import CrossCheck

#: Jitter of the launcher's clock around one batch (ms): pipes, the scheduler.
FLOOR_MS = {"cpu": 5.0, "cuda": 1.0}
#: The device-side hold before each latency/graph call, in ms (timing.HOLD_CYCLES at ~2 GHz).
HOLD_MS = 0.1


def overhead(wall_ms: float, call_times_ms: list[float]) -> float:
    """Wall time of a batch minus the times reported for its calls."""
    return wall_ms - sum(call_times_ms)


def judge(reference: list[float], candidate: list[float], candidate_walls: list[float], *, device: str,
          mode: str, calls_per_batch: int) -> CrossCheck:
    """The cross-check of one timing mode: overheads in, a :class:`CrossCheck` out
    (every number in ms; ``flag``: the reason, or None)."""
    ref, cand = min(reference), min(candidate)
    spread = (statistics.median(reference) - ref) if len(reference) > 1 else 0.0
    allowance = FLOOR_MS[device] + 3 * spread + 0.1 * min(candidate_walls)
    if device == "cuda" and mode in ("latency", "graph"):
        allowance += HOLD_MS * calls_per_batch
    excess = cand - ref
    flag = None
    if excess > allowance:
        flag = (
            f"{mode} mode: by the launcher's clock every batch of {calls_per_batch} calls took at least "
            f"{cand:.3f} ms more than the times the candidate reported (the reference's batches: {ref:.3f} ms more; "
            f"allowed difference {allowance:.3f} ms): work outside the "
            f"reported times (deferred to another thread or stream, or done when the outputs were collected) or "
            f"forged times")
    return CrossCheck(reference_overhead_ms=ref, candidate_overhead_ms=cand, allowance_ms=allowance,
                      reference_overhead_median_ms=statistics.median(reference),
                      candidate_overhead_median_ms=statistics.median(candidate), batches=len(candidate), flag=flag)
