"""The job: one solution of one problem at one size, dtype and world size, as the launcher,
the judge's ranks, the candidate's ranks and the builders all see it.

Made by :func:`pkb_core.launch.plan.make_job` from ``pkb run``'s options; crosses
to the worker processes as :meth:`Job.to_json` inside a command, and to another node
inside a :class:`pkb_core.contracts.batch.Batch`. Unknown fields are refused (a
job from another pkb version is an error, not a guess).
"""
from __future__ import annotations

import re
from pathlib import Path

import attrs

from pkb_core.contracts.serial import Contract, optional


@attrs.frozen(kw_only=True)
class Job(Contract):
    """One job. Every field is set by the plan; ``compile`` is added by the compile phase, ``reruns``
    by the reward service when it runs the job again."""

    #: What makes the job the same job again (a rerun into the same run directory skips it).
    key: str
    #: The folder name of its saved outputs and profiles.
    slug: str
    problem_id: int
    #: ``<id>_<name>``.
    problem: str
    category: str
    #: The problem file, which the judge and the candidate load.
    problem_path: str
    backend: str
    #: The solution file's absolute path, or None when the reference is its own candidate.
    solution: str | None
    #: How records and reports name the solution.
    solution_label: str
    #: The size preset, or ``sweep:<bytes>`` for a sweep point.
    size: str
    dtype: str
    #: Checked trials, each on fresh inputs.
    trials: int
    #: ``eval`` (check, then time when asked) or ``dryrun`` (save what came out).
    mode: str
    measure_perf: bool
    #: Untimed calls per side before the first timed round.
    warmup: int
    #: The most and the least timed calls per side and mode (the stopping rule picks in between).
    iters: int
    min_iters: int
    save_outputs: bool
    #: Timing modes in order; the first is the headline.
    timing_modes: tuple[str, ...]
    profile: bool
    #: The problem's parameters at this size.
    params: dict
    #: What the compile phase did for this job's solution.
    compile: Built | None = None
    #: Why it runs again: one line for each earlier run of it that was lost with its group (the
    #: reward service's lane that died, a service stopped while it ran); its record keeps them.
    reruns: tuple[str, ...] | None = optional()


@attrs.frozen(kw_only=True)
class Built(Contract):
    """What the compile phase did for a job's solution (kept in its record as ``compile``)."""

    seconds: float
    #: Whether the outcome came from the build cache (an earlier, identical build).
    cached: bool


#: The longest folder name a slug is (file systems take 255 bytes a name).
SLUG_CHARS = 200


def job_slug(problem_key: str, solution_label: str, world_size: int, size: str) -> str:
    """The folder name of a job's saved outputs and profiles (:attr:`Job.slug`; also found from a record).
    A name longer than :data:`SLUG_CHARS` keeps its start and ends in a digest of the whole: a
    solution file's legal 253-byte name had made the judge's save fail ("File name too long"), and
    the job read as the judge's error (a hostile review, 2026-12-02)."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{problem_key}-{Path(solution_label).stem}-W{world_size}-{size}")
    if len(slug) <= SLUG_CHARS:
        return slug
    import hashlib

    return f"{slug[:SLUG_CHARS - 17]}-{hashlib.sha256(slug.encode()).hexdigest()[:16]}"
