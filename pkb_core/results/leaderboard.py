"""Several runs side by side (``pkb leaderboard``): one row per run and setting, overall and by category.

Pure functions over the runs of :mod:`pkb_core.results.runs`; ``pkb leaderboard`` prints,
``--json`` dumps and ``--html`` renders exactly the dict :func:`leaderboard` returns.

**Rows.** A row holds the records of one run that share one *setting*: backend, machine,
world size and timing mode. A run whose records differ in any of them (``pkb run --nproc
2,4``) gives one row per setting, each labelled with what sets it apart; records of different
settings are never pooled into one row. The setting of a record:

* machine: ``record.machine``'s device, GPU model and GPU count (``2x NVIDIA H200``, ``cpu``);
  host names and software versions are not compared;
* world size: ``record.world_size``;
* timing mode: what the job was asked to do, the last field of its key (``check``: untimed;
  ``perf:latency+graph``: timed in those modes, the first one the headline), else the
  record's ``options.timing_modes``.

A record that does not say (a job refused before any launch has no machine; an untimed
record of an old version no timing) takes the run's only known value, if it has one.
Refinement loops (``pkb generate --rounds``) count each problem's best round
(:func:`pkb_core.results.rounds.final_states`), as ``pkb report`` does.

**Metrics** of a row and of each category in it: those of :mod:`pkb_core.results.report`
(:func:`pkb_core.results.report.aggregates`), the same definitions as ``pkb report``:
passed / total (``unsupported`` records not counted, listed among the verdicts), the pass
rate, fast_p for p in :data:`pkb_core.results.report.FAST_P` (fast_0 is the pass rate;
fast_1, fast_1.5, fast_2: correct and *measurably* faster than p), the geometric-mean
speedup of correct, timed records, and every verdict's count. Host timings (CPU mode) are
left out of fast_p (p > 0) and the geomean unless ``include_cpu``.

**The geomean's interval** (:func:`geomean_interval`): a percentile bootstrap over problems,
:data:`RESAMPLES` resamples with the fixed seed :data:`SEED` (the same numbers every time).
Each resample draws the row's timed problems with replacement (a problem's samples stay
together) and takes the geometric mean of their speedups; the interval holds the middle
95 % of those means. It says how much the geomean depends on which problems were drawn. It
does not add each record's own timing noise (its ``speedup_ci``): on a GPU that is much
narrower than the spread across problems. Below :data:`MIN_PROBLEMS` timed problems there is
no interval (None).

**Said, never pooled.** When rows differ in machine, world size, timing mode or problem set,
``differences`` lists each such setting with every row's value and ``notes`` say it in words;
``comparable`` is false. ``common=True`` scores every row on the problems all rows have.
Rows with host timings are marked (``host_timings``) and noted.

Rows are ranked by pass rate, then fast_1, then the geomean (each higher first), then the
order the runs were given.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

from pkb_core.contracts.record import Record
from pkb_core.contracts.verdict import VERDICTS
from pkb_core.errors import CannotStart
from pkb_core.results.report import FAST_P, aggregates, counted, host_timed, is_correct, speed_counts
from pkb_core.results.rounds import final_states, is_loop
from pkb_core.results.runs import Run

#: Bootstrap resamples of the geomean's interval, and their seed (fixed: the same interval every time).
RESAMPLES = 2000
SEED = 0
LEVEL = 0.95
#: Fewest timed problems a geomean gets an interval with.
MIN_PROBLEMS = 5
#: The settings that split a run into rows, and their words in notes.
SETTINGS = {"machine": "machine", "world_size": "world size", "timing": "timing mode"}
#: The p of the fast_p columns (fast_0 is the pass rate, shown as such).
SHOWN_P = tuple(f"{p:g}" for p in FAST_P if p > 0)
#: What host timings are, under a leaderboard that has them.
HOST_NOTE = "host timings (CPU mode): gloo and Triton's interpreter timed on the host's clock, not GPU kernels"


@dataclass
class Entry:
    """The records of one run that share one setting: one row."""

    run_index: int
    run: Run
    backend: str
    machine: str | None
    world_size: int
    timing: str | None
    records: list


def machine_of(record: Record) -> str | None:
    """``2x NVIDIA H200``, ``cpu``, or None when the record does not say."""
    info = record.machine or {}
    device = info.get("device")
    if not device:
        return None
    if device != "cuda":
        return str(device)
    gpu = info.get("gpu") or "GPU"
    count = info.get("gpu_count")
    return f"{count}x {gpu}" if count else str(gpu)


def timing_of(record: Record) -> str | None:
    """``untimed``, ``latency+graph`` (the modes asked for), or None when the record does not say."""
    last = str(record.key).rsplit("|", 1)[-1]
    if last == "check":
        return "untimed"
    if last.startswith("perf:"):
        return last[len("perf:"):]
    if record.options and record.options.timing_modes:
        return "+".join(record.options.timing_modes)
    return None


def problem_key(record: Record) -> tuple:
    """What makes two records the same problem across runs."""
    return record.problem, str(record.size), str(record.dtype)


def split(run: Run, index: int) -> list[Entry]:
    """The run's rows: its records grouped by backend, machine, world size and timing mode."""
    records = final_states(run.records) if is_loop(run.records) else list(run.records)
    machines = {m for m in map(machine_of, records) if m}
    timings = {t for t in map(timing_of, records) if t}
    groups: dict[tuple, list] = {}
    for record in records:
        # A record that does not say takes the run's only known value (a job refused before its launch).
        machine = machine_of(record) or (next(iter(machines)) if len(machines) == 1 else None)
        timing = timing_of(record) or (next(iter(timings)) if len(timings) == 1 else None)
        groups.setdefault((record.backend, machine, record.world_size, timing), []).append(record)
    return [Entry(index, run, backend, machine, world_size, timing, rows)
            for (backend, machine, world_size, timing), rows in sorted(groups.items(), key=lambda kv: str(kv[0]))]


