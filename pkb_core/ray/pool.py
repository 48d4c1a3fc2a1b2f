"""pkb's evaluators from inside a Ray program: no HTTP, the same records.

A trainer that runs on Ray (verl, OpenRLHF, NeMo-RL) creates an
:class:`EvaluatorPool` in its driver, or one shared actor of it with
:meth:`EvaluatorPool.remote`, and its reward function calls it directly::

    pool = EvaluatorPool.remote(device="cuda")             # an actor, named "pkb-evaluator"
    record = ray.get(pool.evaluate.remote(1, source, backend="triton"))
    records = ray.get(pool.evaluate_many.remote([(1, a, {}), (7, b, {"world_size": 4})]))
    reward_worker.remote(pool)                             # the handle carries the pool's token

The pool is the reward service (:class:`pkb_core.serve.service.Service`) in the
process that holds it, with its groups placed on the cluster as Ray actors
(:class:`pkb_core.ray.placement.RayPlacement`): the same queue, priorities,
deduplication, compile pool and SQLite records as ``pkb serve --ray``, and the
same :class:`~pkb_core.contracts.record.Record` per job as the HTTP client
returns.

The actor answers only its token (:mod:`pkb_core.ray.pool_actor`): the handle
:meth:`EvaluatorPool.remote` returns holds it and adds it to every call, and pickles
with it, so a task or actor handed the handle uses the pool. Another process of the
job finds it with ``EvaluatorPool.find(token)``; one that finds the actor by name
without the token cannot submit, read, list or cancel a job.
"""
from __future__ import annotations

import time
from pathlib import Path

from pkb_core.contracts.record import Record
from pkb_core.contracts.serve import CancelRequest, Cancelled, JobView, Submission
from pkb_core.ray.placement import RayPlacement, connect
from pkb_core.ray.pool_actor import NAME

#: Seconds between looks at a job's state while waiting for it.
POLL_S = 0.05


class EvaluatorPool:
    """See the module docstring.

    :param address: the Ray cluster (None: the one this process is in, else ``auto``).
    :param data_dir: the queue's SQLite file, the sources, the groups' runs and logs (default ``./pkb-serve``).
    :param device: ``auto``, ``cuda`` or ``cpu``.
    :param devices: the most devices its groups hold at once (default: the cluster's, when it starts).
    :param timeout: seconds a job may run (default ``pkb run``'s for the device).
    :param place_timeout: seconds a job waits for a world size no node can hold before it is an ``error``.
    """

    def __init__(self, address: str | None = None, *, data_dir=None, device: str = "auto",
                 devices: int | None = None, timeout: float | None = None, build_jobs: int | None = None,
                 max_queued: int = 100_000, place_timeout: float = 600.0, config_dir=None):
        from pkb_core.config import load_config
        from pkb_core.machine.device import detect_device
        from pkb_core.plugin.manager import get_plugin_manager
        from pkb_core.serve.service import Service, ServiceConfig

        connect(address)
        device = detect_device(device)
        placement = RayPlacement(address, device=device)
        config = ServiceConfig(data_dir=Path(data_dir or "pkb-serve"), device=device,
                               devices=devices or max(1, placement.capacity()), max_queued=max_queued,
                               job_timeout=timeout, build_workers=build_jobs, place_timeout=place_timeout)
        self.service = Service(config, get_plugin_manager(), placement, pkb_config=load_config(config_dir))
        self.service.start()

    @classmethod
    def remote(cls, *args, name: str = NAME, token: str | None = None, max_concurrency: int = 256, **kwargs):
        """The pool as a named Ray actor, owned by the calling driver (it ends with the driver's job),
        or the one of that name already running (then the arguments are not used, and its calls
        need the token it was started with). Returns a :class:`~pkb_core.ray.pool_actor.PoolHandle`:
        its methods are called with ``.remote(...)`` and ``ray.get``, carrying the pool's token
        (``token``, default a new random one; ``handle.token`` to hand on)."""
        from pkb_core.ray.pool_actor import start

        return start(EvaluatorPool, args, kwargs, name=name, token=token, max_concurrency=max_concurrency)

    @staticmethod
    def find(token: str, name: str = NAME):
        """The running pool actor ``name`` as a handle that calls it with ``token`` (every call
        is refused with :class:`~pkb_core.ray.pool_actor.Unauthorized` unless it is the pool's)."""
        from pkb_core.ray.pool_actor import find

        return find(token, name)

    def submit(self, problem, source: str, **options) -> JobView:
        """Queue a solution; ``options`` are :class:`~pkb_core.contracts.serve.Submission`'s fields.
        Raises :class:`pkb_core.serve.intake.Refused` where the HTTP service answers 4xx."""
        return self.service.submit(Submission(problem=str(problem), source=source, **options))

    def wait(self, job_id: str, timeout: float | None = None) -> JobView:
        """The job once final (or as it is after ``timeout`` seconds)."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            view = self.service.view(job_id)
            if view.state.final or (end is not None and time.monotonic() >= end):
                return view
            time.sleep(POLL_S)

    def view(self, job_id: str) -> JobView:
        """The job as it is now."""
        return self.service.view(job_id)

    def jobs(self, *, state: str | None = None, client: str | None = None, limit: int = 100) -> list[JobView]:
        """The newest jobs (every client's: the pool is its holder's)."""
        return self.service.jobs(state=state, client=client, limit=limit)

    def evaluate(self, problem, source: str, **options) -> Record | None:
        """The record of one solution (None when it was cancelled)."""
        return self.wait(self.submit(problem, source, **options).id).record

    def evaluate_many(self, items) -> list[Record | None]:
        """``[(problem, source, options), ...]`` -> one record per item, in order, all queued at once
        (an empty, undecodable or oversized source is its item's ``compile-error`` record)."""
        views = [self.submit(problem, source, **options) for problem, source, options in items]
        return [self.wait(view.id).record for view in views]

    def cancel(self, job_id: str) -> JobView:
        return self.service.cancel(job_id)

    def cancel_jobs(self, ids=None, *, client: str | None = None, all: bool = False) -> Cancelled:
        """Cancel many unfinished jobs at once (as :meth:`pkb_core.client.Client.cancel_jobs`)."""
        return self.service.cancel_jobs(CancelRequest(ids=None if ids is None else tuple(ids), client=client,
                                                      all=all))

    def stats(self):
        return self.service.stats()

    def close(self) -> None:
        """Stop the groups (their actors and placement groups) and the queue."""
        self.service.stop()
