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

This module is the one planning path of every way into a run, through its
session (:class:`pkb_core.launch.session.Session`): device defaults
(:func:`device_defaults`), pairing (:func:`pair_solutions`), jobs and their
world-size refusals (:func:`plan_jobs`), reruns (:func:`skip_recorded`) and the
launch's settings (:func:`launch_settings`, with the backend's ``pkb.toml``
options and the compile phase's settings).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from pkb_core.contracts.batch import LaunchSettings
from pkb_core.contracts.dtypes import PRECISIONS
from pkb_core.contracts.job import Job, job_slug
from pkb_core.contracts.modes import HEADLINE_MODE, MODES, headline_mode
from pkb_core.errors import BadOption, NothingSelected, PkbError
from pkb_core.problem.source import read_solution

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
    timing_modes: tuple = (HEADLINE_MODE,)
    profile: bool = False
    #: Timed calls per side and mode before the stopping rule may stop (None: ``iters``, a fixed count).
    min_iters: int | None = None


def named_problem(path) -> str | None:
    """The problem id a solution file's name gives (``<id>_<name>.py``), or None."""
    match = _SOLUTION_NAME.match(Path(path).name)
    return match.group(1) if match else None


def pair_solutions(request: RunRequest, registry, info, dropped: list | None = None) -> list[tuple]:
    """``[(spec, solution path or None, label)]`` in problem order.

    :param dropped: a list that receives the selected specs that have no solution file
        (in ``--solutions DIR`` or among the backend's samples), for a notice."""
    check_solution_paths(request.solution, request.solutions)
    if request.solution:
        path = usable_solution_path(Path(request.solution))
        if request.problems:
            specs = registry.select(request.problems)
        else:
            named = named_problem(path)
            if named is None:
                raise PkbError(f"cannot tell the problem of {path.name}: name it <id>_<name>.py or pass --problem")
            specs = [registry.get(named)]
        return [(spec, path, str(path)) for spec in specs]
    specs = registry.select(request.problems or "all")
    folder = Path(request.solutions) if request.solutions else info.samples
    if folder is None:
        return [(spec, None, "reference") for spec in specs]
    pairs = []
    for spec in specs:
        found = [path for path in sorted(folder.glob(f"{spec.id}_*.py"))
                 if path.stem == spec.key or path.stem.startswith(spec.key + "_")]
        pairs += [(spec, path, path.name if not request.solutions else str(path))
                  for path in map(usable_solution_path, found)]
        if not found and dropped is not None:
            dropped.append(spec)
    if not pairs:
        where = f"in {folder}" if request.solutions else f"among backend {info.name}'s samples ({folder})"
        raise NothingSelected(f"no solution files for the selected problems {where}{_naming_hint(folder, specs)}")
    return pairs


def usable_solution_path(path: Path) -> Path:
    """``path``, refused in one line where its file name holds a character that is not printable
    (a newline in a name printed a line of its own in the progress and the table, one that read as
    another job's verdict; the service refuses such labels too) or where it is no file to read (a
    dangling link or a link loop in a folder of solutions ended in a traceback): hostile reviews,
    2026-12-01."""
    if not path.name.isprintable():
        raise PkbError(f"solution file name {path.name!r} holds a character that is not printable "
                       "(a newline, a control code): rename the file")
    if not path.is_file():
        raise PkbError(f"solution file {path} is not a file to read (a dangling link, a link loop or a folder)")
    return path


def _naming_hint(folder: Path, specs) -> str:
    """What a folder that matched nothing holds, and the names pkb looks for: a file named a little
    off (``allreduce_mine.py``, ``1_allredce.py``) is otherwise skipped without a word."""
    others = sorted(path.name for path in folder.glob("*.py")) if folder.is_dir() else []
    if not others:
        return ""
    shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
    wanted = ", ".join(f"{spec.key}.py" for spec in specs[:3]) + (", ..." if len(specs) > 3 else "")
    selected = {str(spec.id) for spec in specs}
    if all(named_problem(Path(name)) not in (None, *selected) for name in others):
        # Every file is named for another problem: the folder has none for these (none misnamed).
        return (f": it holds files for other problems only ({shown}); a solution for these would be named "
                f"{wanted} or <id>_<name>_<anything>.py")
    return (f": it holds {shown}, but a solution is named after its problem, <id>_<name>.py or "
            f"<id>_<name>_<anything>.py ({wanted}; `pkb problems` lists them)")


def check_solution_paths(solution: str | None, solutions: str | None) -> None:
    """Refuse, in one line, ``--solution FILE`` that is not a file, ``--solutions DIR``
    that is not a folder, or both at once. Cheap (no torch): ``pkb run`` calls it
    before anything heavy, so a typo is refused at once."""
    if solution and solutions:
        raise PkbError("give --solution or --solutions, not both")
    if solution:
        path = Path(solution)
        if path.is_dir():
            raise PkbError(f"solution file {path} is a directory (give --solutions DIR for a folder of solutions)")
        if not path.is_file():
            raise PkbError(f"solution file {path} does not exist")
    if solutions and Path(solutions).is_file():
        raise PkbError(f"solutions directory {solutions} is a file (give --solution FILE for one solution)")
    if solutions and not Path(solutions).is_dir():
        raise PkbError(f"solutions directory {solutions} does not exist")


