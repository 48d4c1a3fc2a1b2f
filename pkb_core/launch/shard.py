"""What one engine job runs on its node: a shard of ``pkb run`` jobs (see :mod:`pkb_core.launch.fanout`).

The engine (submitit, on SLURM or locally) unpickles a :class:`Shard` and calls
it with the shard's job dicts and the run's :class:`~pkb_core.launch.launcher.LaunchSettings`.
It checks that the backend can run on this node, measures the node's ceilings
when the jobs are timed and the submitting machine could not (it is not where
they run), and hands the jobs to :func:`~pkb_core.launch.launcher.run_jobs`, which skips
recorded keys, starts torchrun with ``settings.nproc`` ranks, watches them and
writes one record per job into the shared run directory.

A :class:`Shard` is ``submitit.helpers.Checkpointable``: when SLURM preempts
it or its time runs out, submitit requeues the same shard, and ``run_jobs``
picks up where the records end.
"""
from __future__ import annotations

import dataclasses
import platform

import submitit

from pkb_core.errors import PkbError


class Shard(submitit.helpers.Checkpointable):
    """Callable run by the engine: ``Shard()(jobs, settings) -> {"host", "records"}``."""

    def __call__(self, jobs: list[dict], settings) -> dict:
        from pkb_core.launch.launcher import run_jobs
        from pkb_core.plugin.manager import get_backend_info, get_plugin_manager

        info = get_backend_info(get_plugin_manager(), settings.backend)
        missing = info.unavailable_reason(settings.device)
        if missing:
            raise PkbError(f"on {platform.node()}: {missing}")
        # Library paths are the node's, not the submitting host's.
        settings = dataclasses.replace(settings, preload=tuple(info.preload()))
        if settings.calibration is None and any(job["measure_perf"] for job in jobs):
            from pkb_core.machine.calibrate import calibrate

            settings = dataclasses.replace(settings, calibration=calibrate(settings.device))
        records = run_jobs(jobs, settings)
        return {"host": platform.node(), "records": len(records)}
