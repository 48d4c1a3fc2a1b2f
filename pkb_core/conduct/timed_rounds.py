"""A job's timing, as the launcher conducts it: rounds of batches, timed from outside.

Neither side times itself. Per timing mode the launcher

1. has the judge draw the mode's *warm-up* sets and both sides warm up on them
   (``warm``; in graph mode each side captures its batch there, on the buffers
   later rounds reuse). Nothing warmed up on is ever timed;
2. per round, has the judge draw the round's fresh input sets into a parcel
   (``pool``: the candidate is frozen meanwhile and has never seen them), then
   sends ``time`` to each side in alternating order. A side's ``time`` reads
   the parcel, places the sets in its heap, makes the calls and exports every
   output and argument buffer; the launcher's clock runs from sending the
   command to the last rank's answer (:meth:`JobRun.time_candidate` and
   :meth:`~JobRun.time_judge` return it with the answers). So the inputs are released only when the timed window starts
   (nothing can be precomputed), and whatever a side does with them, on any
   thread or stream, before its answer, is inside its time;
3. checks the candidate's timed calls (outputs and arguments after the call:
   :meth:`pkb_core.judge.rank.JudgeRank.on_check_sample`).

A batch's per-call time is its wall time over its calls. Both sides run the
same harness code on the same bytes, so the harness's cost (the command's
messages, reading and placing the parcel, the barriers, exporting the
outputs) is in both; it is what limits the resolution (docs/trust.md). To
amortise it, a batch holds as many calls as :data:`POOL_BYTES` and the
``--iters`` budget allow, up to :data:`MAX_CALLS`, while still leaving at
least :data:`MIN_ROUNDS` rounds (the fewest with a 95 % interval) whenever
``--iters`` allows 6 calls. The speedup is the ratio of the two sides' median
per-call times with the distribution-free interval over the rounds' paired
ratios (:mod:`pkb_core.conduct.intervals`). The times the sides' processes report
about themselves are kept as an untrusted diagnostic (``self_reported_ms``)
and used for nothing.
"""
from __future__ import annotations

import math
import random
import statistics
import time
from typing import Protocol

import attrs

from pkb_core.conduct.answers import combine, slot_sizes
from pkb_core.conduct.intervals import max_over_ranks, speedup, summarize
from pkb_core.conduct.stopping import StoppingRule, time_share
from pkb_core.contracts import commands_candidate as candidate
from pkb_core.contracts import commands_judge as judge
from pkb_core.contracts.messages import Parcel
from pkb_core.contracts.outcome import JobEnded
from pkb_core.contracts.timing import ModeTiming, Timing
from pkb_core.contracts.verdict import Verdict
from pkb_core.machine.roofline import below_floor

#: Most calls per timed batch (each on its own input set of the round's pool).
MAX_CALLS = 50
#: Graph mode's most replays per batch (each runs all the batch's calls, on the same sets: a
#: kernel that recognised inputs it had seen could skip the work of every replay but the first,
#: so there are never more replays than calls, as before: docs/trust.md) ...
MAX_REPLAYS = 50
#: ... and few enough that a batch's replays take about this long at the warm-up's pace
#: (a heavy problem's 50 x 50 calls would otherwise outlast the job's timeout).
GRAPH_BATCH_S = 2.0
#: Rounds needed for a 95 % interval (:func:`pkb_core.conduct.intervals.median_interval`).
MIN_ROUNDS = 6
#: Bytes of one side's pool of inputs plus outputs, per rank, beyond which batches get fewer calls.
POOL_BYTES = 2 << 30
#: Every timed call of a batch is checked while a rank's batch outputs stay below this;
#: above it, :data:`SAMPLED_CALLS` calls chosen at random after the batch.
CHECK_ALL_BYTES = 64 << 20
SAMPLED_CALLS = 2


