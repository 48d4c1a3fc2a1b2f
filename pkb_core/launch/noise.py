"""The noise floor: what this machine's timings can resolve (``pkb calibrate``).

The reference timed against itself (the reference backend's self-check: the
same code on both sides, in the judge's processes and in a candidate's) must
read 1.00; how far its ratios stray, and how wide their 95 % intervals are
(:mod:`pkb_core.conduct.intervals`), is the smallest speedup this machine can
tell from noise. :func:`measure_noise_floor` runs a few problems (1, 2, 7 by
default: all-reduce, all-gather, reduce-scatter) through the normal pipeline
(``pkb run --backend reference --measure-perf`` in every timing mode the
device has, at least :data:`MIN_ROUNDS` rounds per mode so that every ratio
has an interval) and condenses the records; the result is cached with the
calibration (:mod:`pkb_core.machine.calibrate`) and shown by ``pkb calibrate``.

Per mode: ``entries`` (per problem: both medians, the ratio, its interval and
reading, each median's interval half-width, samples and why sampling
stopped), ``ratio_min``/``ratio_max`` over the problems, and ``resolution``:
the largest distance from 1.0 reached by any ratio's interval, i.e. a
speedup must exceed about ``1 + resolution`` to be measurable here.
"""
from __future__ import annotations

import datetime as _dt
import shutil
from pathlib import Path

from pkb_core.contracts.record import Record
from pkb_core.contracts.timing import FASTER, SAME, SLOWER
from pkb_core.contracts.verdict import Verdict

#: Problems timed against themselves by default (ids).
NOISE_PROBLEMS = ("1", "2", "7")
#: Rounds per mode at least: the fewest that give a 95 % interval over rounds (pkb_core.conduct.intervals).
MIN_ROUNDS = 6
#: What the reference against itself reads as, in words that claim no more than its interval: the same
#: code runs on both sides, so an interval away from 1.0 measures a bias of this machine's timing (the
#: sides' order, the host's load between them), never that one copy of the code is slower.
NOISE_READINGS = {SAME: "no measurable difference (as it should)", FASTER: "timing bias: interval above 1.0",
                  SLOWER: "timing bias: interval below 1.0"}


def modes_for(device: str) -> tuple:
    """Every timing mode the device has (graph needs a GPU), the headline first: window mode, the
    judge's clock, whose floor is the one a run's speedup is read against."""
    from pkb_core.contracts.modes import MODES

    return MODES if device == "cuda" else tuple(m for m in MODES if m != "graph")


def measure_noise_floor(device: str, *, problems=NOISE_PROBLEMS, nproc: int | None = None, size: str | None = None,
                        iters: int | None = None, min_iters: int | None = None, run_dir: Path,
                        job_timeout: float | None = None, pm=None, config=None) -> dict:
    """Time the reference against itself for ``problems`` in every mode; the
    condensed result (see the module docstring). ``run_dir`` receives the
    records (emptied first); ``pm`` and ``config``: the run's plugin manager (its
    observers see the records) and configuration (default: a fresh manager, none)."""
    from pkb_core.launch.plan import TIMING_DEFAULTS, RunRequest, device_defaults, pair_solutions
    from pkb_core.launch.session import Session
    from pkb_core.plugin.manager import get_plugin_manager
    from pkb_core.plugin.reference_backend import NAME as REFERENCE

    session = Session.here(pm or get_plugin_manager(), config, device=device, backend=REFERENCE,
                           world_size=nproc)
    nproc = session.world_size
    size, dtype = device_defaults(device, size or "auto")
    warmup, default_min, default_iters = TIMING_DEFAULTS[size]
    # Six rounds of ten calls at least (conduct/timed_rounds.py makes batches of iters / 6): intervals,
    # whatever the size's defaults.
    least = MIN_ROUNDS * 10
    iters = iters or max(default_iters, least)
    min_iters = min_iters or max(default_min, least)
    modes = modes_for(device)
    request = RunRequest(problems=",".join(map(str, problems)), backend=REFERENCE, solution=None, solutions=None,
                         nproc=nproc, trials=1, dtype=dtype, size=size,
                         mode="eval", measure_perf=True, warmup=warmup, iters=iters,
                         min_iters=min(min_iters, iters), save_outputs=False, timing_modes=modes)
    jobs, _ = session.plan(request, pair_solutions(request, session.registry, session.info))  # refused: not timed
    run_dir = Path(run_dir)
    shutil.rmtree(run_dir, ignore_errors=True)  # a rerun would skip recorded jobs
    with session:
        records = session.run(jobs, session.settings(run_dir, job_timeout=job_timeout))
    return dict(condense(records, modes), size=size, nproc=nproc, iters=iters, run_dir=str(run_dir),
                datetime=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                method="the reference against itself (pkb run --backend reference --measure-perf), every mode")


def condense(records: list[Record], modes) -> dict:
    """Per mode, the entries of the records and their spread (pure; see the module docstring)."""
    out = {"problems": [r.problem for r in records], "modes": {}}
    for mode in modes:
        entries, missing = [], []
        for r in records:
            stats = r.stats.modes.get(mode) if r.stats else None
            if r.verdict != Verdict.PASS or not stats or not stats.speedup:
                why = (stats and stats.unavailable) or f"{r.verdict.value}: {r.reason}".strip(": ")
                missing.append({"problem": r.problem, "why": why})
                continue
            ratio = stats.speedup
            entries.append({
                "problem": r.problem, "reference_ms": stats.reference.median,
                "copy_ms": stats.candidate.median, "ratio": ratio.value, "low": ratio.low,
                "high": ratio.high, "difference": ratio.difference,
                "reference_ci_rel": stats.reference.ci_rel, "copy_ci_rel": stats.candidate.ci_rel,
                "samples": stats.reference.rounds, "stopped": stats.stopped,
            })
        ratios = [e["ratio"] for e in entries if e["ratio"]]
        reach = [max(1.0 - e["low"], e["high"] - 1.0) for e in entries if e["low"] is not None]
        out["modes"][mode] = {"entries": entries, "missing": missing,
                              "ratio_min": min(ratios) if ratios else None, "ratio_max": max(ratios) if ratios else None,
                              "resolution": max(reach) if len(reach) == len(entries) and reach else None}
    return out


def noise_reading(difference: str) -> str:
    """An entry's reading in words (:data:`NOISE_READINGS`; ``too few rounds to tell`` as it is)."""
    return NOISE_READINGS.get(difference, difference)


def describe(noise: dict) -> list[str]:
    """One line per mode: what the machine resolves, and any bias it showed (the same code timed apart)."""
    lines = []
    for mode, m in noise.get("modes", {}).items():
        if not m["entries"]:
            why = "; ".join(f"{x['problem']}: {x['why']}" for x in m["missing"]) or "nothing timed"
            lines.append(f"{mode}: not measured ({why})")
            continue
        spread = f"reference/reference {m['ratio_min']:.3f}-{m['ratio_max']:.3f}"
        biased = [e["problem"] for e in m["entries"] if e["difference"] in (FASTER, SLOWER)]
        bias = (f"; {len(biased)} of {len(m['entries'])} read the same code apart (intervals away from 1.0: "
                "a bias of this machine's timing, not a difference in speed)" if biased else "")
        if m["resolution"] is None:
            lines.append(f"{mode}: {spread}{bias}; too few rounds for intervals (6 at least: --noise-iters)")
        else:
            lines.append(f"{mode}: {spread}{bias}; intervals reach ±{100 * m['resolution']:.1f} % from 1.0: a "
                         f"speedup must exceed about {1 + m['resolution']:.3f}x to be measurable here")
    return lines
