"""Copying a ParallelKernelBench solutions folder into pkb's file naming.

PKB (togethercomputer/ParallelKernelBench) writes one file per problem and
backend, ``<id>_<name>_<backend>.py`` with backend ``cuda``, ``triton`` or
``parallelkittens``, into folders named
``solutions_<backend>_<precision>_<hardware>_<provider>_<model>/``; several
such folders often sit side by side. pkb pairs ``<id>_<name>.py`` files with
its problems (``pkb run --solutions DIR``), whose ids and names are today's
PKB's (87 problems).

Early PKB trees use an older, 88-problem numbering: there is no 33, their
34-88 are today's 33-87, and four problems had other names (early
``11_gemm_allgather_AT``, ``12_gemm_allgather``, ``14_gemm_allscatter``,
``18_rms_norm`` are today's ``11_allgather_gemm_AT``, ``12_allgather_gemm``,
``14_gemm_allgather``, ``18_tp_rms_norm``). Early ``47_fsdp_adamw_sharded``
has no counterpart today (today's 46 is ``gemv_decode``).

Each file is placed by its name first: today's id and name, or an early id
and name (the names say which numbering; one name, ``gemm_allgather``, means
12 in the early numbering and 14 today, so there the ``solution`` signature's
argument names decide). A file whose name settles nothing (no name, a name
neither numbering knows) is placed by its signature among the problems its id
can mean (today's ``<id>``, early ``<id>`` = today's ``<id-1>``, the problem of
that name), and where several problems share the signature, by the numbering
the rest of its folder uses. What cannot be placed is reported with the
reason, one line each. Files are copied unchanged.

The output keeps the input's folders (``DST/<folder>/<id>_<name>.py``); a
folder that mixes backends gets one sub-folder per backend. Nothing here
imports torch.
"""
from __future__ import annotations

import ast
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from pkb_core.errors import PkbError

#: PKB's solution backends (the file name's last part).
PKB_BACKENDS = ("parallelkittens", "triton", "cuda")
#: Problems in today's PKB numbering (pkb's ids 1-87).
PKB_PROBLEM_COUNT = 87
#: Today's id -> its name in the early 88-problem numbering, where it differs.
EARLY_NAMES = {11: "gemm_allgather_AT", 12: "gemm_allgather", 14: "gemm_allscatter", 18: "rms_norm"}
#: Early problems with no counterpart today: name -> why.
RETIRED = {"fsdp_adamw_sharded": "no such problem today: PKB dropped fsdp_adamw_sharded (early 47; "
                                 "today's 46 is gemv_decode)"}
#: Folders that hold PKB's references, not solutions.
REFERENCE_FOLDERS = ("reference",)

_FILE = re.compile(r"^(\d+)(?:_(.*))?$")
MANIFEST = "pkb-import.json"


@dataclass(frozen=True)
class Problem:
    """One of pkb's problems as the import sees it: id, name, reference arguments."""

    id: int
    name: str
    params: tuple | None = None

    @property
    def key(self) -> str:
        return f"{self.id}_{self.name}"


@dataclass
class Placed:
    """A file that maps to a problem."""

    source: Path  # relative to SRC
    problem: Problem
    numbering: str  # "today", "early" or "either"
    how: str  # how it was placed (one phrase)
    backend: str | None
    dest: Path | None = None  # relative to DST
    rank: int = 0  # lower wins when two files map to one destination


@dataclass
class Unplaced:
    """A file that maps to no problem, with the reason (one line)."""

    source: Path
    reason: str


@dataclass
class Folder:
    """One input folder holding solution files."""

    path: Path  # relative to SRC
    numbering: str  # "today", "early", "mixed" or "either"
    placed: list = field(default_factory=list)
    unplaced: list = field(default_factory=list)


@dataclass
class ImportPlan:
    src: Path
    folders: list = field(default_factory=list)
    skipped: list = field(default_factory=list)  # Unplaced: not solution files (reason given)

    @property
    def placed(self) -> list:
        return [p for f in self.folders for p in f.placed]

    @property
    def unplaced(self) -> list:
        return [u for f in self.folders for u in f.unplaced]


