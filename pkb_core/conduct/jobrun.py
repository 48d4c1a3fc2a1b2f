"""One job, as the launcher conducts it: the judge's ranks and a fresh candidate's.

The launcher is the only process that sees both sides. Per trial it has the
judge draw the inputs, hands them to the candidate as a parcel, lets the
candidate call the solution once, freezes it, and has the judge run the
reference and compare what came back; the ranks' verdicts are combined here
(the lowest rank's finding wins). Timing alternates the two sides in rounds
timed by the launcher's own clock (:mod:`pkb_core.conduct.timed_rounds`), checks
everything the timed calls produced and applies the physics floor. Nothing the
candidate sends is used without checking: its skeletons are read by the judge
under :data:`pkb_core.harness.parcel.UNTRUSTED`; the times it reports about
itself are an untrusted diagnostic, used for nothing.
"""
from __future__ import annotations

import contextlib
import os
import random
import secrets
import time
from pathlib import Path

import attrs

from pkb_core.contracts import commands_candidate as candidate
from pkb_core.contracts import commands_judge as judge
from pkb_core.contracts.job import Job
from pkb_core.contracts.messages import Parcel, ProfileRequest
from pkb_core.contracts.timing import Timing
from pkb_core.contracts.verdict import Verdict
from pkb_core.conduct.answers import combine, slot_sizes
from pkb_core.conduct.staggered_trials import late_rank, staggered_note
from pkb_core.contracts.outcome import JobEnded, Outcome


class Parcels:
    """Names of one job's parcel files, and their removal. They live in the
    job's own shared-memory folder (:mod:`pkb_core.launch.scratch`), which only
    the job's candidate user and the judge can enter."""

    def __init__(self, folder: str):
        self.prefix = os.path.join(folder, "pkb-parcel-")

    def paths(self, name: str, nproc: int) -> list[str]:
        return [f"{self.prefix}{name}-r{rank}" for rank in range(nproc)]

    def discard(self, *paths: list[str]) -> None:
        """Remove parcels once read. A candidate's exports are charged to its job's memory limit
        (tmpfs pages belong to their writer's cgroup), and a timed mode writes one set a round:
        kept to the job's end, an honest job at the default size on GPUs passed 8 GiB."""
        for path in (p for group in paths for p in group):
            try:
                os.unlink(path)
            except OSError:
                pass

    def remove(self) -> None:
        folder, stem = os.path.split(self.prefix)
        if not os.path.isdir(folder):
            return  # gone with the job's folder
        for entry in os.listdir(folder):
            if entry.startswith(stem):
                try:
                    os.unlink(os.path.join(folder, entry))
                except OSError:
                    pass


#: Seconds the launcher watches a candidate's processes after each answer (work left running
#: is flagged), and so the quiet stretch before every timed batch (:meth:`JobRun.settle`). Only
#: the candidate's answers were followed by one, so in rounds where the candidate went first the
#: reference's batch alone started after 20 ms of idle, and ran slower. The reference against
#: itself (CPU, problem 1, latency mode, 240 calls a side) read a median 1.26x for the candidate
#: in nine runs (0.92-1.36) before, 1.13x in six (1.06-1.33) with the stretch before both sides:
#: part of that bias, not all of it (docs/trust.md).
QUIET_S = 0.02


#: Seconds a window batch's ranks may finish apart (at least; or four of the batch's average
#: windows, if longer) before the launcher ends the batch of those still in it
#: (:func:`_drain_when_a_rank_leaves`): the ranks of a collective finish within milliseconds.
PEER_GRACE_S = 5.0


