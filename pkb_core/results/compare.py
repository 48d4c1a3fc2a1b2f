"""Comparing two run directories row by row, with the same intervals and rule as ``pkb run``.

Rows are matched on (problem, solution file name, world size, size, dtype); a row whose two
records ran different backends says so in its reason (a backend's samples share their file names
with other backends').
Each matched row gets a status:

* ``regressed``: the verdict went from ``pass`` to anything else, or the
  solution's median time grew by more than the threshold *and* the change is
  measurable: the two runs' 95 % intervals of that median do not overlap (B's
  ``ci_low`` above A's ``ci_high``) *and*, where both records carry one, the two
  speedups' 95 % intervals (over each run's paired rounds) do not overlap either;
* ``improved``: the verdict went from not passing to ``pass``, or the median
  shrank by more than the threshold, measurably in the same sense;
* ``unchanged``: anything else. A change whose intervals overlap is ``no
  measurable difference``, the reading ``pkb run`` gives a speedup whose interval
  contains 1.0 (:mod:`pkb_core.conduct.intervals`). A change whose speedups'
  intervals overlap moved the reference as much as the solution: the machine
  (its load, its clocks), not the solution, changed between the runs;
* ``not comparable``: the two medians are not one quantity (times of two clocks, or of two timing
  modes); said why, never a regression, and counted apart so that a comparison that compared
  nothing does not read as "unchanged" (``--fail-on`` fails on it: a CI's baseline of another mode);
* ``cancelled``: either run's job was cancelled (stopped from outside: the reward
  service's cancel), so nothing was found to compare; never a regression;
* ``only in A`` / ``only in B``: no partner in the other run.

The intervals are each record's own (``solution_ci_ms``, ``speedup_ci``: per-round
values, docs/timing.md); records written before pkb kept intervals fall back to
their p10..p90 spread. Times of two clocks (a GPU run against a CPU-mode run) are
never compared, nor medians of two timing modes (a run whose first ``--timing-mode`` was
``window`` against one whose first was ``latency``: different quantities, not a change). Host timings (CPU mode, ``clock: host``) are compared like any
others, and said to be host timings: they time gloo and Triton's interpreter on
the host, not GPU kernels.

``--fail-on median:5%`` makes ``pkb compare`` exit 1 when a regression exceeds
5 % (a verdict regression always does): the form for CI.
"""
from __future__ import annotations

import re

from pkb_core.contracts.record import Record
from pkb_core.contracts.verdict import Verdict
from pkb_core.errors import BadOption
from pkb_core.results.report import host_timed, solution_name

#: Relative change below which a timing difference is never a change.
DEFAULT_THRESHOLD = 0.05
METRICS = ("median",)
#: What a change inside the intervals reads as (``pkb run``'s word for a speedup whose interval holds 1.0).
SAME = "no measurable difference"
#: Under the table of a comparison with host timings.
HOST_NOTE = ("host timings (CPU mode, clock: host): they time gloo and Triton's interpreter on this host, "
             "not GPU kernels; a change says nothing about a GPU")


#: The status of a row whose two medians are not one quantity (two clocks, two timing modes).
NOT_COMPARABLE = "not comparable"


def match_key(record: Record) -> tuple:
    return (record.problem, solution_name(record), record.world_size, record.size,
            record.dtype)


def parse_percent(text: str, what: str) -> float:
    """``"5%"`` or ``"5"`` -> 0.05."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*%?\s*", text or "")
    if not match:
        raise BadOption(f"{what} wants a percentage like 5%, got {text!r}")
    return float(match.group(1)) / 100


def parse_fail_on(text: str) -> tuple[str, float]:
    """``"median:5%"`` -> ``("median", 0.05)``."""
    metric, sep, percent = (text or "").partition(":")
    if not sep:
        raise BadOption(f"--fail-on wants METRIC:PERCENT like median:5%, got {text!r}")
    if metric.strip() not in METRICS:
        raise BadOption(f"--fail-on metric {metric.strip()!r} is not supported (use: {', '.join(METRICS)})")
    return metric.strip(), parse_percent(percent, "--fail-on")


def _median_interval(record: Record):
    """``(median, (low, high), whether the range is an interval)`` of the solution's time in ms, or None
    when untimed: the median's 95 % interval, or (records from before intervals) the p10..p90 spread."""
    candidate = record.stats.candidate if record.stats else None
    if not candidate or record.solution_ms is None:
        return None
    if record.solution_ci_ms:
        return record.solution_ms, tuple(record.solution_ci_ms), True
    if candidate.ci_low is not None and candidate.ci_high is not None:
        return candidate.median, (candidate.ci_low, candidate.ci_high), True
    return candidate.median, (candidate.p10, candidate.p90), False


