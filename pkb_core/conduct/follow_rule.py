"""Window mode's order rule on a GPU: device work a candidate leaves running after its batch.

A candidate group's processes are frozen between batches; its kernels are not. Work it leaves
on the device shares the GPU, a time slice at a time, with whichever batch follows, and the
compared pair's order is balanced over pairs of rounds (``balanced_order`` in
:mod:`pkb_core.conduct.window_rounds`): the reference's windows would be longer in the rounds
where the candidate's batch went first, and the speedup with them.

The rule reads each pair of rounds run in opposite orders (:func:`order_differences`): the
compared pair's windows, both summed, in the round where the candidate went first, less those in
the round where the reference did. In an honest job that is zero whatever each batch does to the
next (it does it after either side), and noise about it: where a call syncs with the host the
rounds spread over milliseconds either way. A job is ``flagged`` only on evidence at the level of
its speedup's interval: the 95 % interval of the median pair
(:func:`pkb_core.conduct.intervals.median_interval`) lies wholly above the allowance. A median
pair above the allowance whose interval is not (with fewer than :data:`FOLLOW_PAIRS` pairs there
is none) asks for more rounds (:attr:`FollowReading.undecided`), which the rounds' loop runs up to
:data:`FOLLOW_MAX_PAIRS` pairs while its time lasts; a reading still undecided then is not
flagged, and the record says so. On 2xH200 (2026-11-30, the reference against itself at 7 rounds, three pairs) the
median pair alone flagged 3 problems of 85 (49, 50, 71: calls that sync with the host).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from pkb_core.conduct.intervals import median_interval
from pkb_core.contracts.outcome import JobEnded
from pkb_core.contracts.verdict import Verdict

#: The allowance: the larger of this many microseconds and this share of the reference's median
#: window after the judge's batch. Gross on purpose: what an honest job's order does to a side is
#: a microsecond (docs/timing.md), but on the device engine a window pays one or more switches of
#: the compute engine between contexts (270-300 us each on 2xH200), which an order could change by
#: one.
FOLLOW_US = 500.0
FOLLOW_SHARE = 0.5
#: The fewest pairs of rounds whose median has a 95 % interval (six: the interval is then their
#: least and greatest, and all six above the allowance has odds of 1 in 64 in an honest job).
FOLLOW_PAIRS = 6
#: The most pairs the rounds go on for while the median pair is above the allowance and its
#: interval is not (twelve: the interval then leaves out the two least pairs, so a candidate that
#: spoils a pair or two on purpose, slowing its own batch in a round, does not switch the rule off).
FOLLOW_MAX_PAIRS = 12


@dataclass(frozen=True)
class FollowReading:
    """What the rule read from one job's rounds (kept in the record as ``follow_rule``)."""

    #: Pairs of rounds run in opposite orders.
    pairs: int
    #: The median pair's difference (the candidate-first round's windows less its partner's), us.
    extra_us: float
    #: What the median may reach: :data:`FOLLOW_US` or :data:`FOLLOW_SHARE` of the reference's
    #: median window after the judge's batch, whichever is larger, us.
    allowed_us: float
    #: The median pair's 95 % interval, us; None with fewer than :data:`FOLLOW_PAIRS` pairs.
    interval_us: tuple[float, float] | None

    @property
    def found(self) -> bool:
        """Evidence of work left running: the whole interval above the allowance."""
        return self.interval_us is not None and self.interval_us[0] > self.allowed_us

    @property
    def undecided(self) -> bool:
        """The median pair above the allowance, its interval not (or too few pairs for one): more
        rounds wanted, up to :data:`FOLLOW_MAX_PAIRS` pairs."""
        return self.extra_us > self.allowed_us and not self.found

    def as_record(self) -> dict:
        return {"pairs": self.pairs, "extra_us": round(self.extra_us, 3), "allowed_us": round(self.allowed_us, 3),
                "interval_us": None if self.interval_us is None else [round(v, 3) for v in self.interval_us],
                "undecided": self.undecided}


def _after(raw: dict, orders: list, side: str, first: str) -> list[float]:
    """``side``'s windows (each round's median) in the rounds whose compared pair ran ``first``
    first."""
    return [raw[side][r] for r, order in enumerate(orders) if order[0] == first]


def follow_effect(raw: dict, orders: list) -> dict:
    """Per compared side, the median of its windows in the rounds where its batch followed the
    other compared side's, less the median in the rounds where it followed the judge's ``kernel``
    batch (it went first), in us; None with no round of either kind. In an honest job this is what
    the batch before a side's does to it (a microsecond at 4 KiB on one H200: docs/timing.md). A
    diagnostic: the rule reads :func:`order_differences`."""
    found = {}
    for side, other in (("reference", "candidate"), ("candidate", "reference")):
        after_other, after_judge = _after(raw, orders, side, other), _after(raw, orders, side, side)
        found[side] = round(statistics.median(after_other) - statistics.median(after_judge), 3) \
            if after_other and after_judge else None
    return found


def order_differences(raw: dict, orders: list) -> list[float]:
    """Per pair of rounds run in opposite orders (rounds ``2j`` and ``2j + 1``): the compared
    pair's windows (reference's and candidate's summed) in the round where the candidate went first
    less those in the round where the reference did, in us. What the order does to the speedup:
    the reference's windows after the candidate's batch less after the judge's, less the same for
    the candidate; zero in an honest job whatever each batch does to the next, so long as it does
    the same after either side."""
    found = []
    for a in range(0, len(orders) - 1, 2):
        b = a + 1
        if orders[a][0] == orders[b][0]:
            continue
        late, early = (b, a) if orders[b][0] == "candidate" else (a, b)
        found.append(raw["reference"][late] + raw["candidate"][late]
                     - raw["reference"][early] - raw["candidate"][early])
    return found


def follow_reading(raw: dict, orders: list) -> FollowReading | None:
    """The rule's reading of ``raw`` (each side's per-round windows, us) and the rounds' ``orders``;
    None with no pair of rounds run in opposite orders."""
    differences = order_differences(raw, orders)
    if not differences:
        return None
    after_judge = statistics.median(_after(raw, orders, "reference", "reference"))
    return FollowReading(pairs=len(differences), extra_us=statistics.median(differences),
                         allowed_us=max(FOLLOW_US, FOLLOW_SHARE * after_judge),
                         interval_us=median_interval(differences))


def judge_following(reading: FollowReading | None) -> None:
    """``flagged`` where ``reading`` found work left running (:attr:`FollowReading.found`); nothing
    otherwise, an undecided reading included (the record says so)."""
    if reading is None or not reading.found:
        return
    low, high = reading.interval_us
    raise JobEnded(Verdict.FLAGGED,
                   f"the rounds where the candidate's batch went first (the reference's followed it) were "
                   f"{reading.extra_us:.1f} us longer than their paired rounds, the pair's windows summed (median of "
                   f"{reading.pairs} pairs, 95 % interval {low:.1f}-{high:.1f} us; allowed {reading.allowed_us:.1f} us): "
                   "the candidate left work running on the device after its batch, which slowed the reference's "
                   "(a timing cheat, never a speedup)")
