"""Comparing two run directories row by row, with noise taken into account.

Rows are matched on (problem, solution file name, world size, size, dtype).
Each matched row gets a status:

* ``regressed``: the verdict went from ``pass`` to anything else, or the
  solution's median time grew by more than the threshold *and* the two runs'
  p10..p90 ranges do not overlap (B's p10 above A's p90);
* ``improved``: the verdict went from not passing to ``pass``, or the median
  shrank by more than the threshold with B's p90 below A's p10;
* ``unchanged``: anything else (a change inside either run's own spread is noise);
* ``only in A`` / ``only in B``: no partner in the other run.

``--fail-on median:5%`` makes ``pkb compare`` exit 1 when a regression exceeds
5 % (a verdict regression always does): the form for CI.
"""
from __future__ import annotations

import re

from pkb_core.contracts.record import Record
from pkb_core.contracts.verdict import Verdict
from pkb_core.errors import PkbError
from pkb_core.results.report import solution_name

#: Relative change below which a timing difference is never a change.
DEFAULT_THRESHOLD = 0.05
METRICS = ("median",)


def match_key(record: Record) -> tuple:
    return (record.problem, solution_name(record), record.world_size, record.size,
            record.dtype)


def parse_percent(text: str, what: str) -> float:
    """``"5%"`` or ``"5"`` -> 0.05."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*%?\s*", text or "")
    if not match:
        raise PkbError(f"{what} wants a percentage like 5%, got {text!r}")
    return float(match.group(1)) / 100


def parse_fail_on(text: str) -> tuple[str, float]:
    """``"median:5%"`` -> ``("median", 0.05)``."""
    metric, sep, percent = (text or "").partition(":")
    if not sep:
        raise PkbError(f"--fail-on wants METRIC:PERCENT like median:5%, got {text!r}")
    if metric.strip() not in METRICS:
        raise PkbError(f"--fail-on metric {metric.strip()!r} is not supported (use: {', '.join(METRICS)})")
    return metric.strip(), parse_percent(percent, "--fail-on")


def _timing(record):
    """The solution's (p10, median, p90) in ms, or None when untimed."""
    candidate = record.stats.candidate if record.stats else None
    if not candidate or record.solution_ms is None:
        return None
    return candidate.p10, candidate.median, candidate.p90


def compare_row(a: Record, b: Record, threshold: float = DEFAULT_THRESHOLD) -> dict:
    """The comparison of one matched pair of records."""
    row = dict(_side(a, "a"), **_side(b, "b"), change=None)
    if row["verdict_a"] == Verdict.PASS and row["verdict_b"] != Verdict.PASS:
        return dict(row, status="regressed", why=f"verdict pass -> {row['verdict_b']}")
    if row["verdict_a"] != Verdict.PASS and row["verdict_b"] == Verdict.PASS:
        return dict(row, status="improved", why=f"verdict {row['verdict_a']} -> pass")
    if row["verdict_a"] != Verdict.PASS:
        return dict(row, status="unchanged",
                    why=f"not passing in either run ({row['verdict_a']} -> {row['verdict_b']})")
    ta, tb = _timing(a), _timing(b)
    if not ta or not tb:
        return dict(row, status="unchanged", why="untimed in " + ("A" if not ta else "B"))
    (p10_a, med_a, p90_a), (p10_b, med_b, p90_b) = ta, tb
    change = med_b / med_a - 1 if med_a > 0 else 0.0
    row["change"] = change
    if abs(change) <= threshold:
        return dict(row, status="unchanged", why=f"within {threshold:.0%}")
    if change > 0 and p10_b > p90_a:
        return dict(row, status="regressed", why=f"slower by {change:.1%}, outside both spreads")
    if change < 0 and p90_b < p10_a:
        return dict(row, status="improved", why=f"faster by {-change:.1%}, outside both spreads")
    return dict(row, status="unchanged", why=f"{change:+.1%} but inside the runs' p10-p90 spread (noise)")


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
            rows.append(dict(ident, **compare_row(a, b, threshold)))
        else:
            present = a or b
            rows.append(dict(ident, **_side(a, "a"), **_side(b, "b"), change=None,
                             status="only in A" if a else "only in B", why=f"verdict {present.verdict.value}"))
    return rows


def _side(record: Record | None, name: str) -> dict:
    """One run's verdict, median and speedup for a row (None where the run has no such record)."""
    return {f"verdict_{name}": record and record.verdict.value, f"median_{name}": record and record.solution_ms,
            f"speedup_{name}": record and record.speedup}


def failures(rows, fail_on: tuple[str, float]) -> list[dict]:
    """Regressions that exceed ``fail_on``: every verdict regression, and slowdowns above the percentage."""
    _, limit = fail_on
    return [r for r in rows if r["status"] == "regressed" and (r["change"] is None or r["change"] > limit)]


def counts(rows) -> dict:
    out: dict[str, int] = {}
    for r in rows:
        out[r["status"]] = out.get(r["status"], 0) + 1
    return out