class RoundsRun(Protocol):
    """What the round loops (this module's and :mod:`pkb_core.conduct.window_rounds`) use of
    the job they time: :class:`pkb_core.conduct.jobrun.JobRun`. Every command returns its
    typed answers; the ``time_*`` forms also return the launcher's clock around the command
    (milliseconds from sending it to the last rank's answer), the one number pkb trusts."""

    job: object
    problem: object
    settings: object
    candidates: object
    parcels: object
    outcome: object
    nproc: int
    set_bytes: int
    deadline: float
    rng: random.Random
    reference_group: object
    reference_side: object
    reference_group_b: object
    reference_side_b: object

    def ask_judge(self, request) -> list: ...

    def ask_candidate(self, request) -> list: ...

    def time_judge(self, request) -> tuple[list, float]: ...

    def time_candidate(self, request) -> tuple[list, float]: ...

    def side_windows(self, group, requests, open_request) -> tuple[list, list]: ...

    def settle(self) -> None: ...

    def physics_floor(self, timing: Timing) -> Timing: ...

    def profile(self) -> dict: ...


def batch_calls(iters: int, set_bytes: int) -> int:
    """Calls per batch: as many as memory (:data:`POOL_BYTES`, a side keeps a
    batch's inputs and outputs, about three times the inputs) and
    :data:`MAX_CALLS` allow, but few enough that ``iters`` calls make
    :data:`MIN_ROUNDS` rounds."""
    by_bytes = POOL_BYTES // max(1, 3 * set_bytes)
    return max(1, min(MAX_CALLS, by_bytes, iters // MIN_ROUNDS))


def graph_replays(calls: int, warm_ms_per_call: float | None) -> int:
    """Replays of a captured batch of ``calls``: as many as the calls (at most
    :data:`MAX_REPLAYS`), and few enough for :data:`GRAPH_BATCH_S` at
    ``warm_ms_per_call`` (the launcher's time for the warm-up over its calls:
    an overestimate, it holds the capture too; None: no warm-up, no bound).
    More replays would spread the batch's placing and export further, but
    every replay runs on the same sets (docs/trust.md, "What pkb does not
    guarantee")."""
    most = min(calls, MAX_REPLAYS)
    if not warm_ms_per_call:
        return max(1, most)
    return max(1, min(most, int(GRAPH_BATCH_S * 1e3 / (calls * warm_ms_per_call))))


def time_job(run: RoundsRun) -> None:
    """Every timing mode of ``run`` (a :class:`pkb_core.conduct.jobrun.JobRun`);
    sets ``run.outcome.timing``; raises :class:`JobEnded` for a flag."""
    job = run.job
    modes = {}
    asked = list(job.timing_modes)
    for index, mode in enumerate(asked):
        unavailable = unavailable_reason(run, mode)
        if unavailable:
            modes[mode] = ModeTiming(unavailable=unavailable)
            if len(asked) == 1:
                # The headline still needs a number: the launcher's clock, labelled by its mode.
                asked.append("latency")
            continue
        budget = time_share(run.deadline - time.monotonic(), len(asked) - index)
        modes[mode] = _time_mode(run, mode, budget)
    # The headline: the first mode asked for that timed here (``graph,back-to-back`` on CPU: the
    # second; ``graph`` alone: latency, added above).
    primary = next((mode for mode in asked if not modes[mode].unavailable), asked[0])
    # ``clock`` says where the calls ran (reports keep CPU runs out of fast_p); either way
    # the times are the launcher's clock around device-synchronised batches. The headline
    # is the first mode's (Timing.reference, .candidate, .speedup read it from ``modes``).
    clock = "device" if run.settings.device == "cuda" else "host"
    timing = Timing(modes=modes, primary=primary, clock=clock)
    timing = run.outcome.timing = run.physics_floor(timing)
    # On the launcher's clock: a time below the floor is the machine's calibration
    # or the solution skipping work, never a time the candidate reported.
    impossible = timing.sol and below_floor(timing.candidate.median, timing.sol)
    if impossible:
        raise JobEnded(Verdict.FLAGGED, impossible)
    clocks = [a.clocks for a in run.ask_judge(judge.ReadClocks())]
    if any(clocks):
        timing = run.outcome.timing = attrs.evolve(timing, clocks=clocks)
    if job.profile:
        run.outcome.timing = attrs.evolve(timing, profile=run.profile())


def unavailable_reason(run: RoundsRun, mode: str) -> str | None:
    """Why ``mode`` cannot time this problem here, or None."""
    if mode == "window" and getattr(run.candidates, "remote", None) is not None:
        return "window mode times one node's groups (a multi-node job's ranks have no timekeeper in common)"
    if mode not in ("latency", "window") and run.problem.mutates:
        # Window mode releases a fresh set into every window; batches reuse theirs.
        return "the problem mutates its arguments: latency and window modes only"
    if mode == "graph" and not getattr(run.problem.module, "CUDA_GRAPH", True):
        return "the reference cannot be replayed from a CUDA graph (CUDA_GRAPH = False in the problem)"
    if mode == "graph" and run.settings.device != "cuda":
        return "CUDA-graph mode needs a GPU"
    return None


def _draw(run: RoundsRun, name: str, round_: str, calls: int):
    """Have the judge draw ``calls`` input sets into parcels named ``name``: ``(skeletons, paths, slots)``."""
    paths = run.parcels.paths(name, run.nproc)
    skeletons = [a.skeleton for a in run.ask_judge([judge.DrawPool(round=round_, k=calls, path=p) for p in paths])]
    sets = [s["v"] for s in skeletons]
    slots = [slot_sizes([rank_sets[i] for rank_sets in sets]) for i in range(calls)]
    return skeletons, paths, slots


def _time_mode(run: RoundsRun, mode: str, budget_s: float) -> ModeTiming:
    """Rounds of one mode until the stopping rule says enough
    (:mod:`pkb_core.conduct.stopping`): at least ``min_iters`` calls per side
    and :data:`MIN_ROUNDS` rounds, at most ``iters`` calls, in between until
    both medians are known to +-1 %, or until the mode has spent ``budget_s``
    seconds."""
    job = run.job
    cap = max(1, job.iters)
    calls = batch_calls(cap, run.set_bytes)
    least = min(cap, max(job.min_iters or cap, MIN_ROUNDS * calls))
    if mode == "window":
        from pkb_core.conduct.window_rounds import time_windows

        return time_windows(run, mode, budget_s, calls, least, cap)
    rule = StoppingRule(min_samples=max(1, least), max_samples=cap)
    per_call = {"reference": [], "candidate": []}  # per round: wall / calls, the independent units
    reported = {"reference": [], "candidate": []}
    alignment = {}
    skeletons, paths, warm_slots = _draw(run, f"{mode}-warm", f"{mode}/warm", calls)
    answers, reference_warm_ms = run.time_judge(judge.WarmReference(mode=mode, count=job.warmup))
    failures = [a.failure for a in answers]
    answers, candidate_warm_ms = run.time_candidate([
        candidate.WarmCandidate(mode=mode, count=job.warmup, skeleton=s, path=p, slots=warm_slots)
        for s, p in zip(skeletons, paths)])
    failures += [a.failure for a in answers]
    run.parcels.discard(paths)
    warm_ms = max(reference_warm_ms, candidate_warm_ms)
    failure = next((f for f in failures if f), None)
    if failure:
        return ModeTiming(unavailable=failure)
    replays = graph_replays(calls, warm_ms / job.warmup if job.warmup else None) if mode == "graph" else 0
    executed = calls * (replays or 1)  # calls a batch makes (graph: every replay runs all of them)

    started = time.monotonic()
    round_, stopped = 0, None
    while stopped is None:
        skeletons, paths, slots = _draw(run, f"{mode}-pool{round_}", f"{mode}/{round_}", calls)
        if mode == "graph" and any(n > w for s, ws in zip(slots, warm_slots) for n, w in zip(s, ws)):
            return ModeTiming(unavailable="the inputs' sizes change from round to round: a captured graph "
                                          "cannot replay on them")
        order = ("reference", "candidate") if round_ % 2 == 0 else ("candidate", "reference")
        for side in order:
            run.settle()  # the same quiet stretch before either side's batch (jobrun.QUIET_S)
            if side == "reference":
                answers, wall_ms = run.time_judge([judge.TimeReference(mode=mode, skeleton=s, path=p,
                                                                       replays=replays)
                                                   for s, p in zip(skeletons, paths)])
            else:
                out = run.parcels.paths(f"{mode}-candidate{round_}", run.nproc)
                answers, wall_ms = run.time_candidate([
                    candidate.TimeCandidate(mode=mode, skeleton=s, path=p, slots=slots, out_path=o, replays=replays)
                    for s, p, o in zip(skeletons, paths, out)])
                sample = (answers, out)
            # The launcher's clock around the command alone: the only time pkb uses.
            per_call[side].append(wall_ms / executed)
            reported[side].append(_reported(answers, calls if mode != "graph" else replays))
            alignment[side] = _alignment(answers) + (OWN_ACCOUNT if side == "candidate" else "")
            if side == "reference":
                out_bytes = max(a.out_bytes for a in answers)
        # After both sides, so the judge's outputs are this round's.
        _check_sample(run, *sample, calls, out_bytes)
        run.parcels.discard(paths, sample[1])
        round_ += 1
        samples = round_ * calls
        stopped = rule.decide_within(samples, per_call["reference"], per_call["candidate"],
                                     time.monotonic() - started, budget_s)
    pairs = list(zip(per_call["reference"], per_call["candidate"]))
    total = round_ * executed
    return ModeTiming(reference=summarize(per_call["reference"], per_call["reference"], calls=total),
                      candidate=summarize(per_call["candidate"], per_call["candidate"], calls=total),
                      speedup=speedup(pairs), stopped=stopped,
                      batches=round_, alignment=alignment, calls_per_batch=calls,
                      self_reported_ms={side: _median_or_none(v) for side, v in reported.items()})


def _check_sample(run: RoundsRun, answers, paths, calls, out_bytes):
    """Have the judge check the candidate's timed calls: all of them while a batch's outputs
    are small (:data:`CHECK_ALL_BYTES`), else :data:`SAMPLED_CALLS` chosen after the batch."""
    if out_bytes <= CHECK_ALL_BYTES:
        indices = list(range(calls))
    else:
        indices = sorted(run.rng.sample(range(calls), min(SAMPLED_CALLS, calls)))
    found = combine(run.ask_judge([judge.CheckSample(indices=indices, candidate=Parcel(skeleton=a.skeleton, path=p))
                                for a, p in zip(answers, paths)]), "rank")
    if found:
        raise JobEnded(*found)


#: Appended to what a record keeps of the candidate's word (its ranks say how they aligned;
#: the candidate's process runs that code and could say anything: docs/trust.md).
OWN_ACCOUNT = " (the candidate's own account)"


def _alignment(answers: list) -> str:
    """How a side's ranks aligned their samples (the first rank that says otherwise wins)."""
    notes = [a.alignment or "host barrier only" for a in answers]
    return next((n for n in notes if n != "device barrier"), notes[0] if notes else "")


def _reported(answers: list, count: int) -> float | None:
    """The median of a side's self-reported per-call times (max over ranks), or
    None when they are not ``count`` finite numbers per rank: a diagnostic only,
    so a malformed report is recorded as absent, never acted on."""
    per_rank = []
    for answer in answers:
        times = answer.times
        if not (isinstance(times, list) and len(times) == count and
                all(isinstance(t, (int, float)) and math.isfinite(t) and t >= 0 for t in times)):
            return None
        per_rank.append([float(t) for t in times])
    return statistics.median(max_over_ranks(per_rank)) if per_rank else None


def _median_or_none(values) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if len(known) == len(values) and known else None
