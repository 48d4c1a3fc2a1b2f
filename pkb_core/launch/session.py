"""One run, whichever way it came in: planned, recorded, reported, calibrated and run the same way.

A way into a run — ``pkb run``, ``pkb bench``, ``pkb calibrate``'s noise floor,
:func:`pkb_core.evaluate`, ``pkb generate --rounds`` (its local evaluator), the
reward service's intake — chooses its jobs and its observers. A :class:`Session`,
made from the plugin manager, the configuration (:mod:`pkb_core.config`), the
device, the backend and the world size, does the rest:

* plans: a request with ``pkb run``'s defaults (:meth:`Session.request`), the jobs
  and the world sizes their problems refuse (:meth:`Session.plan`), through the
  one planning path (:mod:`pkb_core.launch.plan`);
* records and reports every refusal (:meth:`Session.refuse`), every build outcome
  and every job through one :class:`~pkb_core.plugin.reporter.Reporter`, which
  holds the run's observers (registered while the session is open: ``with
  session:``);
* calibrates once (:meth:`Session.calibration`), shared by every session made
  from it (:meth:`Session.sibling`: another backend or world size of the same run,
  as ``pkb bench``'s baselines or the service's lanes);
* makes the launch settings (:meth:`Session.settings`: the backend's
  ``[backends.<name>]`` options from the configuration it carries);
* runs (:meth:`Session.run`): locally (:func:`pkb_core.launch.jobs.run_jobs`),
  through an executor (``pkb run --executor``), or — the service — through its
  lanes, whose records the service hands to :meth:`Session.report`, as
  pytest-xdist's controller re-fires each worker's reports.

So ``pkb_report_job`` fires for a job however it came in.
"""
from __future__ import annotations

import functools
from pathlib import Path

from pkb_core.config import Config
from pkb_core.contracts.verdict import Verdict
from pkb_core.errors import PkbError
from pkb_core.launch.plan import launch_settings, make_request, plan_jobs
from pkb_core.plugin.reporter import Reporter


