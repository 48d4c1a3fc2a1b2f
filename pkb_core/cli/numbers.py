"""Number types of pkb's command-line options (and so of pkb.toml's values, which click converts
with the same types)."""
from __future__ import annotations

import math

import click


class FiniteFloatRange(click.FloatRange):
    """click's :class:`click.FloatRange` that refuses NaN and the infinities: every comparison with
    NaN is false, so ``--timeout nan`` passed ``FloatRange(min=0, min_open=True)`` and the job
    ended as pkb's own ``error`` ("cannot convert float NaN to integer"); ``inf`` and ``1e400``
    passed as a limit that never comes."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number
