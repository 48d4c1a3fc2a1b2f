"""The files of a refinement loop (``pkb generate --rounds N``), and reading them back to resume.

Under the output directory, per problem ``<id>_<name>/`` and per round *k* (from 1):

``r<k>.prompt.md``
    the user message of the round as sent (round 1: the problem's prompt; later: the
    revision message with pkb's feedback on round *k-1*).
``r<k>.reply.md``
    the model's raw reply.
``r<k>.json``
    the generation record (model, settings, the provider's usage, elapsed time,
    ``tokens`` counted or estimated, ``solution`` or ``error``).
``r<k>.py``
    the file of the reply (absent when it held none).
``r<k>.record.json``
    pkb's record of checking ``r<k>.py`` (its ``feedback`` is what round *k+1* is told).

Beside the folders: ``<id>_<name>.py``, the best file so far (``pkb run --solutions OUT``
checks the loop's outcome), ``records.jsonl``, every round's record with ``round`` in its
extra fields (``pkb report OUT`` shows pass and fast_p after each round), and ``loop.json``,
the last invocation's settings and each problem's state (records.jsonl and loop.json cover the
problems of the last invocation).

A round is complete when its record exists, or when its reply held no code. An
interrupted loop resumes from these files: rounds already asked are never asked again, a
file not yet checked is checked, then the loop goes on at the next round.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import attrs

from pkb_core.contracts.record import Record

ROUND = re.compile(r"^r(\d+)\.json$")


@dataclass
class Round:
    """One round of one problem, as its files say."""

    k: int
    generation: dict
    solution: Path | None
    record: Record | None = None

    @property
    def complete(self) -> bool:
        return self.record is not None or self.solution is None

    @property
    def tokens(self) -> int:
        return int(self.generation.get("tokens") or 0)


@dataclass
class ProblemLoop:
    """A problem's folder and its rounds, oldest first."""

    key: str
    folder: Path
    rounds: list[Round] = field(default_factory=list)
    stopped: str | None = None

    def path(self, k: int, suffix: str) -> Path:
        return self.folder / f"r{k}{suffix}"

    def last_file(self) -> Round | None:
        """The latest round that has a file."""
        return next((r for r in reversed(self.rounds) if r.solution is not None), None)


def load_problem(out: Path, key: str) -> ProblemLoop:
    """The rounds ``out/<key>/`` holds (none for a new problem)."""
    loop = ProblemLoop(key, Path(out) / key)
    if not loop.folder.is_dir():
        return loop
    numbers = sorted(int(m.group(1)) for m in (ROUND.match(p.name) for p in loop.folder.iterdir()) if m)
    for k in numbers:
        generation = json.loads(loop.path(k, ".json").read_text())
        solution = loop.path(k, ".py") if generation.get("solution") and loop.path(k, ".py").is_file() else None
        record_path = loop.path(k, ".record.json")
        record = Record.from_json(json.loads(record_path.read_text())) if record_path.is_file() else None
        loop.rounds.append(Round(k, generation, solution, record))
    return loop


def write_generation(loop: ProblemLoop, k: int, user: str, reply: str, generation: dict, code: str | None) -> Round:
    """Write a round's prompt, reply, file and generation record; the record last, so a
    round is never read back as asked without its reply."""
    loop.folder.mkdir(parents=True, exist_ok=True)
    loop.path(k, ".prompt.md").write_text(user + "\n")
    loop.path(k, ".reply.md").write_text(reply)
    solution = None
    if code is not None:
        solution = loop.path(k, ".py")
        solution.write_text(code)
    else:
        loop.path(k, ".py").unlink(missing_ok=True)
    loop.path(k, ".json").write_text(json.dumps(generation, indent=2) + "\n")
    round_ = Round(k, generation, solution)
    loop.rounds.append(round_)
    return round_


def loop_record(record: Record, key: str, k: int) -> Record:
    """``record`` as the loop keeps it: labelled ``<key>_r<k>.py``, keyed by problem and
    round (two rounds never share a key, even when the service answered both from one job),
    ``round`` in its extra fields."""
    return attrs.evolve(record, key=f"{key}/r{k}:{record.key}", solution=f"{key}_r{k}.py",
                        extra={**record.extra, "round": k})


def write_record(loop: ProblemLoop, round_: Round, record: Record) -> None:
    round_.record = record
    loop.path(round_.k, ".record.json").write_text(json.dumps(record.to_json(), indent=2) + "\n")


def write_records(out: Path, loops: list[ProblemLoop]) -> None:
    """``out/records.jsonl``: every checked round of every problem, rewritten whole (one
    rename), so a resumed loop never records a round twice."""
    from pkb_core.results.records import RECORDS, check_record

    lines = [check_record(r.record) + "\n" for loop in loops for r in loop.rounds if r.record is not None]
    tmp = Path(out) / f".{RECORDS}.tmp"
    tmp.write_text("".join(lines))
    tmp.replace(Path(out) / RECORDS)