def _drain_when_a_rank_leaves(group, requests, board: str | None = None):
    """A :meth:`pkb_core.launch.ranks.Ranks.gather` watch for a window batch of ``group``: once one
    of its ranks has died, or has marked its whole batch done (it finished, or raised and abandoned
    the batch) while another has not for :data:`PEER_GRACE_S`, the batch is ended: the judge's
    ``board`` (its timekeepers' meeting file on this node, in the judge's own folder:
    :func:`pkb_core.harness.board.stop_board_file`) says so, and every rank's gate region is marked
    done up to the batch's last call (:func:`pkb_core.harness.gates.abandon_region_file`; host
    engine regions, which are files: the way to a timekeeper with no board, one rank on its node).
    The timekeepers then end the batch now instead of waiting for a side that will not finish
    until the batch's deadline (~100 s of the next job's time on CPU: a rank that raised left its
    peer in the collective for good). The regions are the candidate's files, which a dying rank
    can unlink or replace first; the board is not. The group's own answers then say who died or
    raised. Nothing here gives a candidate a reading it could not make alone: a side can write
    its own region's words itself (windows marked done before their work read under the judge's
    null, with no outputs for the checks), and a stopped batch's windows are not read at all."""
    from pkb_core.harness.gates import abandon_region_file, region_file_done
    from pkb_core.harness.board import stop_board_file

    started = time.monotonic()
    ends = [(request.region.get("path"), request.epoch + len(request.skeletons)) for request in requests]
    windows = max(1, max(len(request.skeletons) for request in requests))
    first_done = []
    drained = []

    def drain():
        drained.append(True)
        if board:
            stop_board_file(board, max(end for _, end in ends))
        for path, end in ends:
            if path:
                abandon_region_file(path, end)

    def watch():
        if drained:
            return
        if any(worker.proc.poll() is not None for worker in group.workers):
            return drain()
        done = [bool(path) and region_file_done(path, end) for path, end in ends]
        if not any(done) or all(done):
            return
        now = time.monotonic()
        if not first_done:
            first_done.append(now)
        if now - first_done[0] > max(PEER_GRACE_S, 4 * (first_done[0] - started) / windows):
            drain()

    return watch


