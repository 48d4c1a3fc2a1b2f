"""A run given by its path, read for a report across runs (``pkb leaderboard``).

A RUN is any of:

* a run directory: its ``records.jsonl`` (``pkb run``, ``pkb bench``, ``pkb generate --rounds``);
* a records file: JSON lines, one :class:`pkb_core.contracts.record.Record` each (a
  ``records.jsonl`` kept under another name, as docs/benchmarks/data keeps them);
* what ``pkb run --json`` printed: one object ``{"run_dir", "results": [record, ...]}``.

As in :func:`pkb_core.results.records.read_records`, a later record of the same key
replaces an earlier one. A path that is missing, unreadable, not records or holds none is a
:class:`pkb_core.errors.PkbError` naming the path (exit 1, as ``pkb report`` and ``pkb compare``
for a run they cannot read).

What the run says about itself, for the row's label when no ``--label`` is given
(:func:`model_of`, :func:`name_of`):

* the model: ``loop.json`` of a ``pkb generate --rounds`` directory (``model``); the
  generation record ``<stem>.json`` beside a solution file that ``pkb generate`` wrote
  (``model.model``); or a PKB tree's folder name,
  ``solutions_<backend>_<precision>_<hardware>_<gpus>_<provider>_<model>``, in a solution's
  path or the run's (the name ``scripts/pkb-census`` gives its runs);
* its name: the one folder every solution file of the run lies in, else the run's own name
  (a directory's name, a file's stem).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from pkb_core.contracts.record import Record
from pkb_core.errors import PkbError
from pkb_core.results.records import RECORDS, parse_record

#: A PKB solution tree's folder: backend, precision, hardware, GPU count, provider, model.
PKB_TREE = re.compile(r"^solutions_([a-z0-9]+)_([a-z0-9]+)_([a-z0-9]+)_(\d+)_([^_]+)_(.+)$")


@dataclass
class Run:
    """One RUN argument, read."""

    path: Path
    records: list[Record]
    #: ``{"model": ..., "provider": ..., "from": where it was read}``, or None when the run does not say.
    model: dict | None = None

    @property
    def name(self) -> str:
        return name_of(self.path, self.records)


def read_run(path) -> Run:
    """The run at ``path`` (see the module docstring); :class:`PkbError` when it cannot be read."""
    path = Path(path)
    try:
        if path.is_dir():
            source = path / RECORDS
            if not source.is_file():
                raise PkbError(f"run {path}: no {RECORDS} in it (not a run directory)")
            records = _records_of(source.read_text(), source)
        elif path.exists():
            records = _records_of(path.read_text(), path)
        else:
            raise PkbError(f"run {path} does not exist")
    except OSError as exc:
        raise PkbError(f"run {path}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise PkbError(f"run {path}: not a records file (not UTF-8 text)") from None
    if not records:
        raise PkbError(f"run {path}: no records in it")
    return Run(path, records, model_of(path, records))


def _records_of(text: str, source: Path) -> list[Record]:
    """Records of a JSON-lines file or of ``pkb run --json``'s object, later keys winning."""
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None
    if isinstance(whole, dict) and isinstance(whole.get("results"), list):
        lines = [(json.dumps(item), f"{source}: results[{i}]") for i, item in enumerate(whole["results"])]
    else:
        lines = [(line, f"{source}:{n}") for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    by_key = {}
    for line, where in lines:
        try:
            record = parse_record(line, where)
        except PkbError as exc:
            raise PkbError(f"run {exc}") from None
        by_key.pop(record.key, None)  # a later duplicate takes its place (records.read_records)
        by_key[record.key] = record
    return list(by_key.values())


def model_of(path: Path, records) -> dict | None:
    """The model that wrote the run's solutions, where the run says (module docstring)."""
    loop = path / "loop.json" if path.is_dir() else None
    if loop is not None and loop.is_file():
        data = _json(loop)
        if isinstance(data, dict) and data.get("model"):
            return {"model": str(data["model"]), "provider": data.get("provider"), "from": str(loop)}
    for solution in sorted({Path(str(r.solution)) for r in records if str(r.solution).endswith(".py")}):
        record_file = solution.with_suffix(".json")
        data = _json(record_file) if record_file.is_file() else None
        model = data.get("model") if isinstance(data, dict) else None
        if isinstance(model, dict) and model.get("model"):
            return {"model": str(model["model"]), "provider": model.get("provider"), "from": str(record_file)}
    for part in [p for folder in _solution_folders(records) for p in folder.parts] + list(path.parts):
        match = PKB_TREE.match(part)
        if match:
            return {"model": match.group(6), "provider": match.group(5), "from": part}
    return None


def name_of(path: Path, records) -> str:
    """The one folder of the run's solution files, else the run's own name."""
    folders = _solution_folders(records)
    if len(folders) == 1 and folders[0].name not in ("", "."):
        return folders[0].name
    if path.is_dir() or not path.suffix:
        return path.name or str(path)
    return path.stem


def _solution_folders(records) -> list[Path]:
    """The folders the solution files lie in (labels without a folder, as a backend's samples have, left out)."""
    folders = {Path(str(r.solution)).parent for r in records if "/" in str(r.solution)}
    return sorted(folders)


def _json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
