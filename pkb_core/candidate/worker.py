"""Entry point of a candidate rank's process: :func:`main`, called by the zygote's child
(:mod:`pkb_core.launch.zygote`, which has already put it in its session, cgroup, network
and capped log, and armed its death with the zygote).

It imports torch after any libraries its backend preloads, forks its group's store keeper
first if it is the group's rank 0 (:func:`pkb_core.keeper.process.start_keeper`), picks its
device, connects to its group's store (the keeper's counters for custom kernels,
:class:`pkb_core.keeper.client.KeeperStore`; a TCPStore client for the reference
backend), prepares its backend (:meth:`pkb_core.candidate.rank.CandidateRank.prepare`),
then answers commands until told to exit. Its output goes to the job's own log
(``logs/job-<run id>.log``). What it shares with the judge's start is in
:mod:`pkb_core.harness.worker_loop`.
"""
from __future__ import annotations

from pathlib import Path

from pkb_core.contracts.worker_settings import WorkerSettings
from pkb_core.harness.worker_loop import begin, connect, ready, serve
from pkb_core.plugin.preload import import_torch_after_preloads


def _store(settings: WorkerSettings, timeout):
    """A candidate's store: the keeper's counters (custom kernels) or a TCPStore client (the reference backend)."""
    import torch.distributed as dist

    if settings.custom_kernels:
        from pkb_core.keeper.client import KeeperStore

        return KeeperStore(settings.store, rank=settings.rank, token=settings.store_token, timeout=timeout)
    host, port = settings.store.rsplit(":", 1)
    return dist.TCPStore(host, int(port), settings.world_size, is_master=False, timeout=timeout)


def main() -> int:
    settings = begin("candidate")
    import_torch_after_preloads()  # a backend's own build of a library must load before torch's
    from pkb_core.keeper.process import start_keeper

    start_keeper(settings)
    from pkb_core.process.channel import WorkerChannel

    channel = WorkerChannel()
    device, timeout, _ = connect(settings)
    store = _store(settings, timeout)
    from pkb_core.candidate.rank import CandidateRank

    handler = CandidateRank(rank=settings.rank, world_size=settings.world_size, local_rank=settings.local_rank,
                            device=device, store=store, run_id=settings.run_id, run_dir=Path(settings.run_dir),
                            send_event=channel.send, local_world_size=settings.local_world_size,
                            shm_dir=settings.shm_dir, sandbox_uid=settings.sandbox_uid)
    unsupported = handler.prepare(settings.backend, settings.custom_kernels, settings.backend_options)
    ready(channel, unsupported=unsupported)
    serve(channel, handler, "candidate")
    return 0
