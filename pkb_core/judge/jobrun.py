"""One job, as the launcher conducts it: the judge's ranks and a fresh candidate's.

The launcher is the only process that sees both sides. Per trial it has the
judge draw the inputs, hands them to the candidate as a parcel, lets the
candidate call the solution once, freezes it, and has the judge run the
reference and compare what came back; the ranks' verdicts are combined here
(the lowest rank's finding wins). Timing alternates the two sides in rounds
(:mod:`pkb_core.judge.timing`) until the stopping rule is met
(:mod:`pkb_core.judge.stopping`), checks the timed outputs of every candidate
batch, cross-checks the candidate's times with the launcher's clock
(:mod:`pkb_core.judge.crosscheck`) and applies the physics floor. Nothing the
candidate sends is used without checking: its skeletons are read by the judge
under :data:`pkb_core.judge.parcel.UNTRUSTED`, its times only after the
cross-check.
"""
from __future__ import annotations

import contextlib
import math
import os
import random
import secrets
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import attrs

from pkb_core.contracts.job import Job
from pkb_core.contracts.timing import ModeTiming, Timing
from pkb_core.contracts.verdict import Verdict
from pkb_core.judge.parcel import tensor_bytes
from pkb_core.machine.roofline import below_floor
from pkb_core.launch.ranks import JobEnded, RankGroup
from pkb_core.judge.stopping import StoppingRule, time_share
from pkb_core.judge.timing import max_over_ranks, summarize

#: Calls per timed batch (each on its own input set of the round's pool).
POOL_CALLS = 10
#: Bytes of one side's pool of inputs plus outputs, per rank, beyond which batches get fewer calls.
POOL_BYTES = 2 << 30
#: Every timed output of a batch is checked while a rank's batch outputs stay below this;
#: above it, :data:`SAMPLED_CALLS` calls chosen at random after the batch.
CHECK_ALL_BYTES = 64 << 20
SAMPLED_CALLS = 2


@dataclass
class Outcome:
    """What a job concluded, before it becomes a record."""

    verdict: Verdict = Verdict.PASS
    reason: str = ""
    trials: int = 0
    timing: Timing | None = None
    barriers: int = 0
    lockdown: list = field(default_factory=list)
    #: Wall seconds of each phase (``ready``, ``setup``, ``trials``, ``timing``, ``stop``), and
    #: under ``commands`` of each command to either side.
    phases: dict = field(default_factory=dict)


class Parcels:
    """Names of one job's parcel files, and their removal. They live in the
    job's own shared-memory folder (:mod:`pkb_core.launch.scratch`), which only
    the job's candidate user and the judge can enter."""

    def __init__(self, folder: str):
        self.prefix = os.path.join(folder, "pkb-parcel-")

    def paths(self, name: str, nproc: int) -> list[str]:
        return [f"{self.prefix}{name}-r{rank}" for rank in range(nproc)]

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


def slot_sizes(skeletons: list[dict]) -> list[int]:
    """Per tensor leaf, the largest byte count over the ranks' skeletons."""
    per_rank = [tensor_bytes(s) for s in skeletons]
    count = max(len(sizes) for sizes in per_rank)
    return [max((sizes[i] for sizes in per_rank if i < len(sizes)), default=0) for i in range(count)]


def combine(answers: list[dict], label: str) -> tuple[str, str] | None:
    """The first rank's ``(verdict, reason)`` among judge answers, else None."""
    for rank, answer in enumerate(answers):
        if answer.get("verdict"):
            return answer["verdict"], f"{label} {rank}: {answer.get('reason', '')}"
    return None