# ---------------------------------------------------------------------------
# reading names and signatures
# ---------------------------------------------------------------------------

def problems_from_specs(specs) -> dict:
    """``{id: Problem}`` from pkb's problem specs (today's PKB range only),
    with each reference's argument names read with :mod:`ast`."""
    problems = {}
    for spec in specs:
        if 1 <= spec.id <= PKB_PROBLEM_COUNT:
            problems[spec.id] = Problem(spec.id, spec.name, function_params(Path(spec.path), "reference"))
    return problems


def function_params(path: Path, function: str) -> tuple | None:
    """The positional argument names of the top-level ``def function`` of a
    file (``*name`` for a star argument), or None (missing, or unparsable)."""
    try:
        tree = ast.parse(Path(path).read_text(errors="replace"))
    except (SyntaxError, ValueError, OSError):
        return None
    found = None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function:
            found = node  # the last definition wins, as at import
    if found is None:
        return None
    args = found.args
    names = [a.arg for a in [*args.posonlyargs, *args.args]]
    if args.vararg:
        names.append("*" + args.vararg.arg)
    return tuple(names)


def parse_file_name(stem: str) -> tuple | None:
    """``(id, name, backend)`` of a PKB or pkb solution file stem
    (``12_gemm_allgather_cuda`` -> ``(12, "gemm_allgather", "cuda")``;
    name ``""`` when there is none, backend ``None`` when not given); ``None``
    when the stem does not start with ``<id>_``."""
    match = _FILE.match(stem)
    if not match:
        return None
    number, rest = int(match.group(1)), match.group(2) or ""
    backend = None
    for candidate in PKB_BACKENDS:
        if rest == candidate or rest.endswith("_" + candidate):
            backend = candidate
            rest = rest[: -len(candidate)].rstrip("_")
            break
    return number, rest, backend


def early_index(problems: dict) -> dict:
    """``{(early id, early name): today's id}`` for the 88-problem numbering."""
    index = {}
    for pid, problem in problems.items():
        if pid <= 32:
            index[(pid, EARLY_NAMES.get(pid, problem.name))] = pid
        else:
            index[(pid + 1, problem.name)] = pid
    return index


def _signature(params) -> str:
    return f"solution({', '.join(params)})" if params is not None else "no top-level solution()"


# ---------------------------------------------------------------------------
# placing one file
# ---------------------------------------------------------------------------

