"""What one engine job runs on its node: a shard of ``pkb run`` jobs (see :mod:`pkb_core.launch.fanout`).

The engine (submitit, on SLURM or locally) unpickles a :class:`Shard` and calls
it with a :class:`~pkb_core.contracts.batch.Batch` in its JSON form: the shard's
jobs and the run's launch settings.
It checks that the backend can run on this node, measures the node's ceilings
when the jobs are timed and the submitting machine could not (it is not where
they run), and hands the jobs to :func:`~pkb_core.launch.jobs.run_jobs`, which skips
recorded keys, starts ``settings.nproc`` ranks per launch, watches them and
writes one record per job into the shared run directory.

A :class:`Shard` is ``submitit.helpers.Checkpointable``: when SLURM preempts
it or its time runs out, submitit requeues the same shard, and ``run_jobs``
picks up where the records end.
"""
from __future__ import annotations

import platform

import attrs
import submitit

from pkb_core.contracts.batch import Batch
from pkb_core.errors import PkbError


class Shard(submitit.helpers.Checkpointable):
    """Callable run by the engine: ``Shard()(batch.to_json()) -> {"host", "records"}``."""

    def __call__(self, batch: dict) -> dict:
        from pkb_core.launch.jobs import run_jobs
        from pkb_core.plugin.manager import get_backend_info, get_plugin_manager

        batch = Batch.from_json(batch)
        jobs, settings = list(batch.jobs), batch.settings
        info = get_backend_info(get_plugin_manager(), settings.backend)
        missing = info.unavailable_reason(settings.device)
        if missing:
            raise PkbError(f"on {platform.node()}: {missing}")
        # Library paths are the node's, not the submitting host's.
        settings = attrs.evolve(settings, preload=tuple(info.preload()))
        if settings.calibration is None and any(job.measure_perf for job in jobs):
            from pkb_core.machine.calibrate import calibrate

            settings = attrs.evolve(settings, calibration=calibrate(settings.device))
        records = run_jobs(jobs, settings)
        return {"host": platform.node(), "records": len(records)}
