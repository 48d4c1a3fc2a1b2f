"""Result records: one self-contained JSON object per job, appended as JSON lines.

A run directory holds ``records.jsonl``; pkb makes the directory 0700 and the
file 0600 (:func:`make_run_dir`): records, logs and saved outputs are read by
the user who ran pkb (``pkb report``, the service), never by a job's candidate,
which runs as a user of its own. A rerun into the same directory skips
jobs whose key is already there (and says so), unless ``pkb run --force`` drops
their records first (:func:`forget_records`). ``--json`` prints exactly these records.

What a record holds is :class:`pkb_core.contracts.record.Record` (its fields
are the reference; docs/timing.md explains the timing ones): records are
written and read only as that contract, so a line that is not one is an error
naming the file and line, not a crash in a report.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import stat
from pathlib import Path

import attrs

from pkb_core import __version__
from pkb_core.contracts.job import Job
from pkb_core.contracts.modes import claimable
from pkb_core.contracts.record import Record, TimingOptions
from pkb_core.contracts.timing import Timing
from pkb_core.contracts.verdict import Verdict
from pkb_core.errors import PkbError, describe
from pkb_core.results.feedback import feedback_of
from pkb_core.contracts.timing import FASTER, SLOWER

RECORDS = "records.jsonl"


def job_record(job: Job, world_size: int, verdict: str, reason: str = "", *, timing: Timing | None = None,
               trials=0, seconds=None, machine=None, finding: dict | None = None, running: str | None = None,
               **details) -> Record:
    """The record of one job; ``details`` are :class:`Record`'s launcher fields
    (``barriers``, ``lockdown_gaps``, ``phase_seconds``). ``finding`` (the judge's detail
    of a wrong answer) and ``running`` (what a hung or dead job was doing) go into its
    feedback (:func:`pkb_core.results.feedback.feedback_of`)."""
    fields = dict(
        key=job.key, problem_id=job.problem_id, problem=job.problem, category=job.category, backend=job.backend,
        solution=job.solution_label, world_size=world_size, size=job.size, dtype=job.dtype, mode=job.mode,
        verdict=Verdict(verdict), reason=reason, trials=trials, compile=job.compile, reruns=job.reruns,
        datetime=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), pkb_version=__version__,
        seconds=None if seconds is None else round(seconds, 3), machine=machine or {}, **details,
    )
    if timing:
        fields.update(stats=timing, options=TimingOptions(warmup=job.warmup, iters=job.iters,
                                                          min_iters=job.min_iters, timing_modes=job.timing_modes))
        if timing.reference and timing.candidate:
            ref, cand = timing.reference.median, timing.candidate.median
            fields.update(reference_ms=ref, solution_ms=cand, speedup=timing.headline.speedup_value(),
                          timing_mode=timing.primary,
                          **_rigor(timing))
            if timing.sol:
                fields["sol"] = attrs.evolve(timing.sol, reference_fraction=timing.sol.floor_ms / ref,
                                             solution_fraction=timing.sol.floor_ms / cand if cand > 0 else None)
    record = Record(**fields)
    # The feedback reads the reason as pkb made it: it names the file a model was told it writes
    # (pkb_core.generate), whatever the record's label.
    feedback = feedback_of(record, finding=finding, running=running, trials_asked=job.trials,
                           solution=job.solution if verdict == "compile-error" else None)
    return attrs.evolve(record, reason=named_as_recorded(reason, job), feedback=feedback)


def named_as_recorded(reason: str, job: Job) -> str:
    """``reason`` naming the solution file as the record does (``job.solution_label``) where it
    names the file pkb read (``job.solution``): its path, and its bare name where a place
    ``name:line`` gives it. The reward service reads a copy of each submitted source
    (``DATA/sources/<digest>/<problem>.py``), which means nothing to the client that sent it;
    ``pkb run`` names the file as it was typed."""
    if not reason or not job.solution or not job.solution_label:
        return reason
    reason = reason.replace(job.solution, job.solution_label)
    read, shown = Path(job.solution).name, Path(job.solution_label).name
    if read != shown:  # not part of a longer name or path: "(1_allreduce.py:12)", "raised in 1_allreduce.py:7"
        reason = re.sub(rf"(?<![\w./-]){re.escape(read)}(?=:\d)", lambda _: shown, reason)
    return reason


def _rigor(timing: Timing) -> dict:
    """The headline mode's intervals, reading and clock, as record fields."""
    def interval(side):
        return None if side.ci_low is None or side.ci_high is None else (side.ci_low, side.ci_high)

    fields = {"reference_ci_ms": interval(timing.reference), "solution_ci_ms": interval(timing.candidate),
              "clock": timing.clock}
    if timing.speedup:
        low, high = timing.speedup.low, timing.speedup.high
        claimed = timing.speedup.difference in (FASTER, SLOWER) and low is not None \
            and claimable(timing.primary)
        fields.update(speedup_ci=None if low is None else (low, high), difference=timing.speedup.difference,
                      claimed_speedup=timing.speedup.value if claimed else None)
    return fields


