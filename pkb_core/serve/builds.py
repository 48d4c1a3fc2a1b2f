"""The service's compile pool on this node: CPU threads, each build's builder forked warm.

A build pool takes one planned job at a time (:meth:`LocalBuilds.submit`) and later
calls ``done(built_job, record, error)``: the job with what its compile phase did
(``compile``), or the ``compile-error``/``unsupported`` record of a solution that did
not build, or a line saying why the build could not run at all. It never holds a
group. :class:`LocalBuilds` is this node's; on a Ray cluster the placement gives
:class:`pkb_core.ray.builds.RayBuilds`, whose builds are Ray CPU tasks on any node
(:meth:`pkb_core.serve.placement.LocalDevices.build_pool` and its Ray twin choose).
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pkb_core.launch.warm_builders import WarmBuilders

#: A build pool's ``error`` for a build stopped by :meth:`LocalBuilds.cancel` (its job was cancelled).
CANCELLED = "cancelled while it built"


def build_one(job, settings, warm: WarmBuilders, cancelled: threading.Event | None = None):
    """``(built job or None, record or None, error or None)`` of ``job``'s compile phase,
    its builder forked from ``warm``'s zygote for the backend (the same builder, request
    and outcome cache as ``pkb run``'s, so the same verdict); ``cancelled`` set kills its
    builder (the job was cancelled while it built)."""
    from pkb_core.compile.phase import BuildCancelled
    from pkb_core.errors import describe
    from pkb_core.launch.jobs import compile_phase

    try:
        built, records = compile_phase([job], settings, starter=warm.starter(settings.backend, settings.preload,
                                                                                settings.environment),
                                       cancelled=cancelled)
    except BuildCancelled:
        return None, None, CANCELLED
    except Exception as exc:  # noqa: BLE001 - a build the pool could not run is that job's error, not the pool's end
        return None, None, f"the build could not run: {describe(exc)}"
    return (built[0] if built else None), (records[0] if records else None), None


class LocalBuilds:
    """Builds on this node, ``workers`` at once (see the module docstring)."""

    def __init__(self, workers: int, log_path: Path):
        self.workers = workers
        self._threads = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pkb-build")
        self._warm = WarmBuilders(Path(log_path))
        #: Each build's cancel event, by job id, while it is submitted.
        self._cancels: dict[str, threading.Event] = {}

    def submit(self, job, settings, done, job_id: str) -> None:
        cancelled = self._cancels[job_id] = threading.Event()

        def build():
            try:
                outcome = build_one(job, settings, self._warm, cancelled)
            finally:
                self._cancels.pop(job_id, None)
            done(*outcome)

        self._threads.submit(build)

    def cancel(self, job_id: str) -> None:
        event = self._cancels.get(job_id)
        if event is not None:
            event.set()

    def stop(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)
        self._warm.stop()
