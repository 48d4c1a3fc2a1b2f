"""The reward service's contracts: what a client submits, what it reads back, and
what the service and its lanes say to each other.

A client (``pkb submit``, :class:`pkb_core.client.Client`, any HTTP caller)
sends a :class:`Submission` and gets a :class:`JobView`; a bulk cancel is a
:class:`CancelRequest` answered by a :class:`Cancelled`; the service's queue
statistics are a :class:`QueueStats`. Between the service and a lane (the
process that holds one warm GPU group, :mod:`pkb_core.serve.lane_process`) go
:class:`LaneTask` and :class:`LaneResult` as JSON lines. Every one is parsed with
:meth:`Contract.from_json <pkb_core.contracts.serial.Contract.from_json>`:
unknown fields and wrong types are refused with one line naming the field.
docs/serve.md is the HTTP reference.
"""
from __future__ import annotations

import enum

import attrs

from pkb_core.contracts.job import Job
from pkb_core.contracts.record import Record
from pkb_core.contracts.serial import Contract, optional


@attrs.frozen(kw_only=True)
class Submission(Contract):
    """One solution to evaluate, with the options of ``pkb run`` that make sense per job.

    ``None`` means the service's default (as ``pkb run``'s: ``size``/``dtype``
    ``auto``, the backend's world size default, the timing counts by size).
    """

    #: The problem: its id (``"7"``) or its ``<id>_<name>``.
    problem: str
    #: The solution file's text (defines ``solution(...)``).
    source: str
    #: The backend whose rules judge it (``triton``, ``cuda``, ...; ``reference`` lets a solution
    #: call torch.distributed's collectives). Required: a submission that forgot it was judged by
    #: ``reference``'s rules, so an NCCL call passed where ``triton`` flags it.
    backend: str
    #: Ranks of the job (one GPU each); None: 2 (the smallest group every problem allows, or its minimum).
    world_size: int | None = None
    trials: int = 5
    size: str = "auto"
    dtype: str = "auto"
    measure_perf: bool = False
    #: Empty: the service's device's headline (:func:`pkb_core.contracts.modes.headline_mode`).
    timing_modes: tuple[str, ...] = ()
    warmup: int | None = None
    iters: int | None = None
    min_iters: int | None = None
    #: Seconds the job may run once it starts (None: the service's default).
    timeout: float | None = None
    #: Who submits: the per-client share of the queue is by this tag.
    client: str = "anonymous"
    #: Higher runs first (within a priority, clients share fairly).
    priority: int = 0
    #: Run again even when an identical submission has a record.
    fresh: bool = False
    #: How records name the solution (default ``<problem>-{job}.py``); ``{job}`` in it is replaced by the job id.
    label: str | None = None


class JobState(str, enum.Enum):
    """Where a job is. ``done`` and ``cancelled`` are final."""

    QUEUED = "queued"
    BUILDING = "building"
    READY = "ready"
    RUNNING = "running"
    DONE = "done"
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        return self in (JobState.DONE, JobState.CANCELLED)


@attrs.frozen(kw_only=True)
class JobView(Contract):
    """A job as the service shows it."""

    id: str
    state: JobState = attrs.field(converter=JobState)
    client: str
    priority: int
    problem: str
    backend: str
    world_size: int
    #: Seconds since the epoch.
    submitted_at: float
    started_at: float | None = optional()
    finished_at: float | None = optional()
    #: Why it waits (no group of its world size free, ...) or how it was cancelled.
    note: str = ""
    #: The job whose record this one shares (an identical earlier submission), if any.
    same_as: str | None = optional()
    #: Why it runs (or ran) again: one line for each earlier run lost with its group, as its
    #: record's ``reruns``; None while it has run at most once.
    reruns: tuple[str, ...] | None = optional()
    #: The verdict and numbers, once ``done``.
    record: Record | None = optional()


@attrs.frozen(kw_only=True)
class CancelRequest(Contract):
    """Which jobs one call cancels (``POST /v1/jobs/cancel``): the unfinished jobs among ``ids``
    and of ``client``, both when both are given; every unfinished job only with ``all``, so an
    empty request cancels nothing by accident."""

    ids: tuple[str, ...] | None = optional()
    client: str | None = optional()
    all: bool = False


@attrs.frozen(kw_only=True)
class Cancelled(Contract):
    """What a bulk cancel did."""

    #: Jobs that were waiting: cancelled now.
    cancelled: tuple[str, ...] = ()
    #: Jobs that were running: their candidates are being killed (``cancelled`` once they are).
    stopping: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class GroupView(Contract):
    """One warm group (a lane): its world size, devices and what it runs."""

    id: str
    backend: str
    world_size: int
    devices: tuple[int, ...]
    #: The job it runs now, or None while idle.
    job: str | None = optional()
    jobs_done: int = 0
    #: The node it runs on, when the service places groups on a Ray cluster (``pkb serve --ray``).
    node: str | None = optional()


@attrs.frozen(kw_only=True)
class QueueStats(Contract):
    """The service's queue at a glance (``GET /v1/stats``)."""

    #: Jobs by state.
    states: dict[str, int]
    #: Jobs not final, by client.
    clients: dict[str, int]
    groups: tuple[GroupView, ...]
    #: Devices of the node (GPUs, or CPU rank slots in CPU mode) and how many groups hold now.
    devices: int
    devices_held: int
    builds_running: int
    #: Jobs finished in the last hour.
    done_last_hour: int
    max_queued: int


@attrs.frozen(kw_only=True)
class Health(Contract):
    """``GET /v1/health``."""

    ok: bool
    version: str
    device: str
    devices: int
    uptime_s: float


@attrs.frozen(kw_only=True)
class LaneTask(Contract):
    """Service -> lane: run ``job`` (its solution already built), or cancel the running ``job_id``."""

    job_id: str
    job: Job | None = optional()
    cancel: bool = False


@attrs.frozen(kw_only=True)
class LaneResult(Contract):
    """Lane -> service: ``job_id``'s record (a lane says ``ready`` once its group is up)."""

    job_id: str
    record: Record | None = optional()
    #: True when the record ends a job the service asked the lane to cancel.
    cancelled: bool = False
    #: A lane that could not start says why (job_id is then empty).
    error: str | None = optional()
