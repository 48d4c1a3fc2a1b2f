"""Turning ``pkb run`` options into jobs: problems x solutions x one backend.

Which solutions run:

* ``--solution FILE``: that file, for the selected problems (by default the
  problem its name starts with, ``<id>_<name>...py``);
* ``--solutions DIR``: every ``<id>_<name>*.py`` in DIR for the selected
  problems (several samples per problem allowed);
* neither: the backend's own samples when it ships some, else the problem's
  reference as the candidate (a self-check).

Problems whose world-size rule rejects ``--nproc`` get an ``unsupported``
record without any launch.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from pkb_core.contracts.job import Job
from pkb_core.errors import NothingSelected, PkbError

_SOLUTION_NAME = re.compile(r"^(\d+)_")


@dataclass
class RunRequest:
    """The options of one ``pkb run``, after config and defaults are applied."""

    problems: str | None
    backend: str
    solution: str | None
    solutions: str | None
    nproc: int
    trials: int
    dtype: str
    size: str
    mode: str
    measure_perf: bool
    warmup: int
    iters: int
    save_outputs: bool
    timing_modes: tuple = ("latency",)
    profile: bool = False
    #: Timed calls per side and mode before the stopping rule may stop (None: ``iters``, a fixed count).
    min_iters: int | None = None


def pair_solutions(request: RunRequest, registry, info, dropped: list | None = None) -> list[tuple]:
    """``[(spec, solution path or None, label)]`` in problem order.

    :param dropped: a list that receives the selected specs that have no solution file
        (in ``--solutions DIR`` or among the backend's samples), for a notice."""
    if request.solution and request.solutions:
        raise PkbError("give --solution or --solutions, not both")
    if request.solution:
        path = Path(request.solution)
        if path.is_dir():
            raise PkbError(f"solution file {path} is a directory (give --solutions DIR for a folder of solutions)")
        if not path.is_file():
            raise PkbError(f"solution file {path} does not exist")
        if request.problems:
            specs = registry.select(request.problems)
        else:
            match = _SOLUTION_NAME.match(path.name)
            if not match:
                raise PkbError(f"cannot tell the problem of {path.name}: name it <id>_<name>.py or pass --problem")
            specs = [registry.get(match.group(1))]
        return [(spec, path, str(path)) for spec in specs]
    specs = registry.select(request.problems or "all")
    folder = Path(request.solutions) if request.solutions else info.samples
    if request.solutions and not folder.is_dir():
        raise PkbError(f"solutions directory {folder} does not exist")
    if folder is None:
        return [(spec, None, "reference") for spec in specs]
    pairs = []
    for spec in specs:
        found = [path for path in sorted(folder.glob(f"{spec.id}_*.py"))
                 if path.stem == spec.key or path.stem.startswith(spec.key + "_")]
        pairs += [(spec, path, path.name if not request.solutions else str(path)) for path in found]
        if not found and dropped is not None:
            dropped.append(spec)
    if not pairs:
        where = f"in {folder}" if request.solutions else f"among backend {info.name}'s samples ({folder})"
        raise NothingSelected(f"no solution files for the selected problems {where}")
    return pairs


#: Per size, when not given: warm-up calls, then the least and the most timed calls per side and
#: mode (``--min-iters``, ``--iters``); the stopping rule picks in between (pkb_core/judge/stopping.py).
TIMING_DEFAULTS = {"tiny": (3, 10, 20), "default": (500, 100, 1000), "large": (50, 50, 200)}

#: Bytes per element of the working dtypes a job may name.
ITEMSIZE = {"fp32": 4, "bf16": 2, "fp16": 2, "fp64": 8}


def job_slug(problem_key: str, solution_label: str, world_size: int, size: str) -> str:
    """The folder name of a job's saved outputs and profiles (also found from a record)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{problem_key}-{Path(solution_label).stem}-W{world_size}-{size}")


def make_job(request: RunRequest, spec, solution, label, params=None) -> Job:
    """The job the launcher and the workers share.

    ``params`` overrides the size preset's parameters (sweeps); the job's
    ``size`` then names the override, e.g. ``"sweep:4194304"``.
    """
    params = dict(spec.params(request.size) if params is None else params)
    digest = hashlib.sha1(Path(solution).read_bytes()).hexdigest()[:10] if solution else "ref"
    key = "|".join([spec.key, request.backend, label, digest, f"W{request.nproc}", request.size,
                    request.dtype, request.mode, ("perf:" + "+".join(request.timing_modes)) if request.measure_perf else "check"])
    return Job(
        key=key, slug=job_slug(spec.key, label, request.nproc, request.size), problem_id=spec.id, problem=spec.key,
        category=spec.category, problem_path=str(spec.path), backend=request.backend,
        solution=str(Path(solution).resolve()) if solution else None, solution_label=label,
        size=request.size, dtype=request.dtype, trials=request.trials, mode=request.mode,
        measure_perf=request.measure_perf, warmup=request.warmup, iters=request.iters,
        min_iters=min(request.min_iters or request.iters, request.iters),
        save_outputs=request.save_outputs, timing_modes=tuple(request.timing_modes),
        profile=request.profile, params=params,
    )