class JobRun:
    """Conducts one job between ``judges`` (the launch's) and ``candidates`` (its own).

    :param deadline: ``time.monotonic()`` by which the job must be done.
    """

    def __init__(self, job: Job, problem, judges, candidates, *, parcels: Parcels,
                 deadline: float, settings, before_timing=None, reference_side=None, reference_side_b=None):
        self.job = job
        #: Starts window mode's reference group (the launcher's; None: window mode unavailable).
        self.reference_side = reference_side
        #: That group, once started (the launcher stops it with the job).
        self.reference_group = None
        #: The same for the second reference group of ``PKB_SECOND_REFERENCE=on``
        #: (:mod:`pkb_core.conduct.second_reference`; None: none).
        self.reference_side_b = reference_side_b
        self.reference_group_b = None
        self.before_timing = before_timing
        self.problem = problem
        self.judges = judges
        self.candidates = candidates
        self.parcels = parcels
        self.deadline = deadline
        self.settings = settings
        self.nproc = len(judges.workers)
        self.set_bytes = 0
        self.outcome = Outcome()
        self.rng = random.Random()
        #: Where the job is, and the last command sent (for a timeout's or a crash's feedback).
        self.stage = "starting"
        self.command = ""
        #: When the last command's answers arrived (:meth:`settle`).
        self.answered_at = 0.0

    def settle(self) -> None:
        """Wait until :data:`QUIET_S` has passed since the last command's answers:
        called before each side's timed batch, so every batch follows the same
        quiet stretch, whichever side went before it."""
        time.sleep(max(0.0, QUIET_S - (time.monotonic() - self.answered_at)))

    def tally(self, name: str, started: float) -> None:
        """Add the seconds since ``started`` to the record's per-command tally."""
        ops = self.outcome.phases.setdefault("commands", {})
        ops[name] = round(ops.get(name, 0.0) + time.monotonic() - started, 4)

    # -- what the round loops use (pkb_core.conduct.timed_rounds, window_rounds) ----------
    def ask_judge(self, request, watch=None) -> list:
        """Send ``request`` (or one per rank) to the judge's ranks; their typed answers
        (``watch``: :meth:`pkb_core.launch.ranks.Ranks.gather`'s)."""
        return self.time_judge(request, watch)[0]

    def ask_candidate(self, request) -> list:
        """Send ``request`` (or one per rank) to the candidate's ranks; their typed answers
        (read once with the command's answer class: one that does not fit ends the job)."""
        return self.time_candidate(request)[0]

    def time_judge(self, request, watch=None) -> tuple[list, float]:
        """:meth:`ask_judge`, and the launcher's clock around it: ``(answers, milliseconds from
        sending the command to the last rank's answer)``."""
        op = (request[0] if isinstance(request, list) else request).OP
        self.command = f"the judge's `{op}`"
        try:
            started = time.monotonic()
            answers = self.judges.command(request, deadline=self.deadline, watch=watch)
            self.answered_at = time.monotonic()
            self.tally(f"judge {op}", started)
            return answers, (self.answered_at - started) * 1e3
        except JobEnded as ended:
            raise JudgeFailed(ended, out_of_time=self._out_of_time(ended)) from None

    def _out_of_time(self, ended: JobEnded) -> bool:
        """Whether ``ended`` is the job's own time running out (a wait that reached the job's
        deadline), not a failure of whoever was being waited for."""
        return ended.verdict == Verdict.TIMEOUT and time.monotonic() >= self.deadline

    def time_candidate(self, request) -> tuple[list, float]:
        """:meth:`ask_candidate`, and the launcher's clock around it: ``(answers, milliseconds
        from sending the command to the last rank's answer)``, the one time pkb trusts. The
        watch for work left running comes after the clock stops."""
        op = (request[0] if isinstance(request, list) else request).OP
        self.command = f"the solution's `{op}`"
        try:
            started = time.monotonic()
            answers = self.candidates.command(request, deadline=self.deadline)
            self.answered_at = time.monotonic()
            wall_ms = (self.answered_at - started) * 1e3
            self.tally(f"candidate {op}", started)
            if op in (candidate.Trial.OP, candidate.TimeCandidate.OP, candidate.WarmCandidate.OP):
                started = time.monotonic()
                busy = self.candidates.busy_after_answer(QUIET_S)
                self.tally("host probe", started)
                if busy:
                    rank, used = busy[0]
                    raise JobEnded(Verdict.FLAGGED, f"rank {rank}: its processes used {used:.0f} ms of CPU right "
                                              f"after its {op} answer: the solution left work running on the host "
                                              "(a thread or a child process), outside what is checked and timed")
            return answers, wall_ms
        finally:
            self.candidates.freeze()

    def folder_of(self, group) -> str:
        """A group's own shared-memory folder (its processes' scratch; the judge's holds its
        timekeepers' files), beside the job's in the launch's."""
        return os.path.join(os.path.dirname(os.path.dirname(self.parcels.prefix)), group.shm_name)

    def side_windows(self, group, requests, open_request):
        """A window batch of ``group`` (the candidate's, or window mode's reference group): its
        ranks get ``requests`` (their calls queue behind the gates), then the judge's ranks
        ``open_request`` (their timekeepers open one window a call); the timekeepers' times and
        the group's answers. The group is frozen again after; the candidate is watched for work
        left running, as after any timed answer."""
        started = time.monotonic()
        who = "the solution's" if group is self.candidates else "the reference group's"
        self.command = f"{who} `windows`"
        try:
            command = group.send(requests)
            from pkb_core.harness.board import board_path

            board = board_path(self.folder_of(self.judges), open_request.board, open_request.side) \
                if open_request.board else None
            times = self.ask_judge(open_request, watch=_drain_when_a_rank_leaves(group, requests, board))
            self.command = f"{who} `windows`"
            try:
                answers = group.gather(command.op, command.answer, deadline=self.deadline)
            except JobEnded as ended:
                if group is self.candidates:
                    raise
                if self._out_of_time(ended):
                    raise JobEnded(Verdict.TIMEOUT, f"window mode's reference group was in its windows: "
                                                    f"{ended.reason}") from None
                raise JobEnded(Verdict.ERROR, f"window mode's reference group (pkb's own) failed: {ended.reason}") \
                    from None
            self.answered_at = time.monotonic()
            self.tally(f"{'candidate' if group is self.candidates else 'reference group'} windows", started)
            busy = self.candidates.busy_after_answer(QUIET_S) if group is self.candidates else None
            if busy:
                rank, used = busy[0]
                raise JobEnded(Verdict.FLAGGED, f"rank {rank}: its processes used {used:.0f} ms of CPU right "
                                                "after its windows answer: the solution left work running on the host "
                                                "(a thread or a child process), outside what is checked and timed")
            return times, answers
        finally:
            group.freeze()

    def run(self) -> Outcome:
        try:
            self.stage = "setup (importing and compiling the solution)"
            with self._phase("setup"):
                self._setup()
            with self._phase("trials"):
                for trial in range(self.job.trials):
                    self.stage = f"trial {trial} of {self.job.trials} (one checked call)"
                    self._trial(trial)
                    self.outcome.trials = trial + 1
            if self.job.mode == "dryrun":
                self.outcome.verdict = Verdict.UNCHECKED
                self.outcome.reason = "--mode dryrun: the outputs were saved, not compared with the reference's"
            if self.job.mode == "eval" and self.job.measure_perf:
                if self.before_timing:
                    self.before_timing()  # nothing else starting up on this node while it times
                self.stage = "timing (--measure-perf: batches of calls on fresh inputs)"
                with self._phase("timing"):
                    self._timing()
        except JobEnded as ended:
            self.outcome.verdict, self.outcome.reason = ended.verdict, ended.reason
            self.outcome.finding = ended.finding
            if ended.verdict in (Verdict.TIMEOUT, Verdict.CRASH, Verdict.ERROR):
                self.outcome.running = f"{self.stage}, command {self.command or '(none yet)'}"
            if ended.verdict == Verdict.TIMEOUT:
                self.outcome.reason = timeout_reason(self.settings.job_timeout, ended.reason, job=self.job,
                                                     trials_passed=self.outcome.trials)
            if self.outcome.trials < self.job.trials and ended.verdict in (Verdict.FAIL, Verdict.FLAGGED, Verdict.ERROR):
                trial = self.outcome.trials
                self.outcome.reason = f"trial {trial}: {ended.reason}" if self._in_trials else ended.reason
            if ended.verdict == Verdict.FLAGGED and self.outcome.trials == self.job.trials:
                # A flag says how the solution broke a rule, not whether it computes the right
                # answer: say that too (the record's `trials` counts the trials that passed).
                self.outcome.reason += f" (its outputs were correct in all {self.outcome.trials} checked trials)"
        finally:
            self.outcome.barriers = self.candidates.events.get("barrier", 0)
        return self.outcome

    @contextlib.contextmanager
    def _phase(self, name: str):
        started = time.monotonic()
        try:
            yield
        finally:
            self.outcome.phases[name] = round(time.monotonic() - started, 3)

    # -- the phases --------------------------------------------------------------
    def _setup(self):
        self._in_trials = False
        if self.candidates.unsupported:  # said when ready, before any solution code ran
            raise JobEnded(Verdict.UNSUPPORTED, self.candidates.unsupported)
        # A nonce of this job's: its inputs are drawn from it and the run secret together.
        self.ask_judge(judge.LoadJob(job=self.job, job_key=secrets.token_hex(16)))
        answers = self.ask_candidate(candidate.Setup(job=self.job))
        self.outcome.lockdown = sorted({gap for a in answers for gap in a.lockdown})
        for rank, answer in enumerate(answers):
            claimed = answer.verdict
            if not claimed:
                continue
            # The answer comes from the process the solution was just imported into: it may say
            # that the solution did not compile, never how the job ended. Nor that the job is
            # unsupported (not failing): only what pkb finds before any solution code runs says
            # that (the backend's start-up above, the compile phase's source check).
            reason = answer.reason
            if claimed == Verdict.UNSUPPORTED:
                raise JobEnded(Verdict.COMPILE_ERROR, f"rank {rank}: {reason} (reported once its code was imported: "
                                                      f"a compile error, not unsupported)")
            if claimed != Verdict.COMPILE_ERROR:
                raise JobEnded(Verdict.FLAGGED, f"rank {rank}: its setup answer claimed the verdict "
                                                f"{claimed[:40]!r} (a candidate may only report "
                                                f"{Verdict.COMPILE_ERROR.value})")
            raise JobEnded(Verdict.COMPILE_ERROR, f"rank {rank}: {reason}")
        self._in_trials = True

    def _trial(self, trial: int):
        inputs = self.parcels.paths(f"in{trial}", self.nproc)
        outputs = self.parcels.paths(f"out{trial}", self.nproc)
        skeletons = [a.skeleton for a in self.ask_judge([judge.DrawInputs(trial=trial, path=p) for p in inputs])]
        slots = slot_sizes(skeletons)
        self.set_bytes = max(self.set_bytes, sum(slots))
        late = late_rank(trial, self.nproc)
        answers = self.ask_candidate([candidate.Trial(skeleton=s, path=p, slots=slots, out_path=o, late_rank=late)
                                   for s, p, o in zip(skeletons, inputs, outputs)])
        dryrun = self.job.mode == "dryrun"
        found = combine(self.ask_judge([
            judge.Check(trial=trial, dryrun=dryrun, candidate=Parcel(skeleton=a.skeleton, path=o))
            for a, o in zip(answers, outputs)]), "rank")
        if (self.job.save_outputs or dryrun) and (found or trial == self.job.trials - 1):
            self.ask_judge(judge.Save(slug=self.job.slug, dryrun=dryrun))
        self.parcels.discard(inputs, outputs)
        if found:
            verdict, reason, finding = found
            if late is not None and verdict == Verdict.FAIL:
                reason = f"{reason} ({staggered_note(late)})"
            raise JobEnded(verdict, reason, finding)

    def _timing(self):
        from pkb_core.conduct.timed_rounds import time_job

        self._in_trials = False
        time_job(self)

    def physics_floor(self, timing: Timing) -> Timing:
        """``timing`` with the speed of light and the bus convention (when calibrated)."""
        from pkb_core.contracts.dtypes import ITEMSIZE
        from pkb_core.machine.roofline import speed_of_light

        settings = self.settings
        if not settings.calibration or not timing.candidate:
            return timing
        itemsize = ITEMSIZE[self.job.dtype]
        traffic = self.problem.traffic(self.job.params, self.nproc, itemsize)
        timing = attrs.evolve(timing, sol=speed_of_light(traffic, settings.calibration))
        busbw = getattr(self.problem.module, "busbw", None)
        if busbw:
            nbytes, factor = busbw(self.job.params, self.nproc, itemsize)
            timing = attrs.evolve(timing, bus={"bytes": nbytes, "factor": factor})
        return timing

    def profile(self) -> dict:
        """Have both sides profile a few calls (``--profile``); each rank's summary, by side."""
        folder = Path(self.settings.run_dir) / "profiles"
        folder.mkdir(parents=True, exist_ok=True)
        slug = self.job.slug
        summary = {}
        for side, group in (("reference", self.ask_judge), ("candidate", self.ask_candidate)):
            answers = group([ProfileRequest(path=str(folder / f"{slug}-{side}-rank{r}.json"))
                             for r in range(self.nproc)])
            summary[side] = [a.summary for a in answers]
        return summary


def timeout_reason(job_timeout: float, detail: str, *, job=None, trials_passed: int = 0) -> str:
    """A ``timeout`` verdict's reason: the job's limit, and where its time went; for a timed
    ``job`` whose every trial passed (``trials_passed``), that its answer was right and what to
    change (a user can act on that)."""
    reason = f"no result after {job_timeout:g} s ({detail})"
    if job is not None and job.measure_perf and trials_passed == job.trials:
        reason += (f"; its {job.trials} correctness trials passed and its timing did not fit the limit (fewer "
                   "--iters, or a longer --timeout)")
    return reason


class JudgeFailed(Exception):
    """The judge's own ranks failed or were still busy: the launch's judge group must be
    restarted. The job gets ``error`` (not the candidate's fault), or ``timeout`` where
    ``out_of_time``: the job's own time ran out while the judge worked for it (a ``--timeout``
    too short for the job, or a candidate whose windows the judge's timekeeper waited on)."""

    def __init__(self, ended: JobEnded, out_of_time: bool = False):
        super().__init__(ended.reason)
        self.ended = ended
        self.out_of_time = out_of_time
