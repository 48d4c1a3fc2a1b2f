"""``pkb serve --ray``'s compile pool: each build a Ray CPU task, on whichever node has a free CPU.

The task carries the job and its solution's text (the service's file is not on
that node), writes the text to a folder of its own (``pkb-ray-build-*``, 0700,
removed when the task ends; Ray ends a worker's child processes with it, its
warden among them, so the folders of a worker killed outright are swept by the
next task on the node: :mod:`pkb_core.process.temp_folders`), runs the compile
phase there
(:func:`pkb_core.serve.builds.build_one`: the same builder and outcome cache as
``pkb run``; within one Ray worker process builders are forked from a warm zygote
kept for the worker's life; the node's Ray temporary folder, which holds its raylet's and
object store's sockets, is hidden from the builder like the service's data, wherever
``ray start --temp-dir`` put it) and returns the job as built, or the record of a
solution that did not build (written by :class:`RayBuilds` to the service's run directory,
as the compile phase writes it on one node). What a backend compiled stays in that node's cache:
a group on another node builds again before its job (an identical build, so its
verdict is this one's; :class:`pkb_core.ray.actor.GroupActor`). The service keeps
at most ``workers`` tasks in flight; Ray places them.
"""
from __future__ import annotations

import threading
from pathlib import Path

import attrs
import ray

from pkb_core.contracts.batch import LaunchSettings
from pkb_core.contracts.job import Job
from pkb_core.contracts.record import Record

#: The names of a build task's folder, and of the folder where a Ray worker of an earlier pkb kept
#: its zygotes' log (swept: that log has no name now).
TASK_PREFIX, WORKER_PREFIX = "pkb-ray-build-", "pkb-ray-builders-"
#: This Ray worker process's builder zygotes (kept between the tasks it runs).
_WARM = None


def _warm():
    """The worker's builder zygotes, their log a file with no name (no job's to read, and nothing
    left on the node when the worker ends, killed or not)."""
    global _WARM
    if _WARM is None:
        import atexit

        from pkb_core.launch.warm_builders import WarmBuilders

        _WARM = WarmBuilders(None)
        atexit.register(_WARM.stop)
    return _WARM


@ray.remote(num_cpus=1)
def build_task(job_json: dict, source: str, settings_json: dict) -> tuple:
    """One job's compile phase on this node: ``(built job JSON or None, record JSON or None, error or None)``."""
    from pkb_core.process import temp_folders
    from pkb_core.serve.builds import build_one

    job = Job.from_json(job_json)
    # Ray ends a worker's children with it (its warden too): what a killed worker left is swept here.
    temp_folders.sweep(TASK_PREFIX)
    temp_folders.sweep(WORKER_PREFIX)
    folder = Path(temp_folders.make(TASK_PREFIX))
    try:
        path = folder / Path(job.solution).name
        path.write_text(source)
        settings = LaunchSettings.from_json(settings_json)
        settings = attrs.evolve(settings, run_dir=folder / "run", hidden=(*settings.hidden, *_ray_folders()))
        built, record, error = build_one(attrs.evolve(job, solution=str(path)), settings, _warm())
    finally:  # the source, the run folder and the build's log go with the task
        temp_folders.remove(str(folder))
    if built is not None:
        built = attrs.evolve(built, solution=job.solution)  # the service's own path again
    return (built.to_json() if built else None), (record.to_json() if record else None), error


def _ray_folders() -> tuple[str, ...]:
    """This node's Ray temporary folder (its sessions: sockets, logs, spilled objects) where it lies
    outside the machine's temporary folders; nothing where it lies inside them (a builder's
    private ``/tmp`` covers it, as it does the default ``/tmp/ray``) or where this Ray does not say."""
    import os

    from pkb_core.confine.views import in_shared_temp

    try:
        folder = os.path.realpath(str(ray._private.worker.global_worker.node.get_temp_dir_path()))
    except Exception:  # noqa: BLE001 - an internal of Ray's, not a contract: the views' cover is what is left
        return ()
    return () if in_shared_temp(folder) else (folder,)


class RayBuilds:
    """Builds as Ray tasks, ``workers`` in flight (see the module docstring)."""

    def __init__(self, workers: int):
        self.workers = workers
        self._gate = threading.BoundedSemaphore(workers)
        #: Each build's task while it runs, by job id; the ids submitted and not yet done; those of
        #: them cancelled (a cancel of an id that is not live is nothing to keep).
        self._tasks: dict[str, ray.ObjectRef] = {}
        self._live: set[str] = set()
        self._cancelled: set[str] = set()
        self._lock = threading.Lock()

    def submit(self, job: Job, settings: LaunchSettings, done, job_id: str) -> None:
        source = Path(job.solution).read_text() if job.solution else ""
        with self._lock:
            self._live.add(job_id)
        threading.Thread(target=self._run, args=(job, settings, source, done, job_id), daemon=True,
                         name="pkb-ray-build").start()

    def cancel(self, job_id: str) -> None:
        """Stop the job's task (Ray kills its worker, and the builder with it), or keep it from starting."""
        with self._lock:
            if job_id not in self._live:
                return
            task = self._tasks.get(job_id)
            self._cancelled.add(job_id)
        if task is not None:
            ray.cancel(task, force=True)

    def _run(self, job, settings, source, done, job_id) -> None:
        try:
            self._build(job, settings, source, done, job_id)
        finally:
            with self._lock:
                self._live.discard(job_id)
                self._cancelled.discard(job_id)

    def _build(self, job, settings, source, done, job_id) -> None:
        from pkb_core.serve.builds import CANCELLED

        with self._gate:
            with self._lock:
                if job_id in self._cancelled:
                    done(None, None, CANCELLED)
                    return
                task = self._tasks[job_id] = build_task.remote(job.to_json(), source, settings.to_json())
            try:
                built, record, error = ray.get(task)
            except Exception as exc:  # noqa: BLE001 - a task Ray lost (its node left), or cancelled: this job's error
                with self._lock:
                    cancelled = job_id in self._cancelled
                done(None, None, CANCELLED if cancelled else
                     f"the build's Ray task failed: {type(exc).__name__}: {str(exc)[:300]}")
                return
            finally:
                with self._lock:
                    self._tasks.pop(job_id, None)
        record = Record.from_json(record) if record else None
        if record is not None:  # the task wrote it in its own folder, gone with it: the service's copy
            from pkb_core.serve.service import write_copy

            write_copy(settings.run_dir, record)
        done(Job.from_json(built) if built else None, record, error)

    def stop(self) -> None:
        """Nothing to stop: tasks in flight finish or die with their nodes; their results are not waited for."""
