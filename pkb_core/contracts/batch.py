"""What a launch needs besides its jobs (:class:`LaunchSettings`), and a batch of jobs
with them (:class:`Batch`): the unit ``pkb run --executor`` sends to a node.

The fan-out (:mod:`pkb_core.launch.fanout`) hands each engine job one batch as
:meth:`Batch.to_json`; the node (:mod:`pkb_core.launch.shard`) reads it back
with :meth:`Batch.from_json`, so what crosses is plain JSON that any pkb of
the same version reads, not a pickle of the submitting process's objects.
"""
from __future__ import annotations

from pathlib import Path

import attrs

from pkb_core.contracts.calibration import Calibration
from pkb_core.contracts.job import Job
from pkb_core.contracts.serial import Contract


@attrs.frozen(kw_only=True)
class Nodes(Contract):
    """A job spanning several nodes: every node runs the same ``pkb run`` with its
    own ``node_rank`` and the same rendezvous endpoint and id."""

    nnodes: int
    node_rank: int
    endpoint: str
    rdzv_id: str


@attrs.frozen(kw_only=True)
class LaunchSettings(Contract):
    """How to start workers: ``nproc`` ranks per node, one node unless ``nodes``."""

    nproc: int
    device: str
    backend: str
    run_dir: Path = attrs.field(converter=Path)
    #: Seconds one job may take, start to verdict.
    job_timeout: float
    #: The backend's options (``pkb run --backend-option``), handed to its init hook.
    options: dict = attrs.field(factory=dict)
    #: This machine's ceilings, when jobs are timed (the physics floor).
    calibration: Calibration | None = None
    nodes: Nodes | None = None
    #: Libraries the candidate's workers load before torch (``BackendInfo.preload``).
    preload: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    #: Whether the backend's solutions must move data themselves (``BackendInfo.custom_kernels``).
    custom_kernels: bool = True
    #: The variables the backend's workers and builders need besides pkb's allow-list
    #: (``BackendInfo.environment``: names, or prefixes ending in ``*``).
    environment: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    #: The compile phase: seconds one build may take, builds at once (None: by cores and memory).
    build_timeout: float = 600.0
    build_workers: int | None = None
    #: Each job's limits, in its candidate group's cgroup (a build's too; None: this machine's
    #: defaults, :mod:`pkb_core.machine.limits`): memory in MiB (shared-memory files included),
    #: processes and threads, the log's MiB (the rest dropped with a note).
    memory_mib: int | None = None
    max_processes: int | None = None
    log_cap_mib: int | None = None
    #: Folders no job or build may see, besides the run directory (the reward service's data directory).
    hidden: tuple[str, ...] = attrs.field(default=(), converter=tuple)

    @property
    def world_size(self) -> int:
        return self.nproc * (self.nodes.nnodes if self.nodes else 1)


@attrs.frozen(kw_only=True)
class Batch(Contract):
    """Jobs of one backend and world size with the settings to run them (one engine job)."""

    jobs: tuple[Job, ...] = attrs.field(converter=tuple)
    settings: LaunchSettings