def timed_correct(records, include_cpu: bool = False) -> list:
    """The records a geomean is taken over: counted, correct, with a positive speedup that counts."""
    return [r for r in counted(records) if is_correct(r) and speed_counts(r, include_cpu) and r.speedup > 0]


def geomean_interval(records, include_cpu: bool = False) -> tuple[tuple[float, float] | None, int]:
    """``((low, high), problems)``: the geomean speedup's 95 % interval by a percentile bootstrap over
    problems (module docstring), and how many timed problems it is over; ``(None, n)`` below
    :data:`MIN_PROBLEMS`."""
    clusters: dict[tuple, list[float]] = {}
    for r in timed_correct(records, include_cpu):
        key = (r.backend, r.problem, r.world_size, str(r.size), str(r.dtype), r.mode)
        clusters.setdefault(key, []).append(math.log(r.speedup))
    sums = [(sum(logs), len(logs)) for logs in clusters.values()]
    if len(sums) < MIN_PROBLEMS:
        return None, len(sums)
    rng = random.Random(SEED)
    means = []
    for _ in range(RESAMPLES):
        drawn = rng.choices(sums, k=len(sums))
        means.append(sum(s for s, _ in drawn) / sum(n for _, n in drawn))
    means.sort()
    tail = (1 - LEVEL) / 2
    low = means[math.floor(tail * RESAMPLES)]
    high = means[math.ceil((1 - tail) * RESAMPLES) - 1]
    return (math.exp(low), math.exp(high)), len(sums)


def stats(records, include_cpu: bool = False) -> dict:
    """A row's (or a category's) numbers: passed / total, pass rate, fast_p, geomean and its
    interval, every verdict's count."""
    agg = aggregates(records, include_cpu)
    interval, timed_problems = geomean_interval(records, include_cpu)
    verdicts = {v: agg["verdicts"].get(v, 0) for v in VERDICTS}
    return {"problems": len({problem_key(r) for r in records}), "total": agg["count"], "passed": verdicts["pass"],
            "pass_rate": agg["pass_rate"], "fast_p": agg["fast_p"], "geomean_speedup": agg["geomean_speedup"],
            "geomean_ci": list(interval) if interval else None, "timed_correct": agg["timed_correct"],
            "timed_problems": timed_problems, "host_timed": agg["host_timed"],
            "launcher_timed": agg["launcher_timed"], "verdicts": verdicts}


