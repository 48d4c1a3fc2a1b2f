"""Host side of ``pkb run``: the judge's ranks, a fresh candidate per job, the records.

A *launch* runs the jobs of one backend and world size on this node (docs/
architecture.md draws it). It starts the judge's processes once (one per rank;
they never import candidate code) and, for every job, a fresh set of candidate
processes that is thrown away with the job: nothing a candidate leaves in its
processes reaches another job, and a sticky CUDA error ends only its own job.
The next job's candidate processes start while the current job runs, so their
start-up (Python, torch, the CUDA context) is off the critical path. The
launcher itself conducts each job (:mod:`pkb_core.conduct.jobrun`), turns hangs,
crashes and errors into verdicts (:mod:`pkb_core.launch.ranks`) and is the only
process that writes records. The judge's group gets a c10d store served from
this process; a candidate group's store is served inside the candidate's own
sandbox, by a keeper process of its rank 0 (:mod:`pkb_core.keeper`), so
nothing a candidate asks of its store costs the launcher's time or memory.
"""
from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

from pkb_core.contracts.batch import LaunchSettings
from pkb_core.contracts.messages import Ready, Secret
from pkb_core.contracts.record import Record
from pkb_core.contracts.verdict import Verdict
from pkb_core.contracts.worker_settings import WorkerSettings
from pkb_core.launch.feed import JobFeed, ListFeed
from pkb_core.machine.device import device_environment
from pkb_core.machine.host_allocator import allocator_environment
from pkb_core.plugin.preload import preload_environment
from pkb_core.errors import PkbError, describe
from pkb_core.results.records import append_record, job_record
from pkb_core.plugin.reporter import Reporter

#: Seconds a group of worker processes may take to start (imports, CUDA context, store).
STARTUP_TIMEOUT_S = 180.0
#: Seconds the judge may take to answer a command that does not involve the candidate.
JUDGE_GRACE_S = 10.0