def check_record(record: Record) -> str:
    """``record``'s line, after checking that it reads back as the same record (attrs does
    not check types when a record is made, and JSON has no NaN); :class:`PkbError`
    (one line) when it does not."""
    try:
        line = json.dumps(record.to_json(), allow_nan=False)
        if Record.from_json(json.loads(line)) != record:
            raise PkbError("it does not read back as the same record")
    except (ValueError, TypeError, RecursionError) as exc:
        raise PkbError(describe(exc)) from None
    return line


def make_run_dir(run_dir) -> Path:
    """``run_dir``, made where it is missing: 0700 whatever the umask (its parents as the umask
    says). A folder that exists keeps its mode (its owner chose it)."""
    run_dir = Path(run_dir)
    try:
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        run_dir.mkdir(mode=0o700)
        os.chmod(run_dir, 0o700)
    except FileExistsError:
        pass
    return run_dir


def append_record(run_dir: Path, record: Record) -> None:
    """Append one record (checked by :func:`check_record`); a single write of one line,
    so readers never see half of it. A new records file is 0600."""
    run_dir = make_run_dir(run_dir)
    line = check_record(record) + "\n"
    fd = os.open(run_dir / RECORDS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read_records(run_dir: Path) -> list[Record]:
    """Every record of a run directory, in the order written (a later duplicate wins, and takes
    its place: a key kept where it first appeared had put a job's newest record before another
    key's older one, and reports count each file's last record by this order)."""
    path = Path(run_dir) / RECORDS
    if not path.exists():
        return []
    by_key = {}
    for line, record in _numbered_records(path):
        by_key.pop(record.key, None)
        by_key[record.key] = record
    return list(by_key.values())


def _numbered_records(path: Path):
    """``(line, record)`` for each non-empty line of the records file ``path``, in order;
    :class:`PkbError` naming the file and line number at the first line that is no record."""
    text = path.read_text()
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        # Records are appended whole, one write each, newline last (append_record): a last
        # line without its newline was cut off, by a run killed or a disk full while writing it.
        cut = number == len(lines) and not text.endswith("\n")
        yield line, parse_record(line, f"{path}:{number}", cut=cut)


def parse_record(line: str, where: str, cut: bool = False) -> Record:
    """One line of a records file as a :class:`Record`; :class:`PkbError` (one line, naming
    ``where``) when it is not one.

    :param cut: the line is the file's last and has no newline: if it is no record, the
        error says so, and how to go on (delete it: its job then runs again)."""
    try:
        return Record.from_json(json.loads(line))
    except (ValueError, PkbError) as exc:
        if cut:
            path, _, number = where.rpartition(":")
            raise PkbError(f"{where}: the last line is cut off, not a whole record (a run stopped while "
                           f"writing it): delete line {number} of {path}, and a rerun runs its job again") from None
        raise PkbError(f"{where}: not a pkb record ({describe(exc)})") from None


def forget_records(run_dir: Path, keys) -> int:
    """Drop every record whose key is in ``keys`` (``pkb run --force``), and their saved
    outputs; returns how many jobs had records. The file is replaced in one rename."""
    import shutil

    path = Path(run_dir) / RECORDS
    if not path.exists():
        return 0
    keys = set(keys)
    kept, dropped = [], {}
    for line, record in _numbered_records(path):
        if record.key in keys:
            dropped[record.key] = record
        else:
            kept.append(line + "\n")
    if not dropped:
        return 0
    from pkb_core.contracts.job import job_slug

    for record in dropped.values():
        folder = Path(run_dir) / "outputs" / job_slug(record.problem, record.solution, record.world_size, record.size)
        if folder.is_dir():
            shutil.rmtree(folder, ignore_errors=True)
    _rewrite(path, kept)
    return len(dropped)


def records_to_end(run_dir: Path, keys) -> None:
    """Move the records of ``keys`` to the end of the run's file, in their order: a rerun that
    skips them (they are recorded) affirms them as the newest of their files. Without it a file
    that failed, passed when edited, and failed again as first written (its fail skipped, being
    recorded) was counted by its pass (a hostile review, 2026-12-02). One rename, as
    :func:`forget_records`."""
    path = Path(run_dir) / RECORDS
    keys = set(keys)
    if not keys or not path.exists():
        return
    lines, kept, moved = [], [], []
    for line, record in _numbered_records(path):
        lines.append(line + "\n")
        (moved if record.key in keys else kept).append(line + "\n")
    if moved and lines[-len(moved):] != moved:  # already last: nothing to move
        _rewrite(path, kept + moved)


def _rewrite(path: Path, lines: list[str]) -> None:
    """Replace the records file ``path`` by ``lines`` in one rename, keeping its mode."""
    tmp = path.with_name(f".{RECORDS}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, stat.S_IMODE(path.stat().st_mode))
    with os.fdopen(fd, "w") as out:  # the mode the file had (0600 as pkb made it)
        out.write("".join(lines))
    os.replace(tmp, path)


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
                    nccl=".".join(map(str, torch.cuda.nccl.version())),
                    # the hardware work queues a context had (machine.device.GPU_ENVIRONMENT)
                    device_connections=os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "8 (CUDA's default)"))
    return info
