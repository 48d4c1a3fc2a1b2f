"""Result records: one self-contained JSON object per job, appended as JSON lines.

A run directory holds ``records.jsonl``; a rerun into the same directory skips
jobs whose key is already there (and says so), unless ``pkb run --force`` drops
their records first (:func:`forget_records`). ``--json`` prints exactly these records.

Record fields: ``key``, ``problem_id``, ``problem``, ``category``, ``backend``,
``solution``, ``world_size``, ``size``, ``dtype``, ``mode``, ``verdict``
(pass, fail, error, compile-error, timeout, crash, unsupported, flagged),
``reason``, ``trials``, and when timed ``reference_ms`` and ``solution_ms``
(medians, max over ranks), ``speedup`` (reference / solution) and ``stats``
(min, p10, median, p90, max, mean, stddev, rounds (the sample count) for each
side); plus ``datetime``, ``pkb_version``, ``seconds`` and ``machine``.

Timing rigor (docs/timing.md), for the headline mode:

``reference_ci_ms``, ``solution_ci_ms``
    ``[low, high]``: the 95 % distribution-free interval of each median, over
    the rounds' medians (None below 6 rounds);
``speedup_ci``
    ``[low, high]``: the speedup's 95 % interval, over the rounds' paired ratios;
``difference``
    ``faster``, ``slower`` or ``no measurable difference`` (the interval
    contains 1.0, or too few samples for one): what reports count as a win;
``clock``
    ``device`` (CUDA events) or ``host`` (CPU mode: host timings, left out of
    fast_p unless ``pkb report --include-cpu``).

``stats.modes.<mode>`` holds every mode's sides (with ``ci_low``, ``ci_high``,
``ci_rel``, ``ci_units``), its ``speedup`` (value, low, high, level, rounds, difference), ``stopped``
(``precise``, ``cap`` or ``time``: why sampling ended), ``batches`` (rounds)
and ``alignment`` (per side: ``device barrier`` or why only the host barrier).
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
from pathlib import Path

from pkb_core import __version__
from pkb_core.results.verdict import VERDICTS

RECORDS = "records.jsonl"


def job_record(job: dict, world_size: int, verdict: str, reason: str = "", *, timing=None,
               trials=0, seconds=None, machine=None) -> dict:
    """The record of one job (``job`` is the launcher's job dict)."""
    assert verdict in VERDICTS, verdict
    record = {
        "key": job["key"],
        "problem_id": job["problem_id"],
        "problem": job["problem"],
        "category": job["category"],
        "backend": job["backend"],
        "solution": job["solution_label"],
        "world_size": world_size,
        "size": job["size"],
        "dtype": job["dtype"],
        "mode": job["mode"],
        "verdict": verdict,
        "reason": reason,
        "trials": trials,
    }
    if timing:
        record.update(stats=timing, options={"warmup": job["warmup"], "iters": job["iters"],
                                             "min_iters": job.get("min_iters", job["iters"]),
                                             "timing_modes": job["timing_modes"]})
        if timing.get("reference") and timing.get("candidate"):
            ref, cand = timing["reference"]["median"], timing["candidate"]["median"]
            record.update(reference_ms=ref, solution_ms=cand, speedup=ref / cand if cand > 0 else None,
                          timing_mode=timing["primary"])
            record.update(_rigor(timing))
        if timing.get("sol"):
            sol = timing["sol"]
            record["sol"] = dict(sol, reference_fraction=sol["floor_ms"] / record["reference_ms"],
                                 solution_fraction=sol["floor_ms"] / record["solution_ms"])
    record.update(
        datetime=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        pkb_version=__version__,
        seconds=None if seconds is None else round(seconds, 3),
        machine=machine or {},
    )
    return record


def _rigor(timing: dict) -> dict:
    """The headline mode's intervals, reading and clock, as record fields."""
    def interval(side):
        low, high = side.get("ci_low"), side.get("ci_high")
        return None if low is None or high is None else [low, high]

    fields = {"reference_ci_ms": interval(timing["reference"]), "solution_ci_ms": interval(timing["candidate"]),
              "clock": timing.get("clock", "device")}
    speedup = timing.get("speedup")
    if speedup:
        low, high = speedup.get("low"), speedup.get("high")
        fields.update(speedup_ci=None if low is None else [low, high], difference=speedup["difference"])
    return fields


def append_record(run_dir: Path, record: dict) -> None:
    """Append one record; a single write of one line, so readers never see half of it."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record, sort_keys=False) + "\n"
    fd = os.open(run_dir / RECORDS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read_records(run_dir: Path) -> list[dict]:
    """Every record of a run directory, in the order written (later duplicates win)."""
    path = Path(run_dir) / RECORDS
    if not path.exists():
        return []
    by_key = {}
    for line in path.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            by_key[record["key"]] = record
    return list(by_key.values())


def forget_records(run_dir: Path, keys) -> int:
    """Drop every record whose key is in ``keys`` (``pkb run --force``), and their saved
    outputs; returns how many jobs had records. The file is replaced in one rename."""
    import shutil

    path = Path(run_dir) / RECORDS
    if not path.exists():
        return 0
    keys = set(keys)
    kept, dropped = [], {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        if record.get("key") in keys:
            dropped[record["key"]] = record
        else:
            kept.append(line + "\n")
    if not dropped:
        return 0
    from pkb_core.launch.plan import job_slug

    for record in dropped.values():
        folder = Path(run_dir) / "outputs" / job_slug(record["problem"], str(record["solution"]),
                                                      record["world_size"], record["size"])
        if folder.is_dir():
            shutil.rmtree(folder, ignore_errors=True)
    tmp = path.with_name(f".{RECORDS}.{os.getpid()}")
    tmp.write_text("".join(kept))
    os.replace(tmp, path)
    return len(dropped)


def machine_info(device) -> dict:
    """What the numbers were measured on (rank 0's view)."""
    import torch

    info = {
        "host": platform.node(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": device.type,
        "cpu_count": os.cpu_count(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(gpu=props.name, gpu_count=torch.cuda.device_count(), cuda=torch.version.cuda,
                    nccl=".".join(map(str, torch.cuda.nccl.version())))
    return info
