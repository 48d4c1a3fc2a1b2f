"""The service's scheduler: queued jobs through the build pool onto warm groups.

One thread owns every decision (the loop in :meth:`Scheduler._loop`); HTTP
handlers and lane readers only wake it. A job goes ``queued`` -> ``building``
(the compile pool: CPU threads running the same compile phase as ``pkb run``,
never holding a group) -> ``ready`` -> ``running`` on a lane
(:class:`pkb_core.serve.protocols.Lane`) -> ``done``.

Groups by world size. The devices (GPUs; in CPU mode, rank slots) of the
service's placement (:mod:`pkb_core.serve.placement`: this node's, or a Ray
cluster's) are split into lanes as the ready jobs need them: a lane of W devices runs jobs of
world size W for one backend and timeout, one at a time, concurrently with the
other lanes on disjoint devices. A job takes an idle lane of its kind; else a
new lane on free devices; else idle lanes of other kinds are retired (the
longest idle first) to make room. The first ready job that cannot be placed
reserves the room it waits for: later jobs may still use idle lanes that
exist, but start no new ones, so a job of a large world size is not starved by
a stream of small ones. A job whose world size the placement can never hold
(no node of a Ray cluster has that many) waits with the reason in its note and
is recorded as ``error`` after ``place_timeout`` seconds.

Order (:mod:`pkb_core.serve.fair_share`): higher priority first (a tenant's never above 0 across
tenants); then the account (a token's client, else the submission's client tag) that started the
fewest jobs in the last :data:`SHARE_WINDOW_S` seconds (so one account's thousand submissions
cannot starve another's one: accounts take turns); then the job's own priority, then submission
order. Builds likewise, counting the builds each account has running first.
"""
from __future__ import annotations

import collections
import itertools
import queue
import threading
import time
from pathlib import Path

from pkb_core.contracts.job import Job
from pkb_core.contracts.serve import GroupView, JobState, LaneResult
from pkb_core.contracts.verdict import Verdict
from pkb_core.serve.fair_share import account, order_key
from pkb_core.serve.placement import LocalDevices
from pkb_core.serve.protocols import BuildPool, Lane, Placement
from pkb_core.serve.store import JobStore

#: A job whose lane died under it runs this many times in all before it is recorded as ``error``.
MAX_ATTEMPTS = 2
#: Seconds over which the fair share counts the jobs each client started.
SHARE_WINDOW_S = 600.0