class JobRun:
    """Conducts one job between ``judges`` (the launch's) and ``candidates`` (its own).

    :param deadline: ``time.monotonic()`` by which the job must be done.
    """

    def __init__(self, job: Job, problem, judges: RankGroup, candidates: RankGroup, *, parcels: Parcels,
                 deadline: float, settings, before_timing=None):
        self.job = job
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

    def _count(self, name: str, started: float) -> None:
        """Add the seconds since ``started`` to the record's per-command tally."""
        ops = self.outcome.phases.setdefault("commands", {})
        ops[name] = round(ops.get(name, 0.0) + time.monotonic() - started, 4)

    def _judge(self, op, payload=None):
        try:
            started = time.monotonic()
            answers = self.judges.command(op, payload, deadline=self.deadline)
            self.wall_ms = (time.monotonic() - started) * 1e3
            self._count(f"judge {op}", started)
            return answers
        except JobEnded as ended:
            raise JudgeFailed(ended) from None

    def _candidate(self, op, payload=None):
        try:
            started = time.monotonic()
            answers = self.candidates.command(op, payload, deadline=self.deadline)
            self.wall_ms = (time.monotonic() - started) * 1e3
            self._count(f"candidate {op}", started)
            if op in ("trial", "time", "warm"):
                started = time.monotonic()
                busy = self.candidates.busy_after_answer()
                self._count("host probe", started)
                if busy:
                    rank, used = busy[0]
                    raise JobEnded(Verdict.FLAGGED, f"rank {rank}: its processes used {used:.0f} ms of CPU in the 20 ms "
                                              f"after its {op} answer: the solution left work running on the host "
                                              "(a thread or a child process), outside what is checked and timed")
            return answers
        finally:
            self.candidates.freeze()

    def run(self) -> Outcome:
        try:
            with self._phase("setup"):
                self._setup()
            with self._phase("trials"):
                for trial in range(self.job.trials):
                    self._trial(trial)
                    self.outcome.trials = trial + 1
            if self.job.mode == "eval" and self.job.measure_perf:
                if self.before_timing:
                    self.before_timing()  # nothing else starting up on this node while it times
                with self._phase("timing"):
                    self._timing()
        except JobEnded as ended:
            self.outcome.verdict, self.outcome.reason = ended.verdict, ended.reason
            if ended.verdict == Verdict.TIMEOUT:
                self.outcome.reason = f"no result after {self.settings.job_timeout:.0f} s ({ended.reason})"
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
        self._judge("job", {"job": self.job.to_json(), "job_key": secrets.token_hex(16)})
        answers = self._candidate("setup", {"job": self.job.to_json()})
        self.outcome.lockdown = sorted({str(m)[:200] for a in answers for m in _strings(a.get("lockdown"))})
        for rank, answer in enumerate(answers):
            claimed = answer.get("verdict")
            if not claimed:
                continue
            # The answer comes from the process the solution was just imported into: it may say
            # that the solution did not compile, never how the job ended. Nor that the job is
            # unsupported (not failing): only what pkb finds before any solution code runs says
            # that (the backend's start-up above, the compile phase's source check).
            reason = str(answer.get("reason", ""))[:4000]
            if claimed == Verdict.UNSUPPORTED:
                raise JobEnded(Verdict.COMPILE_ERROR, f"rank {rank}: {reason} (reported once its code was imported: "
                                                      f"a compile error, not unsupported)")
            if claimed != Verdict.COMPILE_ERROR:
                raise JobEnded(Verdict.FLAGGED, f"rank {rank}: its setup answer claimed the verdict "
                                                f"{str(claimed)[:40]!r} (a candidate may only report "
                                                f"{Verdict.COMPILE_ERROR.value})")
            raise JobEnded(Verdict.COMPILE_ERROR, f"rank {rank}: {reason}")
        self._in_trials = True

    def _trial(self, trial: int):
        inputs = self.parcels.paths(f"in{trial}", self.nproc)
        outputs = self.parcels.paths(f"out{trial}", self.nproc)
        skeletons = [a["skeleton"] for a in self._judge("inputs", [{"trial": trial, "path": p} for p in inputs])]
        slots = slot_sizes(skeletons)
        self.set_bytes = max(self.set_bytes, sum(slots))
        answers = self._candidate("trial", [{"skeleton": s, "path": p, "slots": slots, "out_path": o}
                                            for s, p, o in zip(skeletons, inputs, outputs)])
        dryrun = self.job.mode == "dryrun"
        found = combine(self._judge("check", [
            {"trial": trial, "dryrun": dryrun, "candidate": {"skeleton": a.get("skeleton"), "path": o}}
            for a, o in zip(answers, outputs)]), "rank")
        if (self.job.save_outputs or dryrun) and (found or trial == self.job.trials - 1):
            self._judge("save", {"slug": self.job.slug, "dryrun": dryrun})
        if found:
            raise JobEnded(*found)

    def _timing(self):
        self._in_trials = False
        job = self.job
        modes, crosscheck = {}, {}
        for index, mode in enumerate(job.timing_modes):
            unavailable = self._unavailable(mode)
            if unavailable:
                modes[mode] = ModeTiming(unavailable=unavailable)
                continue
            budget = time_share(self.deadline - time.monotonic(), len(job.timing_modes) - index)
            modes[mode] = self._time_mode(mode, crosscheck, budget)
        primary = job.timing_modes[0]
        headline = modes.get(primary) or ModeTiming()
        timing = Timing(modes=modes, primary=primary, crosscheck=crosscheck,
                        clock="device" if self.settings.device == "cuda" else "host",
                        reference=headline.reference, candidate=headline.candidate, speedup=headline.speedup)
        self.outcome.timing = timing
        flags = [c.flag for c in crosscheck.values() if c.flag]
        if flags:
            raise JobEnded(Verdict.FLAGGED, flags[0])
        timing = self.outcome.timing = self._physics_floor(timing)
        impossible = timing.sol and below_floor(timing.candidate.median, timing.sol)
        if impossible:
            raise JobEnded(Verdict.FLAGGED, impossible)
        clocks = [a.get("clocks") for a in self._judge("clocks")]
        if any(clocks):
            timing = self.outcome.timing = attrs.evolve(timing, clocks=clocks)
        if job.profile:
            self.outcome.timing = attrs.evolve(timing, profile=self._profile())

    def _unavailable(self, mode: str) -> str | None:
        """Why ``mode`` cannot time this problem here, or None."""
        if mode != "latency" and self.problem.mutates:
            return "the problem mutates its arguments: latency mode only"
        if mode == "graph" and not getattr(self.problem.module, "CUDA_GRAPH", True):
            return "the reference cannot be replayed from a CUDA graph (CUDA_GRAPH = False in the problem)"
        if mode == "graph" and self.settings.device != "cuda":
            return "CUDA-graph mode needs a GPU"
        return None

    def _time_mode(self, mode: str, crosscheck: dict, budget_s: float) -> ModeTiming:
        """Rounds of one mode until the stopping rule says enough
        (:mod:`pkb_core.judge.stopping`): at least ``min_iters`` calls per side,
        at most ``iters``, in between until both medians are known to +-1 %, or
        until the mode has spent ``budget_s`` seconds. Each round's median per
        side is kept: rounds are the units of the intervals
        (:mod:`pkb_core.judge.intervals`)."""
        from pkb_core.judge import crosscheck as cc
        from pkb_core.judge.intervals import speedup

        job = self.job
        cap = max(1, job.iters)
        # Each call of a batch has its own input set; a side keeps a batch's
        # inputs and outputs (about twice the inputs) in memory at once.
        calls = max(1, min(POOL_CALLS, cap, POOL_BYTES // max(1, 3 * self.set_bytes)))
        rule = StoppingRule(min_samples=max(1, min(job.min_iters or cap, cap)), max_samples=cap)
        times = {"reference": [], "candidate": []}
        medians = {"reference": [], "candidate": []}  # per round: the independent units of the intervals
        overheads = {"reference": [], "candidate": []}
        walls = []
        alignment = {}
        started = time.monotonic()
        round_, stopped = 0, None
        while stopped is None:
            pool = self.parcels.paths(f"{mode}-pool{round_}", self.nproc)
            skeletons = [a["skeleton"] for a in self._judge(
                "pool", [{"round": f"{mode}/{round_}", "k": calls, "path": p} for p in pool])]
            sets = [s["v"] for s in skeletons]
            slots = [slot_sizes([rank_sets[i] for rank_sets in sets]) for i in range(calls)]
            self._candidate("pool", [{"skeleton": s, "path": p, "slots": slots} for s, p in zip(skeletons, pool)])
            if mode == "graph":  # capture the new round's calls (their buffers may have moved)
                failure = self._capture()
                if failure:
                    return ModeTiming(unavailable=failure)
            if round_ == 0 and job.warmup:
                self._judge("warm", {"count": job.warmup})
                self._candidate("warm", {"count": job.warmup})
            replays = calls if mode == "graph" else 0
            order = ("reference", "candidate") if round_ % 2 == 0 else ("candidate", "reference")
            for side in order:
                out = self.parcels.paths(f"{mode}-{side}{round_}", self.nproc)
                payload = [{"mode": mode, "path": o, "replays": replays} for o in out]
                answers = self._judge("time", payload) if side == "reference" else self._candidate("time", payload)
                wall_ms = self.wall_ms  # the launcher's clock around the command alone
                per_call = max_over_ranks([_times(a, calls if mode != "graph" else replays) for a in answers])
                times[side] += per_call
                medians[side].append(statistics.median(per_call))
                alignment[side] = _alignment(answers)
                overheads[side].append(cc.overhead(wall_ms, per_call if mode != "graph" else
                                                   [t * calls for t in per_call]))
                if side == "candidate":
                    walls.append(wall_ms)
                    sample = (answers, out)
                else:
                    out_bytes = max(int(a.get("out_bytes", 0)) for a in answers)
            # After both sides, so the judge's outputs are this round's.
            self._check_sample(*sample, calls, out_bytes)
            round_ += 1
            samples = min(len(times["reference"]), len(times["candidate"]))
            stopped = rule.decide(samples, medians["reference"], medians["candidate"])
            enough = samples >= rule.min_samples
            if stopped is None and enough and time.monotonic() - started > budget_s:
                stopped = "time"
        crosscheck[mode] = cc.judge(overheads["reference"], overheads["candidate"], walls,
                                    device=self.settings.device, mode=mode, calls_per_batch=calls)
        pairs = list(zip(medians["reference"], medians["candidate"]))
        return ModeTiming(reference=summarize(times["reference"], medians["reference"]),
                          candidate=summarize(times["candidate"], medians["candidate"]),
                          speedup=speedup(times["reference"], times["candidate"], pairs), stopped=stopped,
                          batches=round_, alignment=alignment)

    def _capture(self) -> str | None:
        failures = [a.get("failure") for a in self._judge("capture")]
        failures += [a.get("failure") for a in self._candidate("capture")]
        return next((str(f)[:2000] for f in failures if f), None)

    def _check_sample(self, answers, paths, calls, out_bytes):
        if out_bytes <= CHECK_ALL_BYTES:
            indices = list(range(calls))
        else:
            indices = sorted(self.rng.sample(range(calls), min(SAMPLED_CALLS, calls)))
        found = combine(self._judge("check_sample", [
            {"indices": indices, "candidate": {"skeleton": a.get("skeleton"), "path": p}}
            for a, p in zip(answers, paths)]), "rank")
        if found:
            raise JobEnded(*found)

    def _physics_floor(self, timing: Timing) -> Timing:
        """``timing`` with the speed of light and the bus convention (when calibrated)."""
        from pkb_core.launch.plan import ITEMSIZE
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

    def _profile(self) -> dict:
        folder = Path(self.settings.run_dir) / "profiles"
        folder.mkdir(parents=True, exist_ok=True)
        slug = self.job.slug
        summary = {}
        for side, group in (("reference", self._judge), ("candidate", self._candidate)):
            answers = group("profile", [{"path": str(folder / f"{slug}-{side}-rank{r}.json")}
                                        for r in range(self.nproc)])
            summary[side] = [a.get("summary") for a in answers]
        return summary


class JudgeFailed(Exception):
    """The judge's own ranks failed (not the candidate's fault): the launch's
    judge group must be restarted; the job gets ``error``."""

    def __init__(self, ended: JobEnded):
        super().__init__(ended.reason)
        self.ended = ended


def _alignment(answers: list[dict]) -> str:
    """How a side's ranks aligned their samples (the first rank that says otherwise wins)."""
    notes = [str(a.get("alignment") or "host barrier only") for a in answers]
    return next((n for n in notes if n != "device barrier"), notes[0] if notes else "")


def _times(answer: dict, count: int) -> list[float]:
    """The candidate's (or reference's) reported times, checked for shape."""
    times = answer.get("times")
    if not (isinstance(times, list) and len(times) == count and
            all(isinstance(t, (int, float)) and math.isfinite(t) and t >= 0 for t in times)):
        raise JobEnded(Verdict.FLAGGED, f"the timed batch reported {str(times)[:80]} instead of {count} times")
    return [float(t) for t in times]


def _strings(value) -> list:
    """``value`` if it is a list (an answer's list of names), else nothing."""
    return value if isinstance(value, list) else []