class _Resolver:
    def __init__(self, problems: dict):
        self.problems = problems
        self.by_name = {p.name: p for p in problems.values()}
        self.early = early_index(problems)

    def evidence(self, number: int, name: str) -> str | None:
        """Which numbering the id and name show (``None``: the same in both, or
        unknown). Ids from 33 on count for the numbering; below, only the four
        renamed names differ, and a tree may mix those (``names:...``)."""
        today = self.problems.get(number)
        is_today = bool(today and today.name == name)
        early = self.early.get((number, name))
        if is_today and early == number:
            return None
        weak = "names:" if number <= 32 else ""
        if is_today:
            return weak + "today"
        if early is not None or (name in RETIRED):
            return weak + "early"
        return None

    def place(self, source: Path, number: int, name: str, backend, params, hint: str) -> Placed | Unplaced:
        problems = self.problems
        today = problems.get(number)
        early = self.early.get((number, name))
        label = f"{number}_{name}" if name else str(number)
        if name in RETIRED:
            return Unplaced(source, f"{label}: {RETIRED[name]}")
        if today and today.name == name:
            numbering = "either" if early == number else "today"
            return Placed(source, today, numbering, "id and name", backend, rank=0)
        if early is not None:
            target = problems[early]
            other = self.by_name.get(name)
            if other is not None and other.id != target.id and params is not None:
                # gemm_allgather: early 12, today's 14. The signature decides.
                if params == other.params and params != target.params:
                    return Placed(source, other, "today",
                                  f"name {name!r} is today's {other.key}, and so is {_signature(params)}", backend,
                                  rank=2)
            how = (f"early name {label} (renamed)" if number <= 32 else
                   f"early numbering: {label} is today's {target.key}")
            return Placed(source, target, "early", how, backend, rank=1)
        return self._by_signature(source, number, name, label, backend, params, hint)

    def _by_signature(self, source, number, name, label, backend, params, hint) -> Placed | Unplaced:
        problems = self.problems
        options = {}
        if number in problems and not (number == 33 and hint == "early"):
            options[number] = "today's numbering"
        if number - 1 in problems and number >= 34:
            options[number - 1] = "the early numbering"
        if name in self.by_name:
            options.setdefault(self.by_name[name].id, f"its name {name!r}")
        known = "" if not name or name in self.by_name else f"name {name!r} is no problem's; "
        if not options:
            why = ("no problem 33 in the early numbering" if number == 33 else
                   f"no problem {number} in today's numbering (1-{PKB_PROBLEM_COUNT}) or the early one (1-88)")
            return Unplaced(source, f"{label}: {known}{why}")
        if params is None:
            choices = " or ".join(problems[i].key for i in sorted(options))
            return Unplaced(source, f"{label}: {known}could be {choices}, and it has no top-level solution() "
                                    f"to tell by its arguments")
        matching = sorted(i for i in options if problems[i].params == params)
        if len(matching) > 1:
            preferred = {"early": number - 1, "today": number}.get(hint)
            if preferred in matching:
                matching = [preferred]
        if len(matching) == 1:
            target = problems[matching[0]]
            numbering = "early" if options[matching[0]] == "the early numbering" else "today"
            why = f"{known}{_signature(params)} is {target.key}'s signature ({options[matching[0]]})"
            return Placed(source, target, numbering, f"by signature: {why}", backend, rank=3)
        choices = ", ".join(f"{problems[i].key} ({options[i]})" for i in sorted(options))
        if matching:
            return Unplaced(source, f"{label}: {known}{_signature(params)} fits "
                                    f"{' and '.join(problems[i].key for i in matching)} alike, and its folder "
                                    f"does not settle the numbering")
        return Unplaced(source, f"{label}: {known}{_signature(params)} matches none of {choices}")


# ---------------------------------------------------------------------------
# the plan and the copy
# ---------------------------------------------------------------------------

def plan_import(src, problems: dict, *, exclude=()) -> ImportPlan:
    """Find PKB solution files under ``src`` and decide where each goes."""
    src = Path(src)
    if not src.exists():
        raise PkbError(f"{src} does not exist")
    if not src.is_dir():
        raise PkbError(f"{src} is not a directory (give the folder of PKB solution files)")
    excluded = {Path(e).resolve() for e in exclude}
    resolver = _Resolver(problems)
    plan = ImportPlan(src=src)
    for root, dirs, files in os.walk(src):
        root_path = Path(root)
        rel_root = root_path.relative_to(src)
        kept = []
        for d in sorted(dirs):
            if d.startswith(".") or d == "__pycache__" or (root_path / d).resolve() in excluded:
                continue
            if d in REFERENCE_FOLDERS:
                plan.skipped.append(Unplaced(rel_root / d, "PKB's reference implementations, not solutions"))
                continue
            kept.append(d)
        dirs[:] = kept
        entries = []
        for file in sorted(files):
            if not file.endswith(".py"):
                continue
            parsed = parse_file_name(file[:-3])
            if parsed is None:
                plan.skipped.append(Unplaced(rel_root / file, "not named <id>_<name>_<backend>.py"))
                continue
            try:
                kind = os.lstat(root_path / file).st_mode
            except OSError as exc:
                plan.skipped.append(Unplaced(rel_root / file, f"cannot be read ({exc.strerror})"))
                continue
            if not stat.S_ISREG(kind):
                # A link is not followed: a tree's link to a file only root may read (/etc/shadow)
                # was copied into a world-readable solution, one to /dev/zero read without end
                # (a hostile review, 2026-12-02).
                what = "a symbolic link" if stat.S_ISLNK(kind) else "not a regular file"
                plan.skipped.append(Unplaced(rel_root / file, f"{what}: not read or copied"))
                continue
            entries.append((rel_root / file, *parsed, function_params(root_path / file, "solution")))
        if entries:
            plan.folders.append(_plan_folder(rel_root, entries, resolver))
    return plan