class Scheduler:
    """See the module docstring.

    :param settings_for: ``settings_for(lane_key) -> LaunchSettings`` for a new lane's launch.
    :param lane_key_of: ``lane_key_of(submission, world_size) -> tuple``: the lane a job needs, for a
        job whose key the intake did not leave in :attr:`lane_keys` (one recovered after a restart).
    :param report: ``report(job_id, record, write=False)``: a job's record, to the service's session
        (whose first observer, the store, finishes the job); ``write``: a record the scheduler made
        itself, which no lane or build wrote to the job's run directory (the service writes it there).
    :param placement: where lanes start (:mod:`pkb_core.serve.placement`); default this node's ``devices``.
    :param place_timeout: seconds a job waits for a group its placement can never hold before it is an ``error``.
    """

    def __init__(self, store: JobStore, *, devices: int, data_dir: Path, settings_for, lane_key_of, report,
                 build_workers: int, placement: Placement | None = None, place_timeout: float = 600.0):
        self.store = store
        self.devices = devices
        self.data_dir = Path(data_dir)
        self.settings_for = settings_for
        self.lane_key_of = lane_key_of
        self.report = report
        #: The lane each waiting job needs, by job id: computed once, at intake (or on first sight).
        self.lane_keys: dict[str, tuple] = {}
        self.lanes: dict[str, Lane] = {}
        self.placement: Placement = placement or LocalDevices(devices)
        self.place_timeout = place_timeout
        #: When each job that no group could ever hold began to wait (monotonic seconds).
        self._unplaceable: dict[str, float] = {}
        #: The jobs whose builds are in the compile pool: their accounts, by job id.
        self.building: dict[str, str] = {}
        #: When each account's recent builds started (the builds' fair share counts those of the last window).
        self.build_starts: dict[str, collections.deque] = {}
        #: The compile pool (:mod:`pkb_core.serve.builds`): this node's, or Ray tasks anywhere in the cluster.
        self.builds: BuildPool = self.placement.build_pool(build_workers, self.data_dir / "logs" / "builders.log")
        self.build_workers = build_workers
        #: When each account's recent jobs started (the fair share counts those of the last window).
        self.served: dict[str, collections.deque] = {}
        self._results: queue.Queue = queue.Queue()
        self._wake = threading.Event()
        self._stopping = False
        self._ids = itertools.count(1)
        self._thread = threading.Thread(target=self._loop, name="pkb-scheduler", daemon=True)

    # -- from other threads ------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def cancel(self, job_id: str) -> None:
        """Cancel a job: a waiting one at once (its build, if it builds, is killed), a running one by
        killing its candidate."""
        from pkb_core.serve.store import WAITING

        if self.store.set_state(job_id, JobState.CANCELLED, note="cancelled before it ran", only_from=WAITING):
            self.cancelled_waiting(job_id)
            return
        for lane in list(self.lanes.values()):
            if lane.job_id == job_id:
                lane.cancel(job_id)

    def cancelled_waiting(self, job_id: str) -> None:
        """``job_id``, waiting, was cancelled in the store: forget its lane, stop its build."""
        self.lane_keys.pop(job_id, None)
        if job_id in self.building:
            self.builds.cancel(job_id)

    def stop(self) -> None:
        """Stop the loop, the lanes (each after its running job is killed with it) and the builds."""
        self._stopping = True
        self.wake()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        for lane in self.lanes.values():
            if lane.job_id is not None:  # it runs again when the service is back (the store still says running)
                lane.cancel(lane.job_id)
        stoppers = [threading.Thread(target=lane.stop, kwargs={"grace": 5.0}) for lane in self.lanes.values()]
        for thread in stoppers:
            thread.start()
        for thread in stoppers:
            thread.join()
        self.builds.stop()
        self.placement.stop()

    def groups(self) -> list[GroupView]:
        return [lane.view() for lane in list(self.lanes.values())]

    # -- the loop ----------------------------------------------------------------------
    def _loop(self) -> None:
        from pkb_core.process.reaper import reap_orphans

        while not self._stopping:
            self._wake.wait(timeout=0.5)
            self._wake.clear()
            reap_orphans()  # what a dead lane left (the service is their child subreaper)
            try:
                while not self._results.empty():
                    self._on_result(*self._results.get())
                if self._stopping:
                    break
                waiting = self.store.waiting()
                self._start_builds([w for w in waiting if w["state"] == JobState.QUEUED])
                self._dispatch([w for w in waiting if w["state"] == JobState.READY])
            except Exception:  # noqa: BLE001 - the loop must outlive any one job's surprise
                import traceback

                traceback.print_exc()
                time.sleep(0.5)

    # -- builds --------------------------------------------------------------------------
    def _start_builds(self, queued: list) -> None:
        """Start builds of ``queued`` jobs while the pool has room, in :mod:`pkb_core.serve.fair_share`'s
        order, an account's share its builds running, then those started in the last
        :data:`SHARE_WINDOW_S`; no account holds more than :meth:`builds_per_client` builds at once,
        so one client's sources that build slowly (or hang until the build limit) leave a builder to
        every other client's."""
        now = time.monotonic()
        _forget_before(self.build_starts, now - SHARE_WINDOW_S)
        remaining = list(queued)  # in submission order (min() keeps the earliest of equals)
        while remaining and len(self.building) < self.build_workers:
            running = collections.Counter(self.building.values())
            eligible = [w for w in remaining if running[account(w)] < self.builds_per_client()]
            if not eligible:
                return
            item = min(eligible, key=lambda w: order_key(
                w, lambda name: (running[name], len(self.build_starts.get(name, ())))))
            remaining.remove(item)
            if self.store.set_state(item["id"], JobState.BUILDING, note="", only_from=(JobState.QUEUED,)):
                job = Job.from_json(item["job"])
                key = self._key(item)
                self.building[item["id"]] = account(item)
                self.build_starts.setdefault(account(item), collections.deque()).append(now)
                done = self._built_callback(item["id"], job, key)
                try:
                    settings = self.settings_for(key)
                except Exception as exc:  # noqa: BLE001 - a job whose launch cannot be set up ends as its error
                    from pkb_core.errors import describe

                    done(None, None, f"the job's launch could not be set up: {describe(exc)}")
                    continue
                self.builds.submit(job, settings, done, item["id"])

    def builds_per_client(self) -> int:
        """The most builds one client holds at once: all but one of the pool's (all of a pool of one)."""
        return max(1, self.build_workers - 1)

    def _built_callback(self, job_id: str, job: Job, key: tuple):
        """What the compile pool calls with a build's outcome (from its thread): the outcome goes
        through the results queue to the loop (an error's record is the scheduler's own, to write;
        a build stopped by its job's cancel has none)."""
        from pkb_core.serve.builds import CANCELLED

        def done(built, record, error):
            if error == CANCELLED:
                built = record = None
            elif error is not None:
                record = self._error_record(job, key, error)
            self._results.put(("built", job_id, built, record, error is not None))
            self.wake()

        return done

    @staticmethod
    def _error_record(job: Job, key: tuple, reason: str):
        from pkb_core.results.records import job_record

        return job_record(job, key[1], Verdict.ERROR, reason)

    # -- placing ready jobs on lanes ------------------------------------------------------
    def _dispatch(self, ready: list) -> None:
        now = time.monotonic()
        _forget_before(self.served, now - SHARE_WINDOW_S)
        self.placement.prune({item["world_size"] for item in ready})
        reserved = False
        # In submission order (min() below keeps the earliest of equals); jobs no group can hold reserve nothing.
        remaining = [item for item in ready if not self._unplaceable_job(item, self._key(item))]
        while remaining:
            item = min(remaining, key=lambda w: order_key(w, lambda name: len(self.served.get(name, ()))))
            remaining.remove(item)
            key = self._key(item)
            lane = self._idle_lane(key) or (None if reserved else self._new_lane(key))
            if lane is None:
                if not reserved:
                    self.store.set_state(item["id"], JobState.READY, note=self.placement.waiting_note(key[1]),
                                         only_from=(JobState.READY,))
                reserved = True
                if not any(lane.job_id is None for lane in self.lanes.values()):
                    return  # nothing idle left to backfill
                continue
            if not self.store.set_state(item["id"], JobState.RUNNING, note="", only_from=(JobState.READY,)):
                continue  # cancelled meanwhile
            self.lane_keys.pop(item["id"], None)  # running: a lane of its kind holds it
            if lane.run(item["id"], Job.from_json(item["job"])):
                self.served.setdefault(account(item), collections.deque()).append(now)
            else:
                self.store.set_state(item["id"], JobState.READY, note="its group was gone; waiting again")

    def _key(self, item: dict) -> tuple:
        """The lane ``item`` (a waiting job) needs: as the intake left it, else worked out once."""
        key = self.lane_keys.get(item["id"])
        if key is None:
            key = self.lane_keys[item["id"]] = self.lane_key_of(item["submission"], item["world_size"])
        return key

    def _unplaceable_job(self, item: dict, key: tuple) -> bool:
        """True for a job no group of its kind can hold now or later (as far as the placement knows):
        its note says why, and after ``place_timeout`` seconds it is recorded as ``error``."""
        reason = self.placement.never_fits(key[1])
        if reason is None:
            self._unplaceable.pop(item["id"], None)
            return False
        since = self._unplaceable.setdefault(item["id"], time.monotonic())
        left = self.place_timeout - (time.monotonic() - since)
        if left > 0:
            self.store.set_state(item["id"], JobState.READY, only_from=(JobState.READY,),
                                 note=f"no group of world size {key[1]} can start: {reason}; "
                                      f"it waits {left:.0f} s more for one, then fails")
            return True
        self._unplaceable.pop(item["id"], None)
        self.lane_keys.pop(item["id"], None)
        job = Job.from_json(item["job"])
        self.report(item["id"], self._error_record(job, key, f"no group of world size {key[1]} could start "
                                                                    f"within {self.place_timeout:.0f} s: {reason}"),
                    write=True)
        return True

    def _idle_lane(self, key: tuple) -> Lane | None:
        idle = [lane for lane in self.lanes.values() if lane.key == key and lane.job_id is None and not lane.dead]
        return idle[0] if idle else None

    def _new_lane(self, key: tuple) -> Lane | None:
        """A lane for ``key`` where the placement has room, retiring idle lanes of other kinds if that makes room."""
        world_size = key[1]
        room = self.placement.acquire(world_size)
        if room is None:
            idle = sorted((lane for lane in self.lanes.values() if lane.job_id is None),
                          key=lambda lane: lane.idle_since)
            if not idle or not self.placement.room_after(world_size, idle):
                return None
            for lane in idle:
                self._retire(lane)
                room = self.placement.acquire(world_size)
                if room is not None:
                    break
            if room is None:
                return None
        lane_id = f"g{next(self._ids)}"
        lane = self.placement.start_lane(lane_id, key, room, self.settings_for(key), on_result=self._lane_result,
                                         log=self.data_dir / "logs" / f"lane-{lane_id}.log")
        self.lanes[lane_id] = lane
        return lane

    def _retire(self, lane: Lane) -> None:
        """Stop an idle lane; its devices are free once it has stopped its groups (waited here:
        a job cannot take devices whose old processes still hold them)."""
        self.lanes.pop(lane.id, None)
        lane.stop()
        self.placement.release(lane)

    # -- results ---------------------------------------------------------------------------
    def _lane_result(self, lane: Lane, result: LaneResult) -> None:
        self._results.put(("lane", lane, result))
        self.wake()

    def _on_result(self, kind, *args) -> None:
        if kind == "built":
            job_id, job, record, own = args
            self.building.pop(job_id, None)
            if record is not None:
                self.lane_keys.pop(job_id, None)
                self.report(job_id, record, write=own)  # not own: the build pool wrote it (protocols.BuildPool)
            elif job is not None:
                self.store.set_job(job_id, job.to_json())
                self.store.set_state(job_id, JobState.READY, only_from=(JobState.BUILDING,))
            return
        lane, result = args
        if result.error is not None:
            self._lane_failed(lane, result)
            return
        if result.job_id:
            if result.cancelled:
                self.store.set_state(result.job_id, JobState.CANCELLED, note="cancelled while it ran")
            elif result.record is not None:
                self.report(result.job_id, result.record)
        if lane.job_id == result.job_id:
            lane.job_id = None
            lane.jobs_done += 1
            lane.idle_since = time.monotonic()

    def _lane_failed(self, lane: Lane, result: LaneResult) -> None:
        """A lane that failed or ended: its job runs again once elsewhere, then is an ``error``."""
        job_id = lane.job_id
        if self.lanes.pop(lane.id, None) is not None:
            lane.stop(grace=5.0)
            self.placement.release(lane)
        if not job_id:
            return
        lane.job_id = None
        attempts = self.store.attempts(job_id)
        if attempts < MAX_ATTEMPTS:
            self.store.requeue(job_id, result.error)  # its job's reruns say why, in the next run's record
            return
        planned = self.store.planned(job_id)
        if planned is not None:
            job, world_size = planned
            # What stopped its earlier runs, in its own words (a group's failure, or the service's
            # restart, which counts as a run too: a job that takes the service down is not rerun for ever).
            before = "; ".join(job.reruns or ()) or "unknown"
            reason = f"{result.error}; it ran {attempts} times (before: {before})"
            self.report(job_id, self._error_record(job, (job.backend, world_size), reason), write=True)


def _forget_before(starts_by_account: dict, since: float) -> None:
    """Drop the starts before ``since`` from each account's (oldest first), and the accounts left
    with none: what the fair share counts is the last window's."""
    for name, starts in list(starts_by_account.items()):
        while starts and starts[0] < since:
            starts.popleft()
        if not starts:
            del starts_by_account[name]