def _overlap(a, b) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def compare_row(a: Record, b: Record, threshold: float = DEFAULT_THRESHOLD) -> dict:
    """The comparison of one matched pair of records."""
    row = dict(_side(a, "a"), **_side(b, "b"), change=None)
    stopped = [name for name in ("a", "b") if row[f"verdict_{name}"] == Verdict.CANCELLED]
    if stopped:
        which = "both runs" if len(stopped) == 2 else stopped[0].upper()
        return dict(row, status="cancelled", why=f"cancelled in {which}: nothing was found to compare")
    if row["verdict_a"] == Verdict.PASS and row["verdict_b"] != Verdict.PASS:
        return dict(row, status="regressed", why=f"verdict pass -> {row['verdict_b']}")
    if row["verdict_a"] != Verdict.PASS and row["verdict_b"] == Verdict.PASS:
        return dict(row, status="improved", why=f"verdict {row['verdict_a']} -> pass")
    if row["verdict_a"] != Verdict.PASS:
        return dict(row, status="unchanged",
                    why=f"not passing in either run ({row['verdict_a']} -> {row['verdict_b']})")
    ta, tb = _median_interval(a), _median_interval(b)
    if not ta or not tb:
        return dict(row, status="unchanged", why="untimed in " + ("A" if not ta else "B"))
    if a.clock and b.clock and a.clock != b.clock:
        return dict(row, status=NOT_COMPARABLE, why=f"not comparable: A timed by the {a.clock} clock, B by the "
                                                 f"{b.clock} clock")
    if a.timing_mode and b.timing_mode and a.timing_mode != b.timing_mode:
        return dict(row, status=NOT_COMPARABLE, why=f"not comparable: A's median is {a.timing_mode} mode's, B's "
                                                 f"{b.timing_mode} mode's (the first --timing-mode of each run)")
    (med_a, range_a, interval_a), (med_b, range_b, interval_b) = ta, tb
    kind = "medians' 95 % intervals" if interval_a and interval_b else "p10-p90 spreads (records without intervals)"
    change = med_b / med_a - 1 if med_a > 0 else 0.0
    row["change"] = change
    if abs(change) <= threshold:
        return dict(row, status="unchanged", why=f"{change:+.1%}: within {threshold:.0%}")
    if _overlap(range_a, range_b):
        return dict(row, status="unchanged", why=f"{SAME}: {change:+.1%} lies inside the noise (the {kind} "
                                                 "overlap)")
    speedups = a.speedup_ci, b.speedup_ci
    if all(speedups) and _overlap(*speedups):
        return dict(row, status="unchanged",
                    why=f"{SAME}: {change:+.1%}, but the reference moved with it (the speedups' 95 % intervals "
                        "overlap): the machine changed, not the solution")
    paired = ", nor do the speedups'" if all(speedups) else ""
    if change > 0:
        return dict(row, status="regressed", why=f"slower by {change:.1%}: the {kind} do not overlap{paired}")
    return dict(row, status="improved", why=f"faster by {-change:.1%}: the {kind} do not overlap{paired}")


def compare_runs(records_a, records_b, threshold: float = DEFAULT_THRESHOLD) -> list[dict]:
    """One row per matched key (and per key found in only one run), in problem order."""
    by_a = {match_key(r): r for r in records_a}
    by_b = {match_key(r): r for r in records_b}
    ids = {match_key(r): r.problem_id or 0 for r in list(records_a) + list(records_b)}
    rows = []
    for key in sorted(set(by_a) | set(by_b), key=lambda k: (ids[k], tuple(str(x) for x in k))):
        a, b = by_a.get(key), by_b.get(key)
        ident = dict(zip(("problem", "solution", "world_size", "size", "dtype"), key))
        if a and b:
            row = compare_row(a, b, threshold)
            if a.backend != b.backend:  # matched by file name: say so, the two may be different code
                row["why"] += f" (A ran backend {a.backend}, B backend {b.backend})"
            rows.append(dict(ident, **row))
        else:
            present = a or b
            rows.append(dict(ident, **_side(a, "a"), **_side(b, "b"), change=None,
                             status="only in A" if a else "only in B", why=f"verdict {present.verdict.value}"))
    return rows


def _side(record: Record | None, name: str) -> dict:
    """One run's verdict, median (and its interval), speedup (and its interval and reading) and clock
    for a row (None where the run has no such record)."""
    timed = record is not None and record.solution_ms is not None
    return {f"verdict_{name}": record and record.verdict.value, f"median_{name}": record and record.solution_ms,
            f"median_ci_{name}": list(record.solution_ci_ms) if timed and record.solution_ci_ms else None,
            f"speedup_{name}": record and record.speedup,
            f"speedup_ci_{name}": list(record.speedup_ci) if record is not None and record.speedup_ci else None,
            f"difference_{name}": record and record.difference,
            f"clock_{name}": (record.clock or ("host" if host_timed(record) else None)) if timed else None,
            f"timing_mode_{name}": record.timing_mode if timed else None}


def host_timings(rows) -> list[str]:
    """Which runs (``A``, ``B``) hold host timings among the rows' timed records."""
    return [name.upper() for name in ("a", "b") if any(r.get(f"clock_{name}") == "host" for r in rows)]


def failures(rows, fail_on: tuple[str, float]) -> list[dict]:
    """Regressions that exceed ``fail_on``: every verdict regression, and slowdowns above the percentage."""
    _, limit = fail_on
    return [r for r in rows if r["status"] == "regressed" and (r["change"] is None or r["change"] > limit)]


def uncompared(rows) -> list[dict]:
    """The rows whose medians could not be compared (:data:`NOT_COMPARABLE`): under ``--fail-on``
    they fail the comparison, which would otherwise pass having compared nothing."""
    return [r for r in rows if r["status"] == NOT_COMPARABLE]


def counts(rows) -> dict:
    out: dict[str, int] = {}
    for r in rows:
        out[r["status"]] = out.get(r["status"], 0) + 1
    return out
