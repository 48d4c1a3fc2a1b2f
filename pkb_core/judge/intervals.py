"""Confidence intervals of a median and of a speedup, without assuming a distribution.

Timings are skewed and heavy-tailed (a preempted launch, a slow link
transfer), so pkb reports medians, and their intervals come from order
statistics alone, with no assumption about the distribution's shape.

**The median's interval.** Of ``n`` independent samples sorted
``x(1) <= ... <= x(n)``, the number that fall below the true median is
Binomial(n, 1/2). So ``[x(l), x(n+1-l)]`` covers the median with probability
``1 - 2 * P(B <= l - 1)``, ``B ~ Binomial(n, 1/2)``; :func:`median_interval`
takes the largest ``l`` (the narrowest interval) whose coverage is at least the
level asked for. The coverage is exact, not asymptotic, and never below the
level; below 6 samples no 95 % interval exists (``[min, max]`` covers 1 - 2/2^n
= 93.75 % at n = 5), and the function returns None.

**The speedup's interval.** Speedup is ``median(reference) / median(candidate)``.
The two sides are sampled independently, so if each median's interval has
coverage ``sqrt(level)``, both hold at once with probability at least
``level``, and then the ratio lies in ``[ref_low / cand_high, ref_high /
cand_low]`` (:func:`ratio_interval`). That is conservative (the true coverage
is higher), deterministic (no resampling, the same samples always give the same
answer) and needs nothing but the two sample lists.

**The reading.** An interval above 1.0 is ``faster``, below 1.0 ``slower``,
and one that contains 1.0, or that cannot be formed from too few samples, is
``no measurable difference`` (:func:`difference`): neither a win nor a loss.
"""
from __future__ import annotations

import math

#: The confidence level of every interval pkb reports.
LEVEL = 0.95
FASTER, SLOWER, SAME = "faster", "slower", "no measurable difference"


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


def ratio_interval(reference, candidate, level: float = LEVEL) -> tuple[float, float] | None:
    """An interval for ``median(reference) / median(candidate)`` with joint
    coverage at least ``level`` (each median's interval at ``sqrt(level)``)."""
    side = math.sqrt(level)
    ref, cand = median_interval(reference, side), median_interval(candidate, side)
    if ref is None or cand is None or cand[0] <= 0:
        return None
    return ref[0] / cand[1], ref[1] / cand[0]


def difference(interval) -> str:
    """``faster``, ``slower`` or ``no measurable difference`` for a speedup interval
    (None, from too few samples, is no measurable difference)."""
    if interval is None:
        return SAME
    low, high = interval
    if low > 1.0:
        return FASTER
    if high < 1.0:
        return SLOWER
    return SAME


def speedup(reference, candidate, level: float = LEVEL) -> dict:
    """The speedup of one timing mode: ``value`` (ratio of the medians),
    ``low``/``high`` (its interval, None with too few samples), ``level`` and
    ``difference``."""
    ref, cand = _median(sorted(reference)), _median(sorted(candidate))
    interval = ratio_interval(reference, candidate, level)
    return {"value": ref / cand if cand > 0 else None,
            "low": interval[0] if interval else None, "high": interval[1] if interval else None,
            "level": level, "difference": difference(interval)}


def _median(ordered) -> float:
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
