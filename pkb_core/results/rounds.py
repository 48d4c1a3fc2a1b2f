"""Refinement loops by round: pass rate and fast_p after each round (``pkb report``, ``pkb plot``,
``pkb compare`` of the directory ``pkb generate --rounds N`` writes).

A loop's records carry ``round`` (from 1) in their extra fields. A problem's state
*after round k* is its best record among rounds ``<= k`` (:func:`merit`: passing first,
then measurably faster, then the larger speedup, then the later round): a problem counts
as passed after round k when any round up to k passed, as fast when any was fast. That
is what a user of the loop keeps (the loop writes the best file beside the rounds), and
it makes the curve never fall. A problem that stopped early keeps its state in later
rounds. Rates are over the problems in the loop (``unsupported`` ones left out), with
the definitions of :mod:`pkb_core.results.report`.
"""
from __future__ import annotations

from pkb_core.contracts.modes import claimable
from pkb_core.contracts.record import Record
from pkb_core.contracts.verdict import Verdict


def round_of(record: Record) -> int | None:
    value = record.extra.get("round")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def is_loop(records) -> bool:
    """Whether these are a refinement loop's records (every one has a round)."""
    return bool(records) and all(round_of(r) is not None for r in records)


def problem_of(record: Record) -> tuple:
    return record.problem, record.backend, record.world_size, str(record.size), str(record.dtype)


def merit(record: Record) -> tuple:
    """How good a round is, as a sort key (larger is better)."""
    passed = record.verdict == Verdict.PASS
    # Only the judge's clock counts for speed: a launcher clock's "faster" the candidate can fuse.
    judged = passed and claimable(record.timing_mode)
    faster = judged and record.difference == "faster"
    speed = (record.speedup or 0.0) if judged else 0.0
    return passed, faster, speed, round_of(record) or 0


def states_after(records, k: int) -> list[Record]:
    """Each problem's best record among rounds ``<= k`` (problems not yet begun are left out)."""
    best: dict[tuple, Record] = {}
    for record in records:
        if (round_of(record) or 0) <= k:
            key = problem_of(record)
            if key not in best or merit(record) > merit(best[key]):
                best[key] = record
    return list(best.values())


def final_states(records) -> list[Record]:
    """Each problem's best record over all rounds."""
    return states_after(records, max((round_of(r) or 0 for r in records), default=0))


def by_round(records, include_cpu: bool = False) -> list[dict]:
    """Per round k: problems, passed, pass rate, fast_p and geomean speedup after round k,
    and how many files round k checked."""
    from pkb_core.results.report import aggregates

    last = max((round_of(r) or 0 for r in records), default=0)
    rows = []
    for k in range(1, last + 1):
        states = states_after(records, k)
        agg = aggregates(states, include_cpu)
        rows.append({"round": k, "problems": agg["count"], "checked": sum(1 for r in records if round_of(r) == k),
                     "passed": agg["verdicts"].get("pass", 0), "pass_rate": agg["pass_rate"],
                     "fast_p": agg["fast_p"], "geomean_speedup": agg["geomean_speedup"]})
    return rows


def best_files(records) -> list[Record]:
    """Each problem's best record, labelled as the loop's best file (``<id>_<name>.py``,
    not ``..._r<k>.py``), so that two loops' problems match in ``pkb compare``."""
    import re

    import attrs

    return [attrs.evolve(r, solution=re.sub(r"_r\d+\.py$", ".py", str(r.solution))) for r in final_states(records)]


def rounds_side_by_side(records_a, records_b, include_cpu: bool = False) -> list[dict]:
    """Per round, pass rate and fast_1 of two loops after that round (a loop that ended
    earlier keeps its last state)."""
    a, b = by_round(records_a, include_cpu), by_round(records_b, include_cpu)
    rows = []
    for k in range(1, max(len(a), len(b)) + 1):
        ra, rb = a[min(k, len(a)) - 1] if a else None, b[min(k, len(b)) - 1] if b else None
        rows.append({"round": k, "pass_rate_a": ra and ra["pass_rate"], "pass_rate_b": rb and rb["pass_rate"],
                     "fast_1_a": ra and ra["fast_p"]["1"], "fast_1_b": rb and rb["fast_p"]["1"]})
    return rows


def summarize_run(records, run_dir=None, ks=None, include_cpu: bool = False) -> dict:
    """:func:`pkb_core.results.report.summarize`, and for a refinement loop's records: the
    aggregates and categories over each problem's best round (its rounds are not samples:
    no pass@k), and ``by_round``."""
    from pkb_core.results.report import aggregates, categories, summarize

    summary = summarize(records, run_dir, ks, include_cpu)
    if is_loop(records):
        best = final_states(records)
        summary.update(aggregates=aggregates(best, include_cpu), categories=categories(best, include_cpu),
                       at_k=None, by_round=by_round(records, include_cpu))
    return summary
