"""``pkb serve --ray``: the service's groups as Ray actors, each on one node of the cluster.

:class:`RayPlacement` is a placement (:mod:`pkb_core.serve.placement`) whose room
for a group of W is a Ray placement group of one bundle of W devices with the
``STRICT_PACK`` strategy: W GPUs (CUDA) or W ``pkb_slot`` logical resources (CPU
mode: a node offers them with ``ray start --resources '{"pkb_slot": N}'``) on a
single node. The group's :class:`~pkb_core.ray.actor.GroupActor` is scheduled in
that placement group and its lane process runs on that node
(:class:`~pkb_core.ray.ray_lane.RayLane`).

Asking is not blocking: the first :meth:`RayPlacement.acquire` for W creates the
placement group and waits a moment for it; while Ray cannot place it (the
cluster is full, or a node left) it stays asked for, and a later call returns it
once Ray has placed it. So a group lost with its node is replaced when resources
return. A world size no alive node can hold is :meth:`never_fits` (the scheduler
lets such a job wait with that reason in its note, then fails it).

The queue, priorities, deduplication and SQLite records stay with the service on
its node: the actors are its workers. Builds are Ray CPU tasks on any node
(:mod:`pkb_core.ray.builds`).
"""
from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

import ray

from pkb_core.contracts.batch import LaunchSettings
from pkb_core.ray.actor import GroupActor
from pkb_core.ray.ray_lane import RayLane

#: The logical resource a CPU-mode group takes per rank (GPUs take Ray's own ``GPU``).
CPU_SLOT = "pkb_slot"
#: The namespace of the service's actors in the cluster.
NAMESPACE = "pkb"
#: Seconds a first ask waits for Ray to place a group before it is left pending.
FIRST_WAIT_S = 1.0
#: Seconds the cluster's node list is reused before it is read again.
NODES_TTL_S = 2.0


@dataclass
class Room:
    """A placed placement group and what its actor asks for inside it."""

    group: object
    world_size: int
    actor_resources: dict = field(default_factory=dict)


def connect(address: str | None) -> None:
    """Join the Ray cluster at ``address`` (``auto``: the one this node belongs to), unless this
    process already has (a driver or an actor of the trainer)."""
    if not ray.is_initialized():
        ray.init(address=address or "auto", namespace=NAMESPACE, log_to_driver=False, logging_level="ERROR")


class RayPlacement:
    """See the module docstring.

    :param address: the cluster (None or ``auto``: this node's; ``ray://`` client addresses are not supported:
        the service must be a driver on a node of the cluster).
    :param device: ``cuda`` (groups take GPUs) or ``cpu`` (groups take ``pkb_slot``).
    :param token: what the actors accept calls with (default: a fresh random one per service).
    """

    def __init__(self, address: str | None, *, device: str, token: str | None = None):
        connect(address)
        self.device = device
        self.resource = "GPU" if device == "cuda" else CPU_SLOT
        self.token = token or secrets.token_hex(32)
        self._actor_class = ray.remote(GroupActor)
        self._front = ray.get_runtime_context().get_node_id()
        self._asked: dict[int, object] = {}
        self._nodes: tuple[float, list] = (0.0, [])

    # -- the cluster -----------------------------------------------------------------------
    def node_sizes(self) -> list[int]:
        """How many of the groups' resource each alive node has (read at most every NODES_TTL_S)."""
        read_at, sizes = self._nodes
        if time.monotonic() - read_at > NODES_TTL_S:
            sizes = [int(node.get("Resources", {}).get(self.resource, 0)) for node in ray.nodes() if node.get("Alive")]
            self._nodes = (time.monotonic(), sizes)
        return sizes

    def capacity(self) -> int:
        """The cluster's devices for groups now (the largest world size it could ever hold at once)."""
        return sum(self.node_sizes())

    # -- the placement ---------------------------------------------------------------------
    def acquire(self, world_size: int) -> Room | None:
        from ray.util.placement_group import placement_group

        group = self._asked.get(world_size)
        wait = 0.0
        if group is None:
            if self.never_fits(world_size):
                return None
            group = placement_group([{self.resource: world_size}], strategy="STRICT_PACK")
            self._asked[world_size] = group
            wait = FIRST_WAIT_S
        ready, _ = ray.wait([group.ready()], timeout=wait)
        if not ready:
            return None
        del self._asked[world_size]
        resources = {"num_gpus": world_size} if self.resource == "GPU" else {"resources": {self.resource: world_size}}
        return Room(group=group, world_size=world_size, actor_resources=resources)

    def room_after(self, world_size: int, idle: list) -> bool:
        # Ray decides where the freed devices are; retiring idle groups that add up to W lets it place one.
        return sum(lane.key[1] for lane in idle) >= world_size

    def never_fits(self, world_size: int) -> str | None:
        sizes = self.node_sizes()
        if any(size >= world_size for size in sizes):
            return None
        return (f"no node of the Ray cluster has {world_size} {self.resource} "
                f"(the largest has {max(sizes, default=0)})")

    def waiting_note(self, world_size: int) -> str:
        return f"waiting for the Ray cluster to place a group of {world_size} {self.resource} on one node"

    def start_lane(self, lane_id: str, key: tuple, room: Room, settings: LaunchSettings, *, on_result, log: Path):
        return RayLane(lane_id, key, room, settings, on_result=on_result, log=log, actor_class=self._actor_class,
                       token=self.token, front_node=self._front)

    def release(self, lane) -> None:
        _remove(lane.room.group)

    def prune(self, needed: set) -> None:
        """Withdraw the asks for world sizes no waiting job needs any more (once placed, they would hold
        the trainer's devices for nothing)."""
        for world_size in [w for w in self._asked if w not in needed]:
            _remove(self._asked.pop(world_size))

    def build_pool(self, workers: int, log_path: Path):
        """The compile pool: each build a Ray CPU task on any node (:class:`pkb_core.ray.builds.RayBuilds`)."""
        from pkb_core.ray.builds import RayBuilds

        return RayBuilds(workers)

    def stop(self) -> None:
        self.prune(set())


def _remove(group) -> None:
    from ray.util.placement_group import remove_placement_group

    try:
        remove_placement_group(group)
    except Exception:  # noqa: BLE001 - a group Ray already dropped (its node left)
        pass
