"""What a run directory says: per-problem rows and the aggregates people quote.

Pure functions over the records of :mod:`pkb_core.results.records`; no torch, no I/O
beyond reading ``records.jsonl``. ``pkb report`` prints, ``--json`` dumps and
``--html`` renders exactly the dict :func:`summarize` returns.

Definitions (KernelBench's, applied to pkb's records):

* a row is one record; ``unsupported`` rows (the problem rejects the world
  size, nothing ran) are listed but left out of every rate;
* **correct** means verdict ``pass`` (``flagged`` is not correct);
* **pass rate** = correct rows / counted rows;
* **fast_p** = rows that are correct *and* have ``speedup > p`` / counted
  rows, for p in :data:`FAST_P` (``fast_0`` is the pass rate; rows without
  timing count as not fast; ``None`` when rows are correct but none of them
  was timed, i.e. a run without ``--measure-perf``). A speedup counts only
  when it is measurable: a record whose speedup interval contains 1.0 reads
  ``no measurable difference`` (docs/timing.md) and is never fast, whatever
  its point value (records from before intervals count by the point value);
* **host timings** (CPU mode, ``clock: host``) are left out of fast_p (p > 0),
  fast_p@k and the geomean unless ``include_cpu``: they time the host, not a
  GPU kernel, and would mix two kinds of number;
* **launcher-clock timings** (a record timed in ``latency``, ``back-to-back`` or ``graph`` mode,
  or by a version before window mode) are never counted in fast_p (p > 0), fast_p@k or the
  geomean: their batches ran in the candidate's process, which can fuse them, so they are shown
  as diagnostics (:func:`launcher_timed`; docs/trust.md);
* **geomean speedup** = geometric mean of ``speedup`` over correct timed rows;
* **pass@k / fast_p@k**, when a problem has several samples (solutions
  ``<id>_<name>*.py`` run on the same problem, backend, world size, size, dtype
  and mode): the unbiased estimator ``1 - C(n-c, k) / C(n, k)`` per problem
  (n samples, c of them correct, or correct and faster than p), averaged over
  the problems with ``n >= k``.
"""
from __future__ import annotations

import math
from pathlib import Path

from pkb_core.contracts.modes import claimable
from pkb_core.contracts.record import Record
from pkb_core.contracts.verdict import Verdict
from pkb_core.errors import PkbError

#: The p of fast_p (speedup thresholds).
FAST_P = (0.0, 1.0, 1.5, 2.0)
#: k values reported by default for pass@k (those not above the most samples any problem has).
DEFAULT_KS = (1, 2, 5, 10, 25, 50, 100)
#: NVML clock-event bits that mean the GPU slowed itself down (power cap, hardware slowdown,
#: thermal slowdowns, power brake); idle and application-clock bits are not throttling.
THROTTLE_BITS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
#: A timed side whose p10..p90 range is wider than this fraction of its median is "noisy".
NOISY_SPREAD = 0.5


def load_run(run_dir) -> list[Record]:
    """The records of ``run_dir``; one clear error when there are none."""
    from pkb_core.results.records import RECORDS, read_records

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise PkbError(f"run directory {run_dir} does not exist")
    records = read_records(run_dir)
    if not records:
        raise PkbError(f"no records in {run_dir / RECORDS}")
    return records


def is_correct(record: Record) -> bool:
    return record.verdict == Verdict.PASS


def is_sweep(record: Record) -> bool:
    """A record of ``pkb bench`` (size ``sweep:<bytes>``)."""
    return str(record.size).startswith("sweep:")


def sweep_bytes(record: Record) -> int:
    return int(str(record.size).split(":", 1)[1])


def solution_name(record: Record) -> str:
    """The solution's file name (labels from ``--solutions DIR`` are full paths)."""
    return Path(str(record.solution)).name


#: Verdicts that say nothing about the solution (it could not run here; it was stopped from
#: outside): left out of every rate, and counted apart.
NOT_COUNTED = (Verdict.UNSUPPORTED, Verdict.CANCELLED, Verdict.UNCHECKED)


