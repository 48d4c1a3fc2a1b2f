"""Where the service's groups run: this node's devices, or a Ray cluster's nodes.

The scheduler (:mod:`pkb_core.serve.scheduler`) decides which job runs next and
on a group of which kind; a *placement* decides where a new group goes and
starts it there. Two exist:

- :class:`LocalDevices` (``pkb serve``): the node's devices (GPUs; in CPU mode,
  rank slots) split into disjoint sets, one per lane process
  (:class:`pkb_core.serve.local_lane.LocalLane`).
- :class:`pkb_core.ray.placement.RayPlacement` (``pkb serve --ray``): a Ray
  placement group per group, on whichever node has the room, holding a Ray
  actor that owns the lane process there (:mod:`pkb_core.ray`). Ray is imported
  only then: the command (or :class:`pkb_core.ray.EvaluatorPool`) hands it to
  the service, which never imports it.

Every placement answers the same questions
(:class:`pkb_core.serve.protocols.Placement`), so the scheduler has no branch on
which one it has: take room for a group of W now (:meth:`acquire`; ``None``: not
now), would retiring these idle lanes make room (:meth:`room_after`), can the
place ever hold W (:meth:`never_fits`), start a lane in the room taken
(:meth:`start_lane`), give the room back (:meth:`release`), withdraw what was
asked for world sizes no job waits for any more (:meth:`prune`), and where builds
run (:meth:`build_pool`: this node's threads, or Ray CPU tasks anywhere).
"""
from __future__ import annotations

from pathlib import Path

from pkb_core.contracts.batch import LaunchSettings


class LocalDevices:
    """The node's ``devices`` device indices (see the module docstring); a :class:`pkb_core.serve.protocols.Placement`."""

    def __init__(self, devices: int):
        self.devices = devices
        self.free = set(range(devices))

    def acquire(self, world_size: int):
        """The room for a group of ``world_size`` (its device indices), or None while too few are free."""
        if len(self.free) < world_size:
            return None
        devices = tuple(sorted(self.free)[:world_size])
        self.free -= set(devices)
        return devices

    def room_after(self, world_size: int, idle: list) -> bool:
        return len(self.free) + sum(len(lane.devices) for lane in idle) >= world_size

    def never_fits(self, world_size: int) -> str | None:
        return None if world_size <= self.devices else f"the node gives groups {self.devices} device(s)"

    def waiting_note(self, world_size: int) -> str:
        return f"waiting for {world_size} free device(s) for a group of its kind"

    def start_lane(self, lane_id: str, key: tuple, room, settings: LaunchSettings, *, on_result, log: Path):
        from pkb_core.serve.local_lane import LocalLane

        return LocalLane(lane_id, key, room, settings, on_result=on_result, log=log)

    def release(self, lane) -> None:
        self.free |= set(lane.devices)

    def prune(self, needed: set) -> None:
        """Forget room asked for world sizes not in ``needed`` (this node asks for nothing ahead)."""

    def build_pool(self, workers: int, log_path: Path):
        """The compile pool: builds on this node (:class:`pkb_core.serve.builds.LocalBuilds`)."""
        from pkb_core.serve.builds import LocalBuilds

        return LocalBuilds(workers, log_path)

    def stop(self) -> None:
        pass

