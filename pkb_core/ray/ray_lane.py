"""The service's handle on a group that runs as a Ray actor: a lane, to the scheduler.

:class:`RayLane` is a :class:`pkb_core.serve.protocols.Lane`, as the local
:class:`pkb_core.serve.local_lane.LocalLane` is (``run``, ``cancel``, ``stop``, ``view``;
``key``, ``devices``, ``job_id``, ``idle_since``, ``jobs_done``, ``dead``), so the scheduler
treats both alike.
Its work runs in a :class:`pkb_core.ray.actor.GroupActor` in the placement
group the placement reserved; a thread of the handle waits on the actor's
``next_result`` calls and hands each checked :class:`LaneResult` to the
scheduler's callback. An actor that dies (killed, its node gone, its lane
process ended) surfaces as one ``LaneResult`` with an ``error``: the scheduler
runs the job once more on another group, then records it as ``error``
(:meth:`pkb_core.serve.scheduler.Scheduler._lane_failed`).
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

import ray

from pkb_core.contracts.batch import LaunchSettings
from pkb_core.contracts.serial import ContractError
from pkb_core.contracts.serve import GroupView, LaneResult, LaneTask
from pkb_core.ray.actor import STOP_GRACE_S, opened

#: Seconds one ``next_result`` call waits in the actor (the handle's thread then asks again).
POLL_S = 2.0


class RayLane:
    """See the module docstring.

    :param room: the placement's :class:`pkb_core.ray.placement.Room` (the placement group, its resources).
    :param actor_class: ``ray.remote(GroupActor)``.
    :param token: the service's token for its actors.
    :param front_node: the service's Ray node id (the actor builds jobs again on any other node).
    """

    def __init__(self, lane_id: str, key: tuple, room, settings: LaunchSettings, *, on_result, log: Path,
                 actor_class, token: str, front_node: str | None = None):
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.id = lane_id
        self.key = key
        self.room = room
        self.devices = tuple(range(key[1]))  # W devices of one node (Ray names them to the actor)
        self.job_id: str | None = None
        self.idle_since = time.monotonic()
        self.jobs_done = 0
        self.dead = False
        self.node: str | None = None
        self._on_result = on_result
        self._token = token
        self._stopping = False
        strategy = PlacementGroupSchedulingStrategy(room.group, placement_group_bundle_index=0)
        # num_cpus=0: the relay takes no core from the trainer; the lane's ranks use the group's devices.
        self.actor = actor_class.options(scheduling_strategy=strategy, num_cpus=0, max_restarts=0,
                                         max_concurrency=8, **room.actor_resources).remote(
            token, settings.to_json(), str(log), front_node)
        self._where = self.actor.where.remote(token)
        self._reader = threading.Thread(target=self._read, name=f"ray-lane-{lane_id}", daemon=True)
        self._reader.start()

    def run(self, job_id: str, job) -> bool:
        """Hand the actor ``job`` with its solution's text (the service's file may not be on its node)."""
        source = None
        if job.solution:
            try:
                source = Path(job.solution).read_text()
            except OSError:
                pass
        if self.dead:
            return False
        self.job_id = job_id
        self.actor.run.remote(self._token, LaneTask(job_id=job_id, job=job).to_json(), source)
        return True

    def cancel(self, job_id: str) -> None:
        self.actor.cancel.remote(self._token, job_id)

    def _read(self) -> None:
        error = None
        while not self._stopping:
            try:
                sealed = ray.get(self.actor.next_result.remote(self._token, POLL_S), timeout=POLL_S + 60)
            except ray.exceptions.GetTimeoutError:
                continue  # the actor is slow to answer (its node is busy); a dead one raises below
            except Exception as exc:  # noqa: BLE001 - RayActorError, ActorDiedError, a node gone: the lane is lost
                error = f"the group's Ray actor is gone ({_short(exc)})"
                break
            if sealed is None:
                continue
            message = opened(self._token, sealed)
            if message is None:
                error = "a result of the group's Ray actor failed its authentication"
                break
            if "ended" in message:
                error = f"the lane's process ended (status {message['ended']})"
                break
            try:
                result = LaneResult.from_json(message["result"]) if "result" in message else None
            except (ContractError, TypeError, ValueError) as exc:
                result = LaneResult(job_id=self.job_id or "", error=f"the lane sent a malformed result ({exc})")
            self._on_result(self, result or LaneResult(job_id=self.job_id or "",
                                                       error="the lane sent a malformed result"))
        self.dead = True
        if error is not None and not self._stopping:
            self._on_result(self, LaneResult(job_id=self.job_id or "", error=error))

    def stop(self, grace: float = STOP_GRACE_S) -> None:
        """Stop the lane (after its running job), then the actor; the placement group is the placement's."""
        self._stopping = True
        try:
            ray.get(self.actor.stop.remote(self._token, grace), timeout=grace + 15)
        except Exception:  # noqa: BLE001 - a dead or hung actor: killing it below ends its lane (PDEATHSIG)
            pass
        try:
            ray.kill(self.actor, no_restart=True)
        except Exception:  # noqa: BLE001
            pass

    def view(self) -> GroupView:
        if self.node is None:
            ready, _ = ray.wait([self._where], timeout=0)
            if ready:
                try:
                    where = ray.get(ready[0])
                    self.node = f"{where['ip']} {where['node_id'][:8]}"  # nodes of one machine share the address
                except Exception:  # noqa: BLE001 - a dead actor has no node
                    self.node = "gone"
        return GroupView(id=self.id, backend=self.key[0], world_size=self.key[1], devices=self.devices,
                         job=self.job_id, jobs_done=self.jobs_done, node=self.node)


def _short(exc: BaseException) -> str:
    """The first line of a Ray error (they run to pages)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__