#: Per size, when not given: warm-up calls, then the least and the most timed calls per side and
#: mode (``--min-iters``, ``--iters``); the stopping rule picks in between (pkb_core/conduct/stopping.py).
TIMING_DEFAULTS = {"tiny": (3, 10, 20), "default": (500, 100, 1000), "large": (50, 50, 200)}



def make_request(*, backend: str, device: str, nproc: int, trials: int = 5, size: str = "auto",
                 dtype: str = "auto", mode: str = "eval", measure_perf: bool = False,
                 timing_modes: tuple = (), warmup: int | None = None, iters: int | None = None,
                 min_iters: int | None = None, save_outputs: bool = False, profile: bool = False,
                 problems: str | None = None, solution: str | None = None,
                 solutions: str | None = None) -> RunRequest:
    """A :class:`RunRequest` with ``pkb run``'s defaults applied (``auto`` size and dtype
    for ``device``, the timing counts of :data:`TIMING_DEFAULTS` by size, no ``timing_modes``: the
    device's headline, :func:`pkb_core.contracts.modes.headline_mode`): the one place
    ``pkb run``, :func:`pkb_core.evaluate` and the reward service turn options into a request.

    Every value is checked here, whichever way in it came (the command line's own types aside:
    :func:`pkb_core.evaluate` passed ``trials=0``, which checked nothing and passed, and a
    repeated timing mode, which spoilt the second's timed calls).

    :raises BadOption: a value that makes no sense (one line, naming the option as ``pkb run`` does).
    """
    size, dtype = device_defaults(device, size, dtype)
    if size not in TIMING_DEFAULTS:
        raise BadOption(f"unknown size {size!r} (choose from auto, {', '.join(TIMING_DEFAULTS)})")
    if dtype not in PRECISIONS:
        raise BadOption(f"unknown dtype {dtype!r} (choose from auto, {', '.join(PRECISIONS)})")
    _check_counts(nproc=(nproc, 1), trials=(trials, 1), warmup=(warmup, 0), iters=(iters, 1), min_iters=(min_iters, 1))
    for name, flag in (("measure_perf", measure_perf), ("save_outputs", save_outputs), ("profile", profile)):
        if not isinstance(flag, bool):
            raise BadOption(f"{name} {flag!r} is not true or false")
    timing_modes = checked_timing_modes(timing_modes)
    if profile and not measure_perf:
        raise BadOption("profile needs measure-perf (it profiles timed calls)")
    default_warmup, default_min, default_iters = TIMING_DEFAULTS[size]
    iters = default_iters if iters is None else iters
    if min_iters is not None and min_iters > iters:
        raise BadOption(f"--min-iters {min_iters} is more than --iters {iters} (the most timed calls)")
    return RunRequest(problems=problems, backend=backend, solution=solution, solutions=solutions, nproc=nproc,
                      trials=trials, dtype=dtype, size=size, mode=mode, measure_perf=measure_perf,
                      warmup=default_warmup if warmup is None else warmup, iters=iters,
                      min_iters=min(default_min, iters) if min_iters is None else min_iters,
                      save_outputs=save_outputs, timing_modes=tuple(timing_modes) or (headline_mode(device),),
                      profile=profile)


def _check_counts(**counts) -> None:
    """Each ``name=(value, least)``: a whole number at least ``least`` (None: the default)."""
    for name, (value, least) in counts.items():
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise BadOption(f"--{name.replace('_', '-')} {value!r} is not a whole number")
        if value < least:
            raise BadOption(f"--{name.replace('_', '-')} {value} is less than {least}")


def checked_timing_modes(modes) -> tuple:
    """``modes`` as a tuple, each a known timing mode, none twice (an empty tuple: the device's
    headline); :class:`BadOption` otherwise."""
    if not isinstance(modes, (str, list, tuple)):
        raise BadOption(f"timing modes {modes!r} are not names of modes (choose from {', '.join(MODES)})")
    modes = (modes,) if isinstance(modes, str) else tuple(modes)
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise BadOption(f"unknown timing mode {', '.join(map(repr, unknown))} (choose from {', '.join(MODES)})")
    repeated = sorted({m for m in modes if modes.count(m) > 1})
    if repeated:
        raise BadOption(f"timing mode {', '.join(repeated)} given twice")
    return modes


def make_job(request: RunRequest, spec, solution, label, params=None) -> Job:
    """The job the launcher and the workers share.

    ``params`` overrides the size preset's parameters (sweeps); the job's
    ``size`` then names the override, e.g. ``"sweep:4194304"``.
    """
    params = dict(spec.params(request.size) if params is None else params)
    digest = _content_digest(read_solution(solution)) if solution else "ref"
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