class Launch:
    """The jobs of one launch on this node (see the module docstring)."""

    def __init__(self, settings: LaunchSettings, reporter: Reporter | None = None, remote=None):
        from pkb_core.confine.lockdown import protect_from_peers
        from pkb_core.process.reaper import become_subreaper

        protect_from_peers()  # the process that holds the secret and writes the records
        become_subreaper()  # an orphan of anything this launch starts stays its child, and is reaped
        self.settings = settings
        #: The other nodes of a multi-node launch (:class:`pkb_core.launch.nodes.Conductor`), or None.
        self.remote = remote
        self.store_host = remote.host if remote is not None else "127.0.0.1"
        #: The fork server of the candidates and builders (:meth:`candidate_zygotes`, made at first use).
        self.zygotes = None
        #: The fork server of the reference backend, for window mode's reference groups (made at first use).
        self.reference_zygotes = None
        #: The fork server of the judge's ranks (made with the first judge group).
        self.judge_zygote = None
        #: The process the zygotes above are forked from, where they can be (:meth:`zygote_base`).
        self.base = None
        self._groups = 0
        self.reporter = reporter or Reporter()
        #: The records this launch made, in order.
        self.records: list[Record] = []
        self.run_dir = Path(settings.run_dir)
        self.launch_id = secrets.token_hex(4)
        self.secret = secrets.token_hex(16)
        #: The launch log: the zygotes' and the judge's output (made when the first of them starts, so
        #: a run whose compile phase left nothing to launch has none).
        self.log_path = self.run_dir / "logs" / f"launch-{self.launch_id}.log"
        self.machine = {}
        self._stores = {}
        #: This launch's shared-memory folders (:mod:`pkb_core.launch.scratch`).
        self.scratch = None
        self._uids: dict = {}  # candidate group -> its user (for the groups alive)
        #: The candidate group of the job running now (:meth:`cancel_current`).
        self.current = None

    def node_env(self, role: str, forwarded: dict, preload: bool = True) -> tuple[dict, WorkerSettings]:
        """The environment of this node's workers of ``role`` (this process's own,
        plus what the backend preloads) and their :class:`WorkerSettings` (pkb's
        settings for the launch, with ``forwarded``: the group's ``store``,
        ``store_token``, ``run_id``, ``scratch`` and ``sandbox_uid``; from node 0
        on other nodes). The rank fields are each process's own (set as it starts)."""
        settings = self.settings
        env = self.environment(role, preload)
        shm_dir = None
        uid = forwarded.get("sandbox_uid")
        if forwarded.get("scratch") and forwarded.get("run_id"):  # the group's own shared-memory folder
            from pkb_core.launch.scratch import Scratch

            if self.scratch is None or self.scratch.path != forwarded["scratch"]:
                self.scratch = Scratch(forwarded["scratch"])
            from pkb_core.cache import judge_triton_dir

            shm_dir = self.scratch.group(forwarded["run_id"], uid,
                                         seed=judge_triton_dir() if role != "judge" else None)
        worker = WorkerSettings(
            role=role, world_size=settings.world_size, local_world_size=settings.nproc, device_type=settings.device,
            store=forwarded["store"], store_token=forwarded.get("store_token", ""),
            store_timeout=float(os.environ.get("PKB_STORE_TIMEOUT", "600")), run_dir=str(self.run_dir),
            run_id=forwarded.get("run_id", ""), shm_dir=shm_dir, sandbox_uid=uid, backend=settings.backend,
            custom_kernels=settings.custom_kernels, backend_options=settings.options)
        return env, worker

    def environment(self, role: str, preload: bool = True) -> dict:
        """The environment of this node's processes of ``role`` (see :meth:`node_env`)."""
        from pkb_core.process.environment import allowed_environment

        settings = self.settings
        # A candidate's processes (and the zygote they start from) run solution code: only the
        # variables they need, never the launcher's tokens or keys.
        env = dict(allowed_environment(os.environ, settings.environment) if role == "candidate" else os.environ,
                   PYTHONUNBUFFERED="1")
        if role == "candidate" and preload:
            env.update(preload_environment(settings.preload))
        if role == "judge":
            from pkb_core.cache import judge_triton_dir

            # pkb's own kernels as the judge compiles them, in a cache of their own: what each
            # candidate group's cache starts with (Scratch.group's seed), and nothing else.
            env["TRITON_CACHE_DIR"] = str(judge_triton_dir())
        for name, value in {**device_environment(settings.device), **allocator_environment()}.items():
            env.setdefault(name, value)
        return env

    def candidate_zygotes(self):
        """This launch's candidate fork server (:class:`pkb_core.launch.zygotes.Zygotes`), started
        at the first call: the compile phase's builders and every job's candidates come from it."""
        from pkb_core.launch.zygotes import Zygotes

        if self.zygotes is None:
            self.zygotes = Zygotes(range(self.settings.nproc), self.settings.backend,
                                   env=self.environment("candidate"), log_path=self.log_path,
                                   startup_s=STARTUP_TIMEOUT_S, base=self.zygote_base())
        return self.zygotes

    def zygote_base(self):
        """This launch's :class:`pkb_core.launch.zygotes.ZygoteBase`, started at the first call: one
        Python importing torch for the launch's zygotes, the judge's included, instead of one each.
        Its environment is the candidates' without the backend's preload."""
        from pkb_core.launch.zygotes import ZygoteBase

        if self.base is None:
            self.base = ZygoteBase(env=self.environment("candidate", preload=False), log_path=self.log_path)
        return self.base

    def builder_starter(self):
        """How this launch's compile phase starts builders
        (:attr:`BuildPhase.starter <pkb_core.compile.phase.BuildPhase.starter>`): forked by the
        launch's candidate zygote, started at the first build (a launch that builds nothing starts
        none before its first job)."""
        return self._fork_builder

    def _fork_builder(self, request: bytes, log, reply_fd: int, environment: dict, containment):
        """One builder forked by the launch's candidate zygote (a build starts from the state its
        candidates start from, and no Python of its own is started for it)."""
        from pkb_core.launch.zygotes import fork_builder

        zygotes = self.candidate_zygotes()
        return fork_builder(zygotes.zygote, request, log, reply_fd, environment, containment,
                            time.monotonic() + zygotes.startup_s)

    def stop_zygotes(self) -> None:
        """Stop this launch's fork servers (done at the end of :meth:`run`; for a launch whose
        compile phase left it nothing to run)."""
        for name in ("zygotes", "reference_zygotes", "judge_zygote", "base"):  # the base last: it forked the others
            zygotes = getattr(self, name)
            if zygotes is not None:
                zygotes.stop()
                setattr(self, name, None)

    def _forwarded(self, store, run_id: str = "", uid: int | None = None) -> dict:
        """A group's part of its workers' settings, the same on every node."""
        from pkb_core.launch.scratch import Scratch

        if self.scratch is None:
            self.scratch = Scratch.for_launch(self.launch_id)
        return {"store": store.address, "store_token": getattr(store, "token", ""), "run_id": run_id,
                "scratch": self.scratch.path, "sandbox_uid": uid}

    def job_log(self, run_id: str) -> Path:
        """Where a candidate group's standard output and error go (never the launch log)."""
        return self.run_dir / "logs" / f"job-{run_id}.log"

    def _sandbox_uid(self) -> int | None:
        """A user of its own for a new candidate group (None where this
        process cannot give one: not root; the records then list the gap)."""
        from pkb_core.confine.sandbox import can_switch_user, new_sandbox_uid

        return new_sandbox_uid(set(self._uids.values())) if can_switch_user() else None

    def _start(self, role: str, run_id: str = ""):
        from pkb_core.launch.ranks import RankGroup
        from pkb_core.keeper.listener import KeeperSocket
        from pkb_core.launch.stores import JudgeStore
        from pkb_core.launch.zygotes import JudgeZygote

        settings = self.settings
        containment = None
        if role == "judge":
            store = JudgeStore(settings.world_size, self.store_host, STARTUP_TIMEOUT_S)
        else:
            containment, store = self._contain(run_id, lambda: KeeperSocket(
                self.store_host, unix=self.remote is None and settings.custom_kernels))
        if role == "judge":  # names the judge's shared-memory heap segments (CPU), apart from any candidate's
            run_id = f"{self.launch_id}-judge{self._groups + 1}"
        uid = self._sandbox_uid() if role == "candidate" else None
        forwarded = self._forwarded(store, run_id, uid)
        env, worker = self.node_env(role, forwarded)
        local_ranks = range(settings.nproc)  # this node holds ranks 0 .. nproc-1
        if role == "judge":
            if self.judge_zygote is None:
                self.log_path.parent.mkdir(parents=True, exist_ok=True)
                self.judge_zygote = JudgeZygote(env=env, log=open(self.log_path, "ab"), startup_s=STARTUP_TIMEOUT_S,
                                                base=self.zygote_base())
            workers = self.judge_zygote.fork_workers(worker, local_ranks)
        else:
            try:
                workers = self.candidate_zygotes().fork_workers(worker, log_path=self.job_log(run_id), keeper_fds=store.fds(),
                                                    containment=containment)
            except BaseException:
                containment.close()  # no group will: its processes (if any started) end with it
                raise
            finally:
                store.handed_over()
        self._groups += 1
        group_id = f"{role}{self._groups}"
        if self.remote is not None:
            workers += self.remote.start_group(role, group_id, forwarded,
                                               deadline=time.monotonic() + STARTUP_TIMEOUT_S)
        group = RankGroup(role, workers, label="judge rank" if role == "judge" else "rank",
                          remote=self.remote, group_id=group_id, containment=containment)
        group.shm_name = run_id
        self._watch(group, uid)
        if role == "judge":
            self._stores[id(group)] = store  # served as long as the group lives
        else:
            group.keeper_report = store.report_read
        if role == "judge":
            for worker in group.workers:
                worker.send(Secret(secret=self.secret).to_json())
        return group

    def _contain(self, run_id: str, make_store, job=None):
        """A new candidate group's containment (:mod:`pkb_core.process.containment`: its cgroup with
        the launch's limits, a network of its own on one node, its log cap) and its store keeper's
        socket, made inside that network. ``job``: the job it is for, where known (its memory)."""
        from pkb_core.machine import limits
        from pkb_core.process.containment import contain

        settings = self.settings
        containment, store = contain(run_id, memory_bytes=self._memory_mib(job) << 20,
                                     max_processes=limits.max_processes(settings.max_processes), ranks=settings.nproc,
                                     network=self.remote is None, make=make_store,
                                     log_cap=limits.log_cap_bytes(settings.log_cap_mib), device=settings.device)
        if self.remote is not None:  # its ranks reach their peers over the machine's network
            containment.gaps += ["a network of its own (a multi-node launch): local services are reachable",
                                 "cgroups on the other nodes: their ranks are found through /proc"]
        return containment, store

    def _memory_mib(self, job=None) -> int:
        """A group's memory limit (:func:`pkb_core.machine.limits.memory_mib`): ``--memory-limit``,
        else the machine's share for a group of this launch's size, or ``job``'s need where it is
        known and larger (its inputs' size, :mod:`pkb_core.problem.footprint`)."""
        import json

        from pkb_core.machine import limits

        settings = self.settings
        if settings.memory_mib:
            return settings.memory_mib
        inputs = None
        if job is not None:
            from pkb_core.problem.footprint import input_bytes

            inputs = input_bytes(job.problem_path, job.size, settings.world_size, job.dtype,
                                 json.dumps(job.params, sort_keys=True, default=str))
        return limits.memory_mib(settings.nproc, gpus=limits.node_gpus(settings.device), input_bytes=inputs)

    def _fit_memory(self, group, job) -> None:
        """Raise ``group``'s memory limit to ``job``'s need where that is more than the limit it
        started with: a group is started before its job is known (the next job's, during this one)."""
        cgroup = group.containment.cgroup if group.containment is not None else None
        if cgroup is None or self.settings.memory_mib:
            return
        wanted = self._memory_mib(job) << 20
        if wanted > cgroup.limits.get("memory_bytes", 0):
            group.containment.gaps += cgroup.set_limits(memory_bytes=wanted, pids=None)

    def fork_reference_side(self, job, run_id: str):
        """A group that runs the problem's reference as a solution, for window mode
        (:mod:`pkb_core.conduct.window_rounds`): forked by zygotes of the reference backend,
        locked down, set up and timed exactly as a candidate group is, so the two sides of a
        speedup differ only in the code they call. Returned forked, its processes starting (not
        waited for); :meth:`set_up_reference_side` makes it ready; the caller stops it
        (:meth:`stop_group`), however far it got (:class:`EarlyReferenceSide`)."""
        import attrs

        from pkb_core.launch.ranks import RankGroup
        from pkb_core.keeper.listener import KeeperSocket
        from pkb_core.launch.zygotes import Zygotes

        settings = self.settings
        # Held like a candidate group (its cgroup, network and log cap): the two sides of a speedup
        # are frozen, measured and ended the same way. The reference backend's real process group.
        containment, store = self._contain(run_id, lambda: KeeperSocket(self.store_host, unix=False), job)
        uid = self._sandbox_uid()
        forwarded = self._forwarded(store, run_id, uid)
        env, worker = self.node_env("candidate", forwarded, preload=False)
        worker = attrs.evolve(worker, backend="reference", custom_kernels=False, backend_options={})
        if self.reference_zygotes is None:
            self.reference_zygotes = Zygotes(range(settings.nproc), "reference", env=env, log_path=self.log_path,
                                             startup_s=STARTUP_TIMEOUT_S, base=self.zygote_base())
        try:
            workers = self.reference_zygotes.fork_workers(worker, log_path=self.job_log(run_id),
                                                          keeper_fds=store.fds(), containment=containment)
        except BaseException:
            containment.close()
            raise
        finally:
            store.handed_over()
        self._groups += 1
        group = RankGroup("candidate", workers, label="reference rank", group_id=f"reference{self._groups}",
                          containment=containment)
        group.shm_name = run_id
        group.keeper_report = store.report_read
        self._watch(group, uid)
        return group

    def set_up_reference_side(self, group, job, run_id: str):
        """A reference group :meth:`fork_reference_side` forked, once its processes are ready: set
        up with the problem's reference as its solution, and frozen."""
        import attrs

        from pkb_core.contracts import commands_candidate as candidate

        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        self._ready(group)
        # The problem's own file, its reference named as the solution: the same compile path as any.
        shim = os.path.join(self.scratch.path, run_id, "reference_solution.py")
        text = Path(job.problem_path).read_text()
        fd = os.open(shim, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w") as out:
            out.write(text + "\n\nsolution = reference  # pkb: the reference side of window mode\n")
        answers = group.command(candidate.Setup(job=attrs.evolve(job, solution=shim)), deadline=deadline)
        failed = next((a.reason for a in answers if a.verdict), None)
        if failed:
            raise RuntimeError(f"the reference could not be set up as a timed side: {failed}")
        group.freeze()
        return group

    def stop_group(self, group) -> None:
        """Stop a group this launch started for a job (a window mode reference group)."""
        self._stop(group)

    def _ready(self, group) -> None:
        if not group.ready:
            answers = group.gather("ready", Ready, deadline=time.monotonic() + STARTUP_TIMEOUT_S)
            group.ready = True
            if group.containment is not None:  # each rank in its cgroup and network, or a gap on record
                group.containment.verify([w.proc.pid for w in group.workers if w.proc.pid is not None])
            # Said before any solution code ran in the group: the one source of a job's
            # `unsupported` that a candidate may report (the backend cannot start here).
            group.unsupported = next((a.unsupported for a in answers if a.unsupported), None)
            if group.role == "judge" and answers[0].machine:
                self.machine = answers[0].machine
            if group.role == "judge":
                self._stores[id(group)].close_door()  # every judge rank is connected: nobody else may

    def _stop(self, group, **kwargs) -> None:
        if group is not None:
            from pkb_core.launch.scratch import sweep_owned
            from pkb_core.process.reaper import reap_orphans

            group.stop(**kwargs)
            self._stores.pop(id(group), None)
            if self.scratch is not None:
                self.scratch.remove_group(group.shm_name)
            uid = self._uids.pop(id(group), None)
            if uid is not None:
                sweep_owned(uid)  # what its user left in /dev/shm itself
            if group.containment is not None:
                group.containment.close()  # after its files: their memory was charged to it
            self._unwatch(group, uid)
            reap_orphans()

    def _watch(self, group, uid) -> None:
        """Tell this process's warden (:mod:`pkb_core.process.warden`) what of ``group`` must not
        outlive the launch however it ends: its user's files, and its sessions where no cgroup
        holds it (the cgroup tree is the warden's already)."""
        from pkb_core.process.warden import warden

        if uid is not None:
            self._uids[id(group)] = uid
            warden().watch(user=uid)
        if group.containment is None or group.containment.cgroup is None:
            for pid in group.pids:
                warden().watch(session=pid)

    def _unwatch(self, group, uid) -> None:
        from pkb_core.process.warden import warden

        if uid is not None:
            warden().forget(user=uid)
        if group.containment is None or group.containment.cgroup is None:
            for pid in group.pids:
                warden().forget(session=pid)

    def run(self, pending) -> list[Record]:
        """Run ``pending`` in order (until an observer stops the run); the records made.

        :param pending: a list of jobs, or a :class:`JobFeed` (the reward service's lanes,
            :mod:`pkb_core.serve.lane_process`: the launch stays warm between jobs, its judge's
            ranks, zygotes and the next job's candidate group waiting for the next job).
        """
        from pkb_core.contracts.outcome import JobEnded

        feed = pending if isinstance(pending, JobFeed) else ListFeed(pending)
        judges = spare = None
        index = -1
        finished = False
        try:
            while not self.reporter.stopped:  # between jobs: the one that asked has its record
                job = feed.next_job()
                if job is None:
                    break
                index += 1
                if spare is not None and spare.start_failed:
                    self._stop(spare)  # its failure was its own, never the job before's: start afresh
                    spare = None
                run_id = spare.run_id if spare is not None else self._job_run_id(index)
                candidates = spare or self._start("candidate", run_id)
                candidates.run_id, spare = run_id, None
                self._fit_memory(candidates, job)
                if judges is None:
                    judges = self._start("judge")
                try:
                    self._ready(judges)
                except JobEnded as ended:
                    self._stop(judges, stacks=True)
                    judges = None
                    self._record(job, Verdict.ERROR, f"the judge's processes did not start: {ended.reason} "
                                               f"(launch log {self.log_path})", started=time.time())
                    self._stop(candidates)
                    continue
                if feed.more_expected():
                    spare_id = self._job_run_id(index + 1)
                    spare = self._start("candidate", spare_id)
                    spare.run_id, spare.start_failed = spare_id, None
                self.current = candidates
                feed.started(self)
                try:
                    judges = self._run_one(job, index, run_id, judges, candidates, spare)
                finally:
                    self.current = None
            finished = True
        finally:
            self._stop(spare)
            if judges is not None:
                # Politely only after the last job: on Ctrl-C or SIGTERM the judge may be inside a
                # command (a window batch) that would hold an exit for the whole grace (10 s seen).
                self._stop(judges, deadline=time.monotonic() + JUDGE_GRACE_S if finished else None)
            self.stop_zygotes()
            if self.scratch is not None:
                self.scratch.remove()
        return self.records

    def cancel_current(self) -> bool:
        """Kill the running job's candidate processes (from another thread): the job ends
        at once, ``cancelled``, and the launch goes on with the next. False when no job runs."""
        group = self.current
        if group is None:
            return False
        group.cancel("cancelled while it ran")
        return True

    def _job_run_id(self, index: int) -> str:
        """A job's name for its shared-memory files and heap segments. The random
        part keeps a candidate from knowing (and planting files under) the names
        of any other job, its successors included."""
        return f"{self.launch_id}-j{index}-{secrets.token_hex(8)}"

    def _spare_ready(self, spare) -> None:
        """Wait for the next job's candidate group before timing starts (so its
        start does not disturb the timed rounds). Its failure is the next job's,
        not this one's: noted, and that job starts a fresh group."""
        from pkb_core.contracts.outcome import JobEnded

        if spare is None or spare.start_failed:
            return
        try:
            self._ready(spare)
        except JobEnded as ended:
            spare.start_failed = ended

    def _run_one(self, job, index, run_id, judges, candidates, spare):
        """One job; returns the judge group to go on with (a new one if it failed)."""
        from pkb_core.conduct.jobrun import JobRun, JudgeFailed, Parcels, timeout_reason
        from pkb_core.conduct.second_reference import second_reference_on
        from pkb_core.contracts.outcome import JobEnded, Outcome
        from pkb_core.plugin.multicast import multicast_claim_believable
        from pkb_core.problem.contract import read_spec

        started = time.time()
        parcels = Parcels(os.path.join(self.scratch.path, run_id))
        outcome = Outcome()
        run = reference = reference_b = None
        try:
            try:
                self._ready(candidates)
                ready_s = round(time.time() - started, 3)
            except JobEnded as ended:
                raise JobEnded(Verdict.ERROR, f"the candidate's processes did not start: {ended.reason} "
                                        f"(its log {self.job_log(run_id)})") from None
            problem = read_spec(job.problem_path).load()
            candidates.multicast_believed = multicast_claim_believable(job.solution, self.settings.device)
            reference = EarlyReferenceSide(self, job, f"{run_id}-ref", candidates)
            if second_reference_on():  # a diagnostic: a second group of the reference (PKB_SECOND_REFERENCE)
                reference_b = EarlyReferenceSide(self, job, f"{run_id}-ref2", candidates)

            def before_timing():
                # Nothing still starting on this node once timing begins; each wait in the record's tally.
                started = time.monotonic()
                self._spare_ready(spare)
                run.tally("next job's group starting", started)
                started = time.monotonic()
                reference.set_up()
                if reference_b is not None:
                    reference_b.set_up()
                run.tally("reference group set-up", started)

            run = JobRun(job, problem, judges, candidates, parcels=parcels, settings=self.settings,
                         deadline=time.monotonic() + self.settings.job_timeout,
                         before_timing=before_timing, reference_side=reference.group,
                         reference_side_b=reference_b.group if reference_b is not None else None)
            outcome = run.run()
            outcome.phases = {"ready": ready_s, **outcome.phases}
        except JobEnded as ended:
            outcome.verdict, outcome.reason = ended.verdict, ended.reason
        except JudgeFailed as failed:
            if failed.out_of_time:
                outcome.verdict = Verdict.TIMEOUT
                outcome.reason = timeout_reason(self.settings.job_timeout,
                                                f"the judge was still at work for it: {failed.ended.reason}",
                                                job=job, trials_passed=run.outcome.trials if run is not None else 0)
            else:
                outcome.verdict = Verdict.ERROR
                outcome.reason = f"the judge's processes failed ({failed.ended.reason}); launch log {self.log_path}"
            self._stop(judges, stacks=True)
            judges = None
        except Exception as exc:  # noqa: BLE001 - whatever went wrong, it is this job's verdict, not the run's end
            outcome.verdict = Verdict.ERROR
            outcome.reason = f"pkb could not conduct the job: {describe(exc)} (launch log {self.log_path})"
            self._stop(judges, stacks=True)  # its state is unknown: the next job gets a fresh judge
            judges = None
        except BaseException:  # Ctrl-C, SIGTERM: no record, and its processes end at once, not politely
            outcome.verdict = Verdict.ERROR
            raise
        finally:
            self._contained_outcome(candidates, outcome, run_id)
            stopping = time.time()
            for side in (reference, reference_b):
                if side is not None:
                    side.stop()
            healthy = outcome.verdict not in (Verdict.TIMEOUT, Verdict.CRASH, Verdict.ERROR, Verdict.CANCELLED)
            self._stop(candidates, stacks=outcome.verdict == Verdict.TIMEOUT,
                       deadline=time.monotonic() + JUDGE_GRACE_S if healthy else None)
            if outcome.verdict == Verdict.TIMEOUT and self.job_log(run_id).exists():
                outcome.reason = f"{outcome.reason} (where each rank was: the Python stacks in {self.job_log(run_id)})"
            parcels.remove()
            outcome.phases["stop"] = round(time.time() - stopping, 3)
        if candidates.cancelled and outcome.verdict != Verdict.CANCELLED:
            # Killed from outside, whatever that looked like from here (a group that did not
            # start, a dead rank): the job was stopped, nothing was found about the solution.
            outcome.verdict, outcome.reason = Verdict.CANCELLED, candidates.cancelled
        if self.settings.custom_kernels and outcome.verdict in (Verdict.FLAGGED, Verdict.FAIL, Verdict.ERROR):
            from pkb_core.candidate.source_hints import collective_hint

            hint = collective_hint(job.solution)
            if hint:
                outcome.reason = f"{outcome.reason} [hint: {hint}]"
        self._record(job, outcome.verdict, outcome.reason, started=started, outcome=outcome)
        if judges is not None and not judges.alive():
            self._stop(judges)
            judges = None
        return judges

    def _contained_outcome(self, candidates, outcome, run_id: str) -> None:
        """What the group's containment adds to its job's outcome: the limit the kernel enforced
        (an OOM kill is a ``crash`` that says so, whatever it looked like from outside), the
        protections that could not be made (``lockdown_gaps``), a log that reached its cap."""
        from pkb_core.process.log_cap import capped

        containment = candidates.containment
        if containment is None:
            return
        outcome.lockdown = sorted(set(outcome.lockdown) | set(containment.gaps))
        hit = containment.limit_hit()
        if hit and outcome.verdict != Verdict.PASS:
            if hit.startswith("killed by the memory limit") and outcome.verdict != Verdict.FLAGGED:
                outcome.verdict = Verdict.CRASH
            outcome.reason = f"{hit} ({outcome.reason})" if outcome.reason else hit
        if capped(self.job_log(run_id)):
            cap = containment.log_cap_per_rank * self.settings.nproc >> 20
            outcome.notes.append(f"its log reached the cap of {cap} MiB; the rest of its output was dropped")

    def _record(self, job, verdict, reason, *, started, outcome=None):
        details = {}
        if outcome is not None:
            details = dict(timing=outcome.timing, trials=outcome.trials, barriers=outcome.barriers or None,
                           lockdown_gaps=tuple(outcome.lockdown) or None, phase_seconds=outcome.phases,
                           finding=outcome.finding, running=outcome.running, notes=tuple(outcome.notes) or None)
        record = job_record(job, self.settings.world_size, verdict, reason,
                            seconds=time.time() - started, machine=self.machine, **details)
        try:
            append_record(self.run_dir, record)
        except PkbError as exc:  # a value from the candidate's answers that no record can hold
            record = job_record(job, self.settings.world_size, Verdict.ERROR,
                                f"the job's record could not be written: {describe(exc)}",
                                seconds=time.time() - started, machine=self.machine)
            append_record(self.run_dir, record)
        self.records.append(record)
        self.reporter.job(record)


class EarlyReferenceSide:
    """Window mode's reference group of one job (:meth:`Launch.fork_reference_side`), forked as
    the job begins so that its processes start while the candidate is set up and tried, and set
    up just before timing begins (nothing is still starting on the node once a batch is timed).
    On 2xH200 a window-mode job was 10-16 s at the default ``--iters``, the group's start inside
    its timing. A job that times no window mode forks none; one that ends before timing stops
    the group it forked."""

    def __init__(self, launch: Launch, job, run_id: str, candidates):
        self.launch, self.job, self.run_id = launch, job, run_id
        self.forked = self.ready = self.failed = None
        timed = job.mode == "eval" and job.measure_perf and "window" in job.timing_modes
        if timed and getattr(candidates, "remote", None) is None:
            try:
                self.forked = launch.fork_reference_side(job, run_id)
            except Exception as exc:  # noqa: BLE001 - said where window mode asks for the group
                self.failed = exc

    def set_up(self) -> None:
        """Wait for the forked group and set it up (a failure is kept for :meth:`group`)."""
        if self.forked is None or self.ready is not None or self.failed is not None:
            return
        try:
            self.ready = self.launch.set_up_reference_side(self.forked, self.job, self.run_id)
        except Exception as exc:  # noqa: BLE001 - said where window mode asks for the group
            self.failed = exc

    def group(self):
        """The group, ready and set up (forked now where it was not as the job began); raises
        what its start raised."""
        if self.failed is not None:
            raise self.failed
        if self.forked is None:
            self.forked = self.launch.fork_reference_side(self.job, self.run_id)  # kept for stop()
        self.set_up()
        if self.failed is not None:
            raise self.failed
        return self.ready

    def stop(self) -> None:
        """Stop the group, however far it got."""
        if self.forked is not None:
            self.launch.stop_group(self.forked)