def counted(records) -> list[dict]:
    """The rows that count towards rates: everything but :data:`NOT_COUNTED`, one row per solution
    file and setting (backend, problem, world size, size, dtype, mode): the file's last record. A
    file edited and run again into the same folder has a record of its own (its content is in the
    record's key), and the stale one had counted beside it (a new user's pass rate of 50 % for
    one file that passed, 2026-12-02)."""
    latest: dict[tuple, object] = {}
    for r in records:
        if r.verdict not in NOT_COUNTED:
            slot = (r.backend, r.problem, r.world_size, r.size, r.dtype, r.mode, r.solution)
            latest.pop(slot, None)  # kept in the order of its last record
            latest[slot] = r
    return list(latest.values())


def geomean(values) -> float | None:
    values = [v for v in values if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def host_timed(record: Record) -> bool:
    """Timed on the host clock (CPU mode); older records tell by their machine."""
    if record.clock:
        return record.clock == "host"
    return bool(record.speedup) and (record.machine or {}).get("device") == "cpu"


def difference(record: Record) -> str | None:
    """``faster``, ``slower``, ``no measurable difference``, or None (untimed, or
    a record from before intervals)."""
    return record.difference


def launcher_timed(record: Record) -> bool:
    """Timed by a launcher-clock mode (``latency``, ``back-to-back``, ``graph``, and every record of
    a version before window mode): a diagnostic whose batches ran in the candidate's process, which
    can fuse them, so its speedup is shown and never counted (:func:`pkb_core.contracts.modes.claimable`)."""
    return bool(record.speedup) and not claimable(record.timing_mode)


def speed_counts(record: dict, include_cpu: bool) -> bool:
    """Whether this row's speedup enters the speed aggregates: the judge's clock's, and on a GPU
    (host timings with ``include_cpu``)."""
    return bool(record.speedup) and not launcher_timed(record) and (include_cpu or not host_timed(record))


def fast_p(records, p: float, include_cpu: bool = False) -> float | None:
    """Fraction of counted rows that are correct and measurably faster than ``p``
    (p = 0: the pass rate)."""
    rows = counted(records)
    if not rows:
        return None
    if p > 0 and _untimed(rows, include_cpu):
        return None  # correct but never timed (on a device): nothing is known about speed
    return sum(1 for r in rows if _fast(r, p, include_cpu)) / len(rows)


def _untimed(rows, include_cpu: bool = False) -> bool:
    """Some rows are correct and none of the correct ones has a speedup that counts."""
    correct = [r for r in rows if is_correct(r)]
    return bool(correct) and not any(speed_counts(r, include_cpu) for r in correct)


def _fast(record, p, include_cpu: bool = False) -> bool:
    if not is_correct(record):
        return False
    if p <= 0:
        return True
    if not speed_counts(record, include_cpu):
        return False
    if difference(record) and difference(record) != "faster":
        return False  # no measurable difference (or slower) is never a win
    return record.speedup > p


def pass_at_k(n: int, c: int, k: int) -> float:
    """KernelBench's (HumanEval's) unbiased estimator ``1 - C(n-c, k) / C(n, k)``; needs ``k <= n``."""
    if not 0 < k <= n:
        raise ValueError(f"pass@k needs 0 < k <= n (k={k}, n={n})")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def sample_groups(records) -> dict[tuple, list[dict]]:
    """Counted rows grouped into problems (same problem, backend, world size, size, dtype, mode):
    one sample per solution file, since :func:`counted` keeps each file's last record (a file run
    untimed, then again with ``--measure-perf`` into the same folder, is one sample, not two)."""
    groups: dict[tuple, list] = {}
    for r in counted(records):
        groups.setdefault((r.backend, r.problem, r.world_size, r.size, r.dtype, r.mode), []).append(r)
    return groups


def at_k(records, ks=None, include_cpu: bool = False) -> dict | None:
    """pass@k and fast_p@k per k, or None when no problem has more than one sample.

    ``{"problems": m, "max_n": N, "k": {k: {"problems": m_k, "pass": x, "fast_p": {"1": y, ...}}}}``
    """
    groups = sample_groups(records)
    if not groups:
        return None
    max_n = max(len(g) for g in groups.values())
    if max_n < 2 and ks is None:
        return None
    ks = [k for k in (ks or DEFAULT_KS) if k <= max_n]
    timed = not _untimed([r for g in groups.values() for r in g], include_cpu)
    result = {"problems": len(groups), "max_n": max_n, "k": {}}
    for k in ks:
        eligible = [g for g in groups.values() if len(g) >= k]

        def mean_estimate(p):
            return sum(pass_at_k(len(g), sum(_fast(r, p, include_cpu) for r in g), k) for g in eligible) / len(eligible)

        result["k"][str(k)] = {
            "problems": len(eligible),
            "pass": mean_estimate(0.0),
            "fast_p": {_p(p): (mean_estimate(p) if timed else None) for p in FAST_P if p > 0},
        }
    return result


def aggregates(records, include_cpu: bool = False) -> dict:
    """Verdict counts, pass rate, fast_p, geomean speedup and the readings of
    the speedups (faster / slower / no measurable difference) of a set of rows."""
    rows = counted(records)
    verdicts: dict[str, int] = {}
    for r in rows + [r for r in records if r.verdict in NOT_COUNTED]:
        verdicts[r.verdict.value] = verdicts.get(r.verdict.value, 0) + 1
    timed = [r for r in rows if is_correct(r) and speed_counts(r, include_cpu)]
    readings: dict[str, int] = {}
    for r in timed:
        if difference(r):
            readings[difference(r)] = readings.get(difference(r), 0) + 1
    return {
        "count": len(rows),
        "unsupported": sum(1 for r in records if r.verdict == Verdict.UNSUPPORTED),
        "cancelled": sum(1 for r in records if r.verdict == Verdict.CANCELLED),
        "unchecked": sum(1 for r in records if r.verdict == Verdict.UNCHECKED),
        "verdicts": dict(sorted(verdicts.items())),
        "pass_rate": fast_p(rows, 0.0),
        "fast_p": {_p(p): fast_p(rows, p, include_cpu) for p in FAST_P},
        "geomean_speedup": geomean([r.speedup for r in timed]),
        "timed_correct": len(timed),
        "differences": dict(sorted(readings.items())),
        # Each row left out is counted once, by what leaves it out first: its clock, then its host.
        "host_timed": sum(1 for r in rows if is_correct(r) and r.speedup and host_timed(r) and not launcher_timed(r)),
        "launcher_timed": sum(1 for r in rows if is_correct(r) and launcher_timed(r)),
        "include_cpu": include_cpu,
    }


def categories(records, include_cpu: bool = False) -> list[dict]:
    """Per category: count, pass rate, geomean speedup of correct rows, fast_1."""
    by_category: dict[str, list[dict]] = {}
    for r in records:
        by_category.setdefault(r.category, []).append(r)
    out = []
    for name, rows in sorted(by_category.items()):
        agg = aggregates(rows, include_cpu)
        out.append({"category": name, "count": agg["count"], "pass_rate": agg["pass_rate"],
                    "geomean_speedup": agg["geomean_speedup"], "fast_1": agg["fast_p"]["1"]})
    return out


def bandwidth(record: Record, side: str = "solution") -> tuple[float | None, float | None]:
    """``(algbw, busbw)`` in GB/s of one side (nccl-tests: algbw = S / t, busbw = algbw * factor)."""
    bus = record.stats.bus if record.stats else None
    ms = record.solution_ms if side == "solution" else record.reference_ms
    if not bus or not ms:
        return None, None
    algbw = bus["bytes"] / (ms * 1e-3) / 1e9
    return algbw, algbw * bus["factor"]


def flags(record: Record) -> list[str]:
    """Warnings a reader of the numbers should see: noisy timing, throttled GPU clocks, host
    timings, a launcher clock's speedup (shown, never counted)."""
    out = []
    stats = record.stats
    for side in ("reference", "candidate"):
        s = getattr(stats, side) if stats else None
        if s and s.median and (s.p90 - s.p10) > NOISY_SPREAD * s.median:
            out.append(f"noisy {side}")
    clocks = (stats.clocks if stats else None) or []
    reasons = [c.get("throttle_reasons") for c in clocks if c and c.get("throttle_reasons")]
    if any(int(str(r), 16) & THROTTLE_BITS for r in reasons):
        out.append("throttled")
    if host_timed(record):
        out.append("host timing")
    if launcher_timed(record):
        out.append("launcher clock")
    return out


def _half_width_pct(median, interval):
    """How far an interval reaches from its median, in % of it (the larger side)."""
    reach = _reach_pct(median, interval)
    return max(reach) if reach else None


def _reach_pct(median, interval):
    """``[below, above]``: how far an interval reaches under and over its median, in % of it (a
    median's interval is often lopsided: [0.67, 3.92] around 0.75 is 11 % under and 422 % over)."""
    if not median or not interval or interval[0] is None:
        return None
    return [100.0 * (median - interval[0]) / median, 100.0 * (interval[1] - median) / median]


def row(record: Record) -> dict:
    """The report's row for one record."""
    sol = record.sol
    algbw, busbw = bandwidth(record, "solution")
    _, ref_busbw = bandwidth(record, "reference")
    return {
        "problem_id": record.problem_id,
        "problem": record.problem,
        "category": record.category,
        "backend": record.backend,
        "solution": solution_name(record),
        "world_size": record.world_size,
        "size": record.size,
        "dtype": record.dtype,
        "verdict": record.verdict.value,
        "reference_ms": record.reference_ms,
        "solution_ms": record.solution_ms,
        "reference_ci_pct": _half_width_pct(record.reference_ms, record.reference_ci_ms),
        "solution_ci_pct": _half_width_pct(record.solution_ms, record.solution_ci_ms),
        "reference_ci_reach_pct": _reach_pct(record.reference_ms, record.reference_ci_ms),
        "solution_ci_reach_pct": _reach_pct(record.solution_ms, record.solution_ci_ms),
        "speedup": record.speedup,
        "speedup_ci": record.speedup_ci,
        "difference": difference(record),
        "clock": record.clock or ("host" if host_timed(record) else None),
        "timing_mode": record.timing_mode,
        "floor_ms": sol and sol.floor_ms,
        "bound": sol and sol.bound,
        "reference_sol_pct": _pct(sol and sol.reference_fraction),
        "solution_sol_pct": _pct(sol and sol.solution_fraction),
        "algbw_gbps": algbw,
        "busbw_gbps": busbw,
        "reference_busbw_gbps": ref_busbw,
        "reason": record.reason,
        "flags": flags(record),
    }


def summarize(records, run_dir=None, ks=None, include_cpu: bool = False) -> dict:
    """Everything ``pkb report`` shows, as one JSON-ready dict (host timings in
    the speed aggregates only with ``include_cpu``)."""
    ordered = sorted(records, key=lambda r: (r.problem_id or 0, _size_key(r), solution_name(r),
                                             r.world_size or 0, str(r.dtype)))
    return {
        "run_dir": None if run_dir is None else str(run_dir),
        "rows": [row(r) for r in ordered],
        "aggregates": aggregates(records, include_cpu),
        "categories": categories(records, include_cpu),
        "at_k": at_k(records, ks, include_cpu),
        "by_round": None,
        # Timed in CPU mode: host timings, not GPU performance (the report says so).
        # (Timed: it has medians; a speedup may be null where no interval exists.)
        "cpu_timings": any((r.machine or {}).get("device") == "cpu" and r.reference_ms is not None
                           for r in records),
    }


def _size_key(record):
    """Sweeps in byte order, presets by name."""
    return (0, sweep_bytes(record), "") if is_sweep(record) else (1, 0, str(record.size))


def _pct(fraction):
    return None if fraction is None else 100.0 * fraction


def _p(p: float) -> str:
    return f"{p:g}"