def leaderboard(runs, labels=(), include_cpu: bool = False, common: bool = False) -> dict:
    """Every run's rows, ranked, with the settings they differ in (the module docstring).

    :param runs: :class:`pkb_core.results.runs.Run` objects, in the order given.
    :param labels: a label per run, in order (fewer than runs: the rest are made from each
        run's model or name and its backend).
    """
    entries = [e for i, run in enumerate(runs) for e in split(run, i)]
    names = _labels(entries, list(labels))
    problem_sets = {name: {problem_key(r) for r in e.records} for name, e in zip(names, entries)}
    shared = set.intersection(*problem_sets.values()) if problem_sets else set()
    rows = []
    for order, (name, entry) in enumerate(zip(names, entries)):
        records = [r for r in entry.records if problem_key(r) in shared] if common else entry.records
        rows.append(_row(name, entry, records, include_cpu, order))
    rows.sort(key=_rank_key)
    for rank, row in enumerate(rows, 1):
        row["rank"] = rank
        del row["order"]  # the order given: the last tie-break only
    found = differences(rows, problem_sets, shared)
    return {
        "rows": rows,
        "categories": sorted({c for row in rows for c in row["categories"]}),
        "fast_p": [f"{p:g}" for p in FAST_P],
        "interval": {"of": "geomean speedup", "method": "percentile bootstrap over problems",
                     "resamples": RESAMPLES, "seed": SEED, "level": LEVEL, "min_problems": MIN_PROBLEMS},
        "differences": found,
        "comparable": not found,
        "common": len(shared) if common else None,
        "include_cpu": include_cpu,
        "host_timings": [row["label"] for row in rows if row["host_timings"]],
        "notes": notes(rows, found, runs, entries, common, len(shared), include_cpu),
    }


def _row(name: str, entry: Entry, records, include_cpu: bool, order: int) -> dict:
    by_category: dict[str, list] = {}
    for r in records:
        by_category.setdefault(r.category, []).append(r)
    run = entry.run
    return {
        "rank": None, "label": name, "run": str(run.path), "backend": entry.backend,
        "model": run.model and run.model["model"], "model_from": run.model and run.model["from"],
        "machine": entry.machine, "world_size": entry.world_size, "timing": entry.timing,
        # CPU mode times the host (an untimed CPU run has no timings to label).
        "host_timings": (entry.machine == "cpu" and entry.timing != "untimed")
        or any(host_timed(r) for r in records if r.speedup),
        "loop": is_loop(run.records),
        "overall": stats(records, include_cpu),
        "categories": {c: stats(rs, include_cpu) for c, rs in sorted(by_category.items())},
        "order": order,
    }


def _rank_key(row: dict):
    overall = row["overall"]

    def higher_first(value):
        return -value if value is not None else math.inf

    return (higher_first(overall["pass_rate"]), higher_first(overall["fast_p"].get("1")),
            higher_first(overall["geomean_speedup"]), row["order"])


def _labels(entries, given: list) -> list[str]:
    """Each row's label: the run's ``--label`` or its model (else its name) with its backend, plus what
    sets the row apart from the run's other rows; a label two rows would share gets the run's number."""
    if len(given) > len({e.run_index for e in entries}):
        raise CannotStart(f"{len(given)} labels for {len({e.run_index for e in entries})} runs: give at most one "
                          "--label per run")
    def made(e):
        return e.run.model["model"] if e.run.model else e.run.name

    # A made name several runs share (their solutions' one folder) is told apart by each run's own.
    runs_of = {}
    for e in entries:
        runs_of.setdefault(made(e), set()).add(e.run_index)
    out = []
    for e in entries:
        siblings = [x for x in entries if x.run_index == e.run_index]
        labelled = e.run_index < len(given)
        parts = {"backend": e.backend, "machine": e.machine or "machine unknown", "world_size": f"W{e.world_size}",
                 "timing": e.timing or "timing unknown"}
        varying = [s for s in parts if len({getattr(x, s) for x in siblings}) > 1]
        if not labelled and "backend" not in varying:
            varying.insert(0, "backend")  # a made label always names the backend
        base = given[e.run_index] if labelled else made(e)
        if not labelled and len(runs_of[base]) > 1 and e.run.path.name not in ("", base):
            base = f"{base} in {e.run.path.name}"
        suffix = ", ".join(parts[s] for s in varying)
        out.append(f"{base} ({suffix})" if suffix else base)
    shared = {label for label in out if out.count(label) > 1}
    return [f"{label} #{entry.run_index + 1}" if label in shared else label for label, entry in zip(out, entries)]


