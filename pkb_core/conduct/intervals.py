"""Confidence intervals of a median and of a speedup, without assuming a distribution.

Timings are skewed and heavy-tailed (a preempted launch, a slow link
transfer), so pkb reports medians, and their intervals come from order
statistics alone, with no assumption about the distribution's shape.

**The unit is the round, not the call.** The launcher times in rounds, each
one batch of calls per side, the sides back to back in alternating order
(:mod:`pkb_core.conduct.jobrun`). Calls of one batch share their conditions
(clocks, caches, what else the host is doing), so they are not independent
draws: on a loaded CPU whole batches run several times slower than others, and
intervals that treated every call as independent came out far too narrow (the
reference against itself read "slower"). Rounds are the independent units, so
every interval here is over per-round values: a side's round medians, and the
rounds' paired ratios.

**The median's interval.** Of ``n`` independent values sorted
``x(1) <= ... <= x(n)``, the number that fall below the true median is
Binomial(n, 1/2). So ``[x(l), x(n+1-l)]`` covers the median with probability
``1 - 2 * P(B <= l - 1)``, ``B ~ Binomial(n, 1/2)``; :func:`median_interval`
takes the largest ``l`` (the narrowest interval) whose coverage is at least the
level asked for. The coverage is exact, not asymptotic, and never below the
level; below 6 values no 95 % interval exists (``[min, max]`` covers 1 - 2/2^5
= 93.75 % at n = 5), and the function returns None.

**The speedup's interval.** Each round gives a pair: the reference's and the
candidate's median over that round's batch, measured back to back. Their ratio
cancels what the round's conditions did to both sides, and the rounds' ratios
are independent, so the speedup's interval is the median's interval over the
ratios (:func:`paired_ratio_interval`): distribution-free, exact coverage,
deterministic (no resampling: the same samples always give the same answer).
The speedup itself is the median of those same ratios, the estimate the interval is
about, so it always lies inside it. (It was the ratio of the two sides' medians until
2026-11-29: where a side's round values sit on two levels, as a GPU's windows of a
256 KiB set did on one H200, that ratio jumped with whichever level held each side's
median and read 1.13 beside an interval of [0.95, 1.09].)

**The reading.** An interval above 1.0 is ``faster``, below 1.0 ``slower``,
one that contains 1.0 is ``no measurable difference`` (:func:`difference`):
neither a win nor a loss; where too few rounds were timed for an interval to
exist the reading is ``too few rounds to tell``, and the speedup has no value
(no number is presented as a speedup that pkb cannot put an interval on).
"""
from __future__ import annotations

import statistics

import attrs

from pkb_core.contracts.timing import FASTER, SAME, SLOWER, SideStats, Speedup

#: The confidence level of every interval pkb reports.
LEVEL = 0.95
TOO_FEW = "too few rounds to tell"