def _plan_folder(rel_root: Path, entries: list, resolver: _Resolver) -> Folder:
    votes = {"today": 0, "early": 0, "names:today": 0, "names:early": 0}
    for _, number, name, _, _ in entries:
        shown = resolver.evidence(number, name)
        if shown:
            votes[shown] += 1
    if not (votes["today"] or votes["early"]):  # ids 1-32 only: the renamed names are the clue
        votes["today"], votes["early"] = votes["names:today"], votes["names:early"]
    if votes["today"] and votes["early"]:
        numbering = "mixed"
    else:
        numbering = "today" if votes["today"] else "early" if votes["early"] else "either"
    hint = "early" if votes["early"] > votes["today"] else "today" if votes["today"] > votes["early"] else None
    folder = Folder(rel_root, numbering)
    for source, number, name, backend, params in entries:
        outcome = resolver.place(source, number, name, backend, params, hint)
        (folder.placed if isinstance(outcome, Placed) else folder.unplaced).append(outcome)
    split = len({p.backend for p in folder.placed if p.backend}) > 1
    taken: dict = {}
    for placed in sorted(folder.placed, key=lambda p: (p.rank, str(p.source))):
        sub = rel_root / placed.backend if split and placed.backend else rel_root
        dest = sub / f"{placed.problem.key}.py"
        if dest in taken:
            folder.unplaced.append(Unplaced(placed.source, f"{placed.problem.key} again: {taken[dest].source.name} "
                                                           f"already maps to {dest.as_posix()}"))
            continue
        placed.dest = dest
        taken[dest] = placed
    folder.placed = [p for p in folder.placed if p.dest is not None]
    folder.placed.sort(key=lambda p: (str(p.dest.parent), p.problem.id))
    return folder


def _copy_regular(source: Path, target: Path) -> None:
    """Copy the regular file ``source`` (not through a link: one put there since it was planned is
    refused) into ``target``, which is made 0644."""
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise PkbError(f"{source}: cannot be read ({exc.strerror}; a link is not followed)") from None
    with os.fdopen(fd, "rb") as reader:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise PkbError(f"{source} is not a regular file: not copied")
        data = reader.read()
    target.write_bytes(data)


def write_import(plan: ImportPlan, dst, *, force: bool = False) -> list:
    """Copy the placed files into ``dst`` (refusing to overwrite unless
    ``force``) and write ``dst/pkb-import.json``; return the written paths."""
    dst = Path(dst)
    if dst.exists() and not dst.is_dir():
        raise PkbError(f"{dst} exists and is not a directory")
    if dst.resolve() == plan.src.resolve():
        raise PkbError("--out must not be the source folder")
    targets = [dst / p.dest for p in plan.placed]
    existing = [t for t in targets if t.exists()]
    if existing and not force:
        more = f" and {len(existing) - 1} more" if len(existing) > 1 else ""
        raise PkbError(f"{existing[0]}{more} already exist{'s' if len(existing) == 1 else ''} "
                       f"(pass --force to overwrite)")
    written = []
    for placed, target in zip(plan.placed, targets):
        target.parent.mkdir(parents=True, exist_ok=True)
        _copy_regular(plan.src / placed.source, target)
        written.append(target)
    manifest = {
        "source": str(plan.src.resolve()),
        "files": [{"source": p.source.as_posix(), "dest": p.dest.as_posix(), "problem": p.problem.key,
                   "numbering": p.numbering, "how": p.how, "backend": p.backend} for p in plan.placed],
        "not_mapped": [{"source": u.source.as_posix(), "reason": u.reason} for u in plan.unplaced],
    }
    dst.mkdir(parents=True, exist_ok=True)
    (dst / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return written