class Session:
    """One run of one backend at one world size (see the module docstring).

    :param device: ``cuda`` or ``cpu``, resolved (:meth:`here` resolves ``auto``).
    :param backend: the backend's name (None: a session that only makes siblings, the service's).
    :param world_size: ranks of each job (all nodes together).
    :param observers: the run's own plugins (``pkb_report_*``), registered while it is open.
    :param runs_here: whether its jobs run on this node (False: SLURM shards elsewhere,
        so this node's GPUs and toolchain say nothing about the backend).
    :param keep_records: as :class:`~pkb_core.plugin.reporter.Reporter`'s ``keep``.
    """

    def __init__(self, pm, config: Config | None = None, *, device: str, backend: str | None = None,
                 world_size: int | None = None, observers=(), runs_here: bool = True,
                 keep_records: bool = True, _shared: dict | None = None):
        self.pm = pm
        self.config = config if config is not None else Config()
        self.device = device
        self.backend = backend
        self.world_size = world_size
        self.runs_here = runs_here
        # What every sibling shares: the reporter, the calibration, the problem registry, the siblings.
        self._shared = _shared if _shared is not None else {
            "reporter": Reporter(pm, observers, keep=keep_records), "siblings": {}}

    @classmethod
    def here(cls, pm, config: Config | None = None, *, device: str = "auto", backend: str,
             world_size: int | None = None, observers=(), what: str = "world size") -> Session:
        """A session whose jobs run on this node: ``device`` resolved (``auto``: a GPU if one is
        visible), the backend able to run there, ``world_size`` (default: every GPU; 2 in CPU
        mode) no more than the node's GPUs (``what``: how the refusal names it, ``--nproc``).

        :raises PkbError: an unknown backend, one that cannot run here, too few GPUs."""
        from pkb_core.machine.device import detect_device, device_count, require_device

        device = require_device(detect_device(device))
        session = cls(pm, config, device=device, backend=backend, observers=observers,
                      world_size=world_size or max(device_count(device), 1))
        session.info  # noqa: B018 - an unknown or unavailable backend is refused now
        if device == "cuda" and session.world_size > device_count(device):
            raise PkbError(f"{what} {session.world_size} but only {device_count(device)} GPU(s) here")
        return session

    def sibling(self, *, backend: str | None = None, world_size: int | None = None) -> Session:
        """The session of ``backend`` at ``world_size`` (default: this one's) in the same run:
        the same reporter, calibration and configuration."""
        key = (backend or self.backend, world_size or self.world_size)
        siblings = self._shared["siblings"]
        if key not in siblings:
            siblings[key] = Session(self.pm, self.config, device=self.device, backend=key[0], world_size=key[1],
                                    runs_here=self.runs_here, _shared=self._shared)
        return siblings[key]

    # -- what it carries ------------------------------------------------------------------
    @property
    def reporter(self) -> Reporter:
        """The run's reporter: every record and build outcome of every sibling goes through it."""
        return self._shared["reporter"]

    @functools.cached_property
    def info(self):
        """The backend's :class:`~pkb_core.plugin.backend.BackendInfo` (checked against the
        device where the jobs run here)."""
        from pkb_core.plugin.manager import get_backend_info

        if self.backend is None:
            raise PkbError("this session names no backend (make one with .sibling(backend=...))")
        return get_backend_info(self.pm, self.backend, self.device if self.runs_here else None)

    @property
    def registry(self):
        """The problems the plugins register (refused in one line when there are none)."""
        if "registry" not in self._shared:
            from pkb_core.problem.registry import build_registry, require_problems

            self._shared["registry"] = require_problems(build_registry(self.pm))
        return self._shared["registry"]

    @property
    def backend_options(self) -> dict:
        """``[backends.<name>]`` of the configuration: what the backend's init hook gets."""
        return self.config.backend_options(self.info.name)

    def observe(self, *observers) -> None:
        """Add the run's own observers (chosen once its jobs are known: a progress display counts
        them); registered when the session opens."""
        self.reporter.observers.extend(observers)

    def __enter__(self) -> Session:
        self.reporter.open()
        return self

    def __exit__(self, *exc) -> None:
        self.reporter.close()

    # -- planning ---------------------------------------------------------------------------
    def request(self, **options):
        """A :class:`~pkb_core.launch.plan.RunRequest` of this backend, device and world size, with
        ``pkb run``'s defaults (:func:`~pkb_core.launch.plan.make_request`'s keywords)."""
        return make_request(backend=self.info.name, device=self.device, nproc=self.world_size, **options)

    def plan(self, request, pairs, expand=None) -> tuple[list, list]:
        """``(jobs, refused)`` of ``pairs`` (:func:`~pkb_core.launch.plan.plan_jobs`)."""
        return plan_jobs(request, pairs, expand=expand)

    # -- recording and reporting ------------------------------------------------------------
    def report(self, record, run_dir=None, *, job_id: str | None = None):
        """Write ``record`` to ``run_dir`` (None: written already, or kept elsewhere: the
        service's store is an observer), then hand it to every observer; the record."""
        if run_dir is not None:
            from pkb_core.results.records import append_record

            append_record(run_dir, record)
        self.reporter.job(record, job_id=job_id)
        return record

    def refuse(self, refused, run_dir, recorded=()) -> list:
        """An ``unsupported`` record, written and reported, for each refused job (``refused``:
        :meth:`plan`'s second list) whose key is not in ``recorded``; the records."""
        return [self.record(job, Verdict.UNSUPPORTED, why, run_dir) for job, why in refused if job.key not in recorded]

    def record(self, job, verdict: Verdict, reason: str, run_dir=None, *, job_id: str | None = None):
        """A job that ends without a launch (a source that is no solution file, a group that
        never started): its record, written and reported."""
        from pkb_core.results.records import job_record

        return self.report(job_record(job, self.world_size, verdict, reason), run_dir, job_id=job_id)

    # -- calibrating, settings, running -----------------------------------------------------
    def calibration(self):
        """This machine's ceilings (:func:`pkb_core.machine.calibrate.calibrate`), measured or
        read from the cache once per run, whichever sibling asks first."""
        if "calibration" not in self._shared:
            from pkb_core.machine.calibrate import calibrate

            self._shared["calibration"] = calibrate(self.device)
        return self._shared["calibration"]

    def settings(self, run_dir, *, calibrated: bool = False, nproc: int | None = None, **options):
        """The launch settings of this backend (:func:`~pkb_core.launch.plan.launch_settings`'s
        keywords in ``options``); ``calibrated``: with the calibration (the physics floor);
        ``nproc``: ranks on each node (default: the world size, one node)."""
        return launch_settings(self.info, options=self.backend_options, device=self.device,
                               nproc=nproc or self.world_size, run_dir=Path(run_dir),
                               calibration=self.calibration() if calibrated else None, **options)

    def run(self, jobs, settings, executor=None) -> list:
        """Build and run ``jobs`` under ``settings``: on this node, or through ``executor``
        (:class:`pkb_core.launch.fanout.ExecutorOptions`); the records they got, each
        written and reported as it came."""
        if executor is not None:
            return executor.run(jobs, settings, self.reporter)
        from pkb_core.launch.jobs import run_jobs

        return run_jobs(jobs, settings, self.reporter, skip_recorded=False)
