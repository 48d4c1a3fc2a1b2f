"""A worker process's start settings: :class:`WorkerSettings`, one environment variable.

The launcher (or another node's agent) makes one per rank and puts it in the
worker's environment as JSON under :data:`WorkerSettings.ENV`;
:func:`pkb_core.harness.worker_loop.begin` reads it once and hands its fields to the
code that needs them. ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` are set beside
it for third-party code that reads them (a backend's build, a solution); pkb
reads only the settings. The reply pipe's descriptor stays a variable of its own
(``PKB_REPLY_FD``, :mod:`pkb_core.process.channel`'s, which builders use too). The
judge's run secret is never here: it is the first message on the judge's command
pipe (:class:`pkb_core.contracts.messages.Secret`).
"""
from __future__ import annotations

import json
import os
import typing

import attrs

from pkb_core.contracts.serial import Contract, optional


@attrs.frozen(kw_only=True)
class WorkerSettings(Contract):
    """How one judge or candidate process starts (:mod:`pkb_core.judge.worker`, :mod:`pkb_core.candidate.worker`)."""

    ENV: typing.ClassVar[str] = "PKB_WORKER_SETTINGS"

    #: ``judge`` or ``candidate``.
    role: str
    #: Global rank, world size; the rank on this node and the ranks on this node
    #: (fewer than the world across nodes: no device barrier over them).
    rank: int = 0
    world_size: int
    local_rank: int = 0
    local_world_size: int
    #: ``cuda`` or ``cpu``.
    device_type: str
    #: The group's c10d store: ``host:port`` (the judge's, a reference-backend candidate's
    #: keeper) or a keeper's abstract Unix socket; the token its keeper asks for.
    store: str
    store_token: str = ""
    #: Seconds to wait for the store and the process group.
    store_timeout: float = 600.0
    run_dir: str
    #: The group's name for its shared-memory files and heap segments (a candidate's: its job's).
    run_id: str = ""
    #: The group's own shared-memory folder (:mod:`pkb_core.launch.scratch`), if any.
    shm_dir: str | None = optional()
    #: A candidate group's own user (None where the launcher cannot switch users).
    sandbox_uid: int | None = optional()
    #: The backend a candidate runs, whether it is a custom-kernel one (a sealed world group,
    #: the keeper's counter store), and its options (``--backend-option``).
    backend: str = ""
    custom_kernels: bool = True
    backend_options: dict = attrs.field(factory=dict)
    #: Global rank 0 of a candidate group: its store keeper's listening socket and report
    #: pipe (descriptors the zygote handed over; :func:`pkb_core.keeper.process.start_keeper`).
    keeper_fds: tuple[int, ...] | None = optional()

    def for_rank(self, rank: int, local_rank: int) -> WorkerSettings:
        return attrs.evolve(self, rank=rank, local_rank=local_rank)

    def environ(self) -> dict:
        """The environment entries that carry these settings (and the rank variables
        third-party code reads)."""
        return {self.ENV: json.dumps(self.to_json()), "RANK": str(self.rank), "LOCAL_RANK": str(self.local_rank),
                "WORLD_SIZE": str(self.world_size)}

    @classmethod
    def from_environ(cls, environ=None) -> WorkerSettings:
        """The settings in ``environ`` (this process's environment by default)."""
        environ = os.environ if environ is None else environ
        return cls.from_json(json.loads(environ[cls.ENV]))
