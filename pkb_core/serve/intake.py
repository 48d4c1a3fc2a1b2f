"""A submission, checked and planned: the job a lane will run, or the one line that refuses it.

Everything a submission's request says is checked here, before it is queued, so
a bad request is a 4xx with one reason (:class:`Refused`) and never a job that
fails later: the problem and backend exist and the backend can run on this
node, the world size fits the node, options are in range. Its source is not a
request's: a source that is empty, not UTF-8 text or over the size limit
(:mod:`pkb_core.compile.source_defects`) is planned as a job that is answered
``compile-error`` at once (:attr:`Planned.compile_error`), stored like any job,
so a trainer's batch gets a record for every completion.
The job itself is planned by the same session as ``pkb run``'s
(:class:`pkb_core.launch.session.Session`: :meth:`~pkb_core.launch.session.Session.request`,
:meth:`~pkb_core.launch.session.Session.plan`), so a verdict through the service is
``pkb run``'s verdict on the same file. The lane a job needs is worked out here, once
(:attr:`Planned.lane_key`).
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import attrs

from pkb_core.compile.outcomes import code_fingerprint
from pkb_core.compile.source_defects import source_bytes, source_defect
from pkb_core.contracts.dtypes import PRECISIONS
from pkb_core.contracts.job import Job
from pkb_core.contracts.modes import CLAIM_RULES
from pkb_core.contracts.serve import Submission
from pkb_core.errors import PkbError
from pkb_core.launch.plan import TIMING_DEFAULTS
from pkb_core.serve.refusal import Refused

#: Ranges a submission's numbers must fall in (the service's own limits on one job).
LIMITS = {"trials": (1, 100), "warmup": (0, 10_000), "iters": (1, 100_000), "min_iters": (1, 100_000),
          "priority": (-1000, 1000)}
#: The longest client tag and label.
MAX_TAG = 200


@dataclass
class Planned:
    """What the intake made of a submission."""

    job: Job
    problem: str
    world_size: int
    #: The submission as the store keeps it: its source only where no file holds it (a source that is
    #: no solution file; one over the limit is not kept at all: its record says how large). A source
    #: written to its file is kept there alone, not a second time in the store.
    submission: Submission
    #: Equal for submissions whose content, problem and options are equal.
    dedup_key: str
    #: The lane a job runs in must have been started with these (backend, world size, timeout).
    lane_key: tuple
    #: Why the problem refuses the world size (the job is then answered ``unsupported`` at once).
    refusal: str | None = None
    #: Why the source is no solution file (the job is then answered ``compile-error`` at once).
    compile_error: str | None = None
    #: The source file written for it (None: its source is no solution file).
    source_path: str | None = None
    #: The bytes of source the job keeps, in its file or in the store (the per-client quota counts them).
    kept_bytes: int = 0


class Intake:
    """Checks and plans submissions for one node (see the module docstring).

    :param session: the service's session (plugin manager, configuration, device); each job is
        planned by its sibling of the job's backend and world size.
    :param devices: how many devices (GPUs, or CPU rank slots) the node gives to groups.
    """

    def __init__(self, session, *, devices: int, sources: Path, max_source_bytes: int,
                 job_timeout: float | None, max_timeout: float):
        self.session = session
        self.device = session.device
        self.devices = devices
        self.sources = Path(sources)
        self.max_source_bytes = max_source_bytes
        self.job_timeout = job_timeout
        self.max_timeout = max_timeout
        self.registry = session.registry
        self._infos: dict = {}

    def backend(self, name: str):
        """The backend's info, or :class:`Refused` naming the choices or what it lacks here."""
        from pkb_core.plugin.manager import get_backend_info

        if name not in self._infos:
            try:
                info = get_backend_info(self.session.pm, name)
            except PkbError as exc:
                raise Refused(str(exc), 404) from None
            missing = info.unavailable_reason(self.device)
            if missing:
                raise Refused(f"backend {name} cannot run on this node: {missing}", 422)
            self._infos[name] = info
        return self._infos[name]

    def plan(self, submission: Submission, job_id: str, owner: str | None = None) -> Planned:
        """The job for ``submission``; :class:`Refused` when it cannot be queued."""
        from pkb_core.launch.plan import keyed_by_content

        self._check(submission)
        info = self.backend(submission.backend)
        try:
            spec = self.registry.get(submission.problem)
        except PkbError as exc:
            raise Refused(str(exc), 404) from None
        world_size = submission.world_size or 2
        if world_size > self.devices:
            raise Refused(f"world size {world_size} but this node gives groups {self.devices} device(s) (the "
                          f"service's pkb serve --devices)")
        defect = source_defect(submission.source, self.max_source_bytes)
        # A source that is no solution file is not written: its job is planned without one and never runs.
        path = None if defect else self._write_source(submission.source, spec.key)
        session = self.session.sibling(backend=info.name, world_size=world_size)
        try:
            request = session.request(trials=submission.trials, size=submission.size, dtype=submission.dtype,
                                      measure_perf=submission.measure_perf, timing_modes=submission.timing_modes,
                                      warmup=submission.warmup, iters=submission.iters,
                                      min_iters=submission.min_iters, problems=str(spec.id),
                                      solution=str(path) if path else None)
            jobs, rejected = session.plan(request, [(spec, path, self.label(submission, spec.key, job_id, owner))])
        except PkbError as exc:
            raise Refused(str(exc)) from None
        job, refusal = (jobs[0], None) if jobs else rejected[0]
        if defect:
            job = keyed_by_content(job, source_bytes(submission.source))
        lane_key = self.lane_key(submission, world_size)
        # The judge's code is in it (pkb's, the backends', the problems'): a record made before a fix
        # to the judge or a problem was still served after it (a hostile review, 2026-12-02).
        dedup = {"source": hashlib.sha256(source_bytes(submission.source)).hexdigest(), "timeout": lane_key[2],
                 "options": session.backend_options, "world_size": world_size, "claim_rules": CLAIM_RULES,
                 "judge": code_fingerprint(),
                 **{k: v for k, v in job.to_json().items() if k not in ("key", "slug", "solution", "solution_label")}}
        size = len(source_bytes(submission.source))
        # Kept in the store only where no file holds it, and not at all when over the limit.
        kept_in_row = defect is not None and size <= self.max_source_bytes
        return Planned(job=job, problem=spec.key, world_size=world_size,
                       submission=submission if kept_in_row else attrs.evolve(submission, source=""),
                       refusal=None if defect else refusal, compile_error=defect,
                       dedup_key=hashlib.sha256(json.dumps(dedup, sort_keys=True).encode()).hexdigest(),
                       lane_key=lane_key, source_path=str(path) if path else None,
                       kept_bytes=size if (path or kept_in_row) else 0)

    @staticmethod
    def label(submission: Submission, problem_key: str, job_id: str, owner: str | None = None) -> str:
        """How the job's record names its solution: the submission's label, else ``<problem>-{job}.py``,
        with ``{job}`` replaced by the job id (so a run directory's records name every submission apart);
        under ``--tokens`` prefixed by the tenant (``alice:mine.py``), so that a label another tenant
        chose names another row in the service's run folders (one tenant's ``mine.py`` had merged
        with another's in `pkb report`, and an identical source under it shared its record's key:
        a hostile review, 2026-12-02)."""
        label = (submission.label or f"{problem_key}-{{job}}.py").replace("{job}", job_id)
        return f"{owner}:{label}" if owner is not None else label

    def lane_key(self, submission: Submission, world_size: int) -> tuple:
        """``(backend, world size, job timeout)``: what a lane must have been started with to run the job."""
        return submission.backend, world_size, float(min(submission.timeout or self.longest_timeout(),
                                                         self.longest_timeout()))

    def longest_timeout(self) -> float:
        """The most seconds a job may run here: the service's ``--timeout`` (by default the device's
        default), never above ``max_timeout``; a submission may ask for less, never more (a tenant's
        ``timeout`` of 3000 held a lane of a 20 s service for as long)."""
        from pkb_core.launch.plan import default_job_timeout

        return min(self.job_timeout or default_job_timeout(self.device), self.max_timeout)

    def _check(self, submission: Submission) -> None:
        from pkb_core.contracts.modes import MODES

        for name, (low, high) in LIMITS.items():
            value = getattr(submission, name)
            if value is not None and not low <= value <= high:
                raise Refused(f"{name} {value} is out of range ({low} to {high})")
        if submission.world_size is not None and submission.world_size < 1:
            raise Refused(f"world_size {submission.world_size} must be at least 1")
        sizes, dtypes = ("auto", *TIMING_DEFAULTS), ("auto", *PRECISIONS)
        if submission.size not in sizes:
            raise Refused(f"size {submission.size!r} is not one of {', '.join(sizes)}")
        if submission.dtype not in dtypes:
            raise Refused(f"dtype {submission.dtype!r} is not one of {', '.join(dtypes)}")
        unknown = [m for m in submission.timing_modes if m not in MODES]
        if unknown:
            raise Refused(f"timing mode {', '.join(unknown) or '(none)'} is not one of {', '.join(MODES)}")
        if submission.timeout is not None and not 0 < submission.timeout <= self.longest_timeout():
            raise Refused(f"timeout {submission.timeout} is out of range (above 0, at most "
                          f"{self.longest_timeout():g} s on this service)")
        for name in ("client", "label"):
            value = getattr(submission, name)
            if value is not None and (len(value) > MAX_TAG or not value.isprintable()):
                raise Refused(f"{name} must be printable and at most {MAX_TAG} characters")

    def _write_source(self, source: str, problem_key: str) -> Path:
        """The source as a file named after its problem, in a folder named by its content
        (written once; a file with the same content is the same file). Every folder on the
        way is the service's alone (0700): a job's candidate, which runs as a user of its
        own, reaches its own file and nothing beside it (the lockdown binds back only the
        path it needs, :func:`pkb_core.confine.sandbox.expose`)."""
        digest = hashlib.sha256(source.encode()).hexdigest()
        path = self.sources / digest[:2] / digest / f"{problem_key}.py"
        if not path.exists():
            for folder in (self.sources, path.parent.parent, path.parent):
                folder.mkdir(mode=0o700, exist_ok=True)
                os.chmod(folder, 0o700)
            tmp = path.with_suffix(f".{secrets.token_hex(4)}.tmp")  # two submissions of one text race here
            tmp.write_text(source)
            tmp.replace(path)
        return path