def keyed_by_content(job: Job, content: bytes) -> Job:
    """``job``, planned without a solution file, keyed as the job of a file holding ``content``:
    for a submitted source that is no solution file (empty, not UTF-8 text), answered
    ``compile-error`` without ever being written (:mod:`pkb_core.compile.source_defects`)."""
    import attrs

    parts = job.key.split("|")
    parts[-6] = _content_digest(content)  # the key's digest: five fixed parts follow it (see make_job)
    return attrs.evolve(job, key="|".join(parts))


def _content_digest(content: bytes) -> str:
    return hashlib.sha1(content).hexdigest()[:10]


def device_defaults(device: str, size: str = "auto", dtype: str = "auto") -> tuple[str, str]:
    """``(size, dtype)`` with ``auto`` resolved for ``device``: the PKB size and bf16 on a
    GPU, ``tiny`` and fp32 in CPU mode (gloo and Triton's interpreter are slow)."""
    if size == "auto":
        size = "default" if device == "cuda" else "tiny"
    if dtype == "auto":
        dtype = "bf16" if device == "cuda" else "fp32"
    return size, dtype


def default_job_timeout(device: str) -> float:
    """Seconds a job may run when ``--timeout`` is not given."""
    return 300.0 if device == "cuda" else 120.0


def plan_jobs(request: RunRequest, pairs, expand=None) -> tuple[list[Job], list[tuple[Job, str]]]:
    """``(jobs, rejected)``: a job per pair (per size, with ``expand``), and the jobs
    whose problem refuses the request's world size with the reason
    (``"world size W: ..."``, the ``unsupported`` record's reason).

    :param expand: ``expand(spec, problem) -> [(size label, params)]`` for jobs at sizes
        other than the request's preset (``pkb bench``'s message sizes); None: one job at
        ``request.size``.
    """
    jobs, rejected = [], []
    for spec, path, label in pairs:
        problem = spec.load()
        sizes = expand(spec, problem) if expand else [(request.size, None)]
        for size, params in sizes:
            job = make_job(_sized(request, size), spec, path, label, params=params)
            why = problem.world_size_error(request.nproc, job.params)
            if why:
                rejected.append((job, f"world size {request.nproc}: {why}"))
            else:
                jobs.append(job)
    return jobs, rejected


def refuse_a_world_nothing_runs_at(nproc: int, jobs, rejected) -> None:
    """:class:`~pkb_core.errors.BadOption` where every job is refused at a world size below two:
    pkb's contract runs no problem at one rank (nothing is communicated), so ``--nproc 1`` made
    every job ``unsupported`` and the run exit 0, checking nothing (a new user, 2026-12-02).
    Above one rank a problem's own rule refusing every job stays a run of ``unsupported``
    records, as pytest's skips."""
    from pkb_core.errors import BadOption

    if nproc < 2 and rejected and not jobs:
        raise BadOption(f"--nproc {nproc}: no selected problem runs at world size {nproc} ({rejected[0][1]}); "
                        "give --nproc 2 or more")


def _sized(request: RunRequest, size: str) -> RunRequest:
    if size == request.size:
        return request
    from dataclasses import replace

    return replace(request, size=size)


def skip_recorded(run_dir, keys, force: bool) -> dict:
    """The records of ``keys`` already in ``run_dir``, by key: a rerun skips those jobs.
    With ``force`` they are forgotten first (the jobs run again, their records replaced)
    and none is returned; else they are moved to the end of the file
    (:func:`~pkb_core.results.records.records_to_end`)."""
    from pkb_core.results.records import forget_records, read_records, records_to_end

    keys = set(keys)
    if force:
        forget_records(run_dir, keys)
        return {}
    found = {r.key: r for r in read_records(run_dir) if r.key in keys}
    records_to_end(run_dir, found)  # what this command ran, skipped or not, is each file's newest
    return found


def launch_settings(info, *, device: str, nproc: int, run_dir, options: dict | None = None,
                    job_timeout: float | None = None,
                    calibration=None, nodes=None, build_timeout: float = 600.0,
                    build_workers: int | None = None, memory_mib: int | None = None,
                    max_processes: int | None = None, log_cap_mib: int | None = None,
                    hidden=()) -> LaunchSettings:
    """The settings of a launch of ``info``'s backend: its ``options`` (``pkb.toml``'s
    ``[backends.<name>]`` table, handed to its init hook), its preloads and kind, the
    compile phase's settings, each job's limits (``--memory-limit``, ``--max-processes``,
    ``--log-cap``: None for this machine's defaults) and the folders no job may see
    (``hidden``: a service's data directory)."""
    return LaunchSettings(nproc=nproc, device=device, backend=info.name, run_dir=run_dir,
                          job_timeout=job_timeout or default_job_timeout(device), options=dict(options or {}),
                          calibration=calibration, nodes=nodes, preload=tuple(info.preload()),
                          custom_kernels=info.custom_kernels, environment=tuple(info.environment),
                          build_timeout=build_timeout,
                          build_workers=build_workers, memory_mib=memory_mib, max_processes=max_processes,
                          log_cap_mib=log_cap_mib, hidden=tuple(str(h) for h in hidden))
