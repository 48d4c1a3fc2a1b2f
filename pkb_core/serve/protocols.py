"""The shapes the service's scheduler relies on, whatever runs its groups: a *placement*
(where a group goes), a *lane* (the scheduler's handle on one warm group) and a *build pool*
(where solutions compile). They are contracts inside the service's process, not between
processes, so they live beside their user (:mod:`pkb_core.serve.scheduler`), which has no
branch on which implementation it holds:

============  =============================================  =======================================
shape         this node (``pkb serve``)                      a Ray cluster (``pkb serve --ray``)
============  =============================================  =======================================
Placement     :class:`pkb_core.serve.placement.LocalDevices`  :class:`pkb_core.ray.placement.RayPlacement`
Lane          :class:`pkb_core.serve.local_lane.LocalLane`    :class:`pkb_core.ray.ray_lane.RayLane`
BuildPool     :class:`pkb_core.serve.builds.LocalBuilds`      :class:`pkb_core.ray.builds.RayBuilds`
============  =============================================  =======================================

Either lane is a handle; the group itself is a lane process
(:mod:`pkb_core.serve.lane_process`), started by the :class:`LocalLane` on this node or by the
Ray actor (:class:`pkb_core.ray.actor.GroupActor`) a :class:`RayLane` talks to.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Protocol, runtime_checkable

from pkb_core.contracts.batch import LaunchSettings
from pkb_core.contracts.serve import GroupView, LaneResult


@runtime_checkable
class Lane(Protocol):
    """The scheduler's handle on one warm group: it runs one job at a time and hands each
    :class:`~pkb_core.contracts.serve.LaneResult` to the ``on_result(lane, result)`` it was
    started with (from a thread of its own); a lane that is lost reports a result with an
    ``error``. A result's record has been written to the run directory of the lane's settings
    (its launch writes each record it makes)."""

    #: The lane's id, and ``(backend, world size, job timeout)``: the jobs it can run.
    id: str
    key: tuple
    #: The device indices it holds.
    devices: tuple
    #: The job it runs now (None: idle), when it went idle, how many it has run; whether it is gone.
    job_id: str | None
    idle_since: float
    jobs_done: int
    dead: bool

    def run(self, job_id: str, job: Any) -> bool:
        """Hand it ``job`` (False when the lane is gone: the job stays the caller's)."""

    def cancel(self, job_id: str) -> None:
        """Kill ``job_id`` if it is the one running."""

    def stop(self, grace: float = ...) -> None:
        """Stop after the running job (killed after ``grace`` seconds), and the group with it."""

    def view(self) -> GroupView:
        """What ``GET /groups`` shows of it."""


OnResult = Callable[[Lane, LaneResult], None]


@runtime_checkable
class BuildPool(Protocol):
    """Where the compile phase runs: one planned job at a time, never holding a group."""

    workers: int

    def submit(self, job: Any, settings: LaunchSettings, done: Callable, job_id: str) -> None:
        """Build ``job`` (the service's job ``job_id``), then call ``done(built job or None, record or
        None, error or None)``; a record (of a solution that did not build) has been written to
        ``settings.run_dir`` then."""

    def cancel(self, job_id: str) -> None:
        """Stop ``job_id``'s build if it still runs (its job was cancelled): its builder is killed and
        ``done`` is called with an error. A build already finished or unknown: nothing."""

    def stop(self) -> None:
        """Stop taking builds."""


@runtime_checkable
class Placement(Protocol):
    """Where a new group goes, and starting it there: the questions every placement answers."""

    def acquire(self, world_size: int) -> Any | None:
        """Room for a group of ``world_size`` now (what :meth:`start_lane` takes), or None: not now."""

    def room_after(self, world_size: int, idle: list) -> bool:
        """Would retiring the ``idle`` lanes make room for a group of ``world_size``?"""

    def never_fits(self, world_size: int) -> str | None:
        """Why this place can never hold a group of ``world_size``; None if it can."""

    def waiting_note(self, world_size: int) -> str:
        """A waiting job's note while no room is free."""

    def start_lane(self, lane_id: str, key: tuple, room: Any, settings: LaunchSettings, *, on_result: OnResult,
                   log: Path) -> Lane:
        """Start a lane in the ``room`` :meth:`acquire` gave."""

    def release(self, lane: Lane) -> None:
        """Give back a retired or lost lane's room."""

    def prune(self, needed: set) -> None:
        """Withdraw what was asked for world sizes not in ``needed`` (no job waits for them)."""

    def build_pool(self, workers: int, log_path: Path) -> BuildPool:
        """Where builds run, ``workers`` at once."""

    def stop(self) -> None:
        """Give back everything held."""