def differences(rows, problem_sets: dict, shared: set) -> list[dict]:
    """The settings the rows differ in: ``{"setting", "values": {label: value}}`` each; for the
    problem set the values are problem counts, with ``common`` (how many every row has) and
    ``common_by_name`` (how many names every row has: more when sizes or dtypes differ)."""
    found = []
    for field, word in SETTINGS.items():
        values = {row["label"]: row[field] for row in rows}
        if len({v for v in values.values() if v is not None}) > 1:
            found.append({"setting": word, "values": values})
    if len({frozenset(s) for s in problem_sets.values()}) > 1:
        by_name = set.intersection(*({key[0] for key in s} for s in problem_sets.values()))
        found.append({"setting": "problem set", "values": {label: len(s) for label, s in problem_sets.items()},
                      "common": len(shared), "common_by_name": len(by_name)})
    return found


def notes(rows, found, runs, entries, common: bool, shared: int, include_cpu: bool) -> list[str]:
    """What a reader of the table must know, in words (the terminal and the HTML page print them)."""
    out = []
    for difference in found:
        by_value: dict = {}
        for label, value in difference["values"].items():
            shown = "unknown" if value is None else f"W{value}" if difference["setting"] == "world size" else value
            by_value.setdefault(shown, []).append(label)
        if difference["setting"] == "problem set":
            values = "; ".join(f"{label}: {n}" for label, n in difference["values"].items())
            scored = (f"every row scored on the {shared} problems all rows have (--common)" if common else
                      f"{shared} problems in common (--common scores every row on those only)")
            if difference["common_by_name"] > shared:
                scored += (f"; {difference['common_by_name']} in common by name alone: a problem at another size or "
                           "dtype is another problem")
            out.append(f"rows differ in problem set (problems: {values}); {scored}")
        else:
            values = "; ".join(f"{value}: {', '.join(labels)}" for value, labels in by_value.items())
            out.append(f"rows differ in {difference['setting']} ({values}): each row holds one "
                       f"{difference['setting']}, never pooled")
    for i, run in enumerate(runs):
        own = [e for e in entries if e.run_index == i]
        if len(own) > 1:
            out.append(f"{run.path} holds records of {len(own)} settings: one row each")
        if is_loop(run.records):
            out.append(f"{run.path} is a refinement loop: each problem counts with its best round")
    unknown = [row["label"] for row in rows if row["machine"] is None]
    if unknown:
        out.append(f"machine unknown for {', '.join(unknown)}: none of its records ran (refused before a launch)")
    host = [row["label"] for row in rows if row["host_timings"]]
    if host:
        counted_here = ("counted in fast_p and the geomean (--include-cpu)" if include_cpu else
                        "left out of fast_p (p > 0) and the geomean (--include-cpu counts them)")
        out.append(f"{', '.join(host)}: {HOST_NOTE}; {counted_here}")
    if any(row["overall"]["pass_rate"] and row["overall"]["fast_p"]["1"] is None for row in rows):
        out.append("n/a: no correct record was timed (run with --measure-perf), or only host timings or a "
                   "launcher clock's (latency, back-to-back, graph: never counted) were")
    out.append(f"fast_p: correct and measurably faster than p (its 95 % interval above 1.0); geomean: of the "
               f"correct, timed records' speedups; its {LEVEL:.0%} interval: a bootstrap over problems "
               f"({RESAMPLES} resamples, seed {SEED}; none below {MIN_PROBLEMS} timed problems)")
    return out
