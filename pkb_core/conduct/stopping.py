"""When a timing mode has enough samples: the stopping rule, chosen by the data.

The launcher times a mode in rounds (one batch of each side per round, in
alternating order: :mod:`pkb_core.conduct.jobrun`). After every round it asks
:meth:`StoppingRule.decide` whether to go on:

* never before ``min_samples`` per side (``--min-iters``): the first rounds
  also settle clocks and caches, and a tiny sample can look steady by luck;
* ``"precise"`` as soon as, for **both** sides, the 95 % interval of the median
  over the side's round medians (:func:`pkb_core.conduct.intervals.median_interval`:
  rounds are the independent units) lies within ``+-precision`` (1 %) of their
  median; that needs at least 6 rounds;
* ``"cap"`` at ``max_samples`` per side (``--iters``) however wide the intervals
  still are (a noisy machine: the record then carries the wide interval, and a
  speedup whose interval contains 1.0 reads "no measurable difference");
* ``"time"`` when the mode has used its share of the job's remaining time (the
  launcher decides that one, :func:`time_share`).

Checking after every round inflates the chance of stopping on a lucky
stretch a little (repeated looks); the minimum and the requirement that both
sides be precise at once keep that small, and the interval recorded is the one
of all the samples taken.
"""
from __future__ import annotations

from dataclasses import dataclass

from pkb_core.conduct.intervals import LEVEL, relative_half_width

#: The median's interval must lie within +-PRECISION of the median for sampling to stop early.
PRECISION = 0.01
#: The share of the job's remaining time that the timing modes may use for rounds beyond the minimum.
TIME_SHARE = 0.8


@dataclass(frozen=True)
class StoppingRule:
    """Per timing mode: sample at least ``min_samples`` and at most
    ``max_samples`` per side; stop in between once both medians are known to
    ``+-precision`` at ``level``."""

    min_samples: int
    max_samples: int
    precision: float = PRECISION
    level: float = LEVEL

    def __post_init__(self):
        if not 1 <= self.min_samples <= self.max_samples:
            raise ValueError(f"need 1 <= min_samples <= max_samples, got {self.min_samples}, {self.max_samples}")

    def decide(self, samples: int, reference: list[float], candidate: list[float]) -> str | None:
        """``"precise"``, ``"cap"`` or None (take another round).

        :param samples: timed calls per side so far.
        :param reference: the reference's round medians; ``candidate``: the candidate's.
        """
        if samples < self.min_samples:
            return None
        if self.precise(reference) and self.precise(candidate):
            return "precise"
        if samples >= self.max_samples:
            return "cap"
        return None

    def decide_within(self, samples: int, reference: list[float], candidate: list[float], spent_s: float,
                      budget_s: float) -> str | None:
        """:meth:`decide`, or ``"time"`` once the minimum is met and the mode has spent
        ``budget_s`` (:func:`time_share`): adaptive sampling never turns into a timeout."""
        stopped = self.decide(samples, reference, candidate)
        if stopped is None and samples >= self.min_samples and spent_s > budget_s:
            return "time"
        return stopped

    def precise(self, rounds: list[float]) -> bool:
        """The median's interval over ``rounds`` lies within ``+-precision``."""
        width = relative_half_width(rounds, self.level)
        return width is not None and width <= self.precision


def time_share(remaining_s: float, modes_left: int) -> float:
    """Seconds the current mode may spend on rounds beyond its minimum: an even
    share of :data:`TIME_SHARE` of the job's remaining time among the modes
    still to time (this one included)."""
    return max(0.0, remaining_s) * TIME_SHARE / max(1, modes_left)