def _order_index(n: int, level: float) -> int | None:
    """The largest 1-based rank ``l`` with ``1 - 2 * P(B <= l - 1) >= level``
    (``B ~ Binomial(n, 1/2)``), or None when even ``l = 1`` falls short."""
    tail = (1.0 - level) / 2.0
    total = 2 ** n
    term, cumulative = 1, 0  # C(n, k) and sum_{j<=k} C(n, j): exact integers
    best = None
    for k in range(0, (n + 1) // 2):
        cumulative += term
        if cumulative / total > tail:  # P(B <= k) too large (int / int is exact for any size)
            break
        best = k + 1
        term = term * (n - k) // (k + 1)
    return best


def least_rounds(level: float = LEVEL) -> int:
    """The fewest rounds (paired samples) for which an interval at ``level`` exists (6 at 95 %)."""
    n = 1
    while _order_index(n, level) is None:
        n += 1
    return n


def median_interval(samples, level: float = LEVEL) -> tuple[float, float] | None:
    """``(low, high)``: a distribution-free interval covering the population
    median with probability at least ``level``; None with too few samples."""
    ordered = sorted(samples)
    n = len(ordered)
    if n == 0:
        return None
    rank = _order_index(n, level)
    if rank is None:
        return None
    return ordered[rank - 1], ordered[n - rank]


def coverage(n: int, level: float = LEVEL) -> float | None:
    """The exact coverage of :func:`median_interval` for ``n`` samples."""
    rank = _order_index(n, level)
    if rank is None:
        return None
    term, below = 1, 0
    for k in range(rank):
        below += term
        term = term * (n - k) // (k + 1)
    return 1.0 - 2 * below / 2 ** n


def relative_half_width(samples, level: float = LEVEL) -> float | None:
    """How far the median's interval reaches from the median, as a fraction of
    it (the larger side): 0.01 means the interval lies within +-1 %. None when
    there is no interval or the median is not positive."""
    ordered = sorted(samples)
    interval = median_interval(ordered, level)
    if interval is None:
        return None
    mid = _median(ordered)
    if mid <= 0:
        return None
    return max(mid - interval[0], interval[1] - mid) / mid


def paired_ratio_interval(pairs, level: float = LEVEL) -> tuple[float, float] | None:
    """The interval of the median of ``reference / candidate`` over ``pairs``
    (``(reference, candidate)`` per round); None with too few rounds."""
    ratios = [ref / cand for ref, cand in pairs if cand > 0]
    return median_interval(ratios, level) if len(ratios) == len(pairs) else None


def difference(interval) -> str:
    """``faster``, ``slower`` or ``no measurable difference`` for a speedup
    interval; ``too few rounds to tell`` for None (no interval)."""
    if interval is None:
        return TOO_FEW
    low, high = interval
    if low > 1.0:
        return FASTER
    if high < 1.0:
        return SLOWER
    return SAME


def with_group_share(found: Speedup, share: float) -> Speedup:
    """``found`` with its interval widened by ``share`` each way (``[low / (1 + share),
    high * (1 + share)]``) and its reading made anew: what two groups of processes running the
    same code differ by, which no interval over one job's rounds can see (each side is one group
    for the whole job, so its rounds share that group's placement). The measured share is in
    :data:`pkb_core.conduct.window_rounds.GROUP_SHARE`."""
    if found.low is None or found.high is None:
        return found
    interval = (found.low / (1.0 + share), found.high * (1.0 + share))
    return attrs.evolve(found, low=interval[0], high=interval[1], difference=difference(interval),
                        extra={**found.extra, "rounds_interval": [found.low, found.high], "group_share": share})


def speedup(pairs, level: float = LEVEL) -> Speedup:
    """The speedup of one timing mode from its rounds: ``value`` (the median of
    the rounds' ``reference / candidate`` ratios), ``low``/``high`` (that
    median's interval, :func:`paired_ratio_interval`, so ``low <= value <=
    high``), ``level``, ``rounds`` and ``difference``. With fewer than 6 rounds
    there is no interval: ``value`` is None too and the reading is ``too few
    rounds to tell``.

    :param pairs: per round, ``(reference, candidate)``: each side's per-call
        time in that round."""
    interval = paired_ratio_interval(pairs, level)
    value = _median(sorted(ref / cand for ref, cand in pairs)) if interval else None
    return Speedup(value=value, low=interval[0] if interval else None, high=interval[1] if interval else None,
                   level=level, rounds=len(pairs), difference=difference(interval))


def ratio_reading(pairs: list) -> dict:
    """A diagnostic ratio of a record (window mode's raw windows', its beyond-harness one, the
    groups' offset taken out): the :func:`speedup` of ``pairs`` (per round, reference and
    candidate) as ``value``, ``low`` and ``high``."""
    ratio = speedup(pairs)
    return {"value": ratio.value, "low": ratio.low, "high": ratio.high}


def _median(ordered) -> float:
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def max_over_ranks(per_rank: list[list[float]]) -> list[float]:
    """Per call, the slowest rank's time (the collective's time)."""
    return [max(column) for column in zip(*per_rank)]


def summarize(times: list[float], rounds: list[float] | None = None, calls: int | None = None) -> SideStats:
    """min, p10, median, p90, max, mean, stddev and the count (``rounds``: the
    number of calls, ``calls`` when given, a name kept for old records) of a list of ms, and the
    median's distribution-free 95 % interval (``ci_low``, ``ci_high``;
    :mod:`pkb_core.conduct.intervals`) over ``rounds`` (per-round medians, the
    independent units; the calls themselves when not given), its relative
    half-width ``ci_rel`` and ``ci_units`` (how many values it came from; no
    interval below 6)."""
    ordered = sorted(times)
    units = ordered if rounds is None else sorted(rounds)
    quantiles = statistics.quantiles(ordered, n=10, method="inclusive") if len(ordered) > 1 else ordered * 9
    interval = median_interval(units)
    return SideStats(
        min=ordered[0], p10=quantiles[0], median=statistics.median(ordered), p90=quantiles[-1], max=ordered[-1],
        mean=statistics.fmean(ordered), stddev=statistics.pstdev(ordered),
        rounds=len(ordered) if calls is None else calls,
        ci_low=interval[0] if interval else None, ci_high=interval[1] if interval else None, ci_level=LEVEL,
        ci_rel=relative_half_width(units), ci_units=len(units),
    )
