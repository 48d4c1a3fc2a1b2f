"""Window mode: every call timed in its own window of the judge's timekeeper (docs/timing.md).

Per round the launcher has the judge arm ``k + 1`` fresh input sets for each side (into the
timekeeper's private staging) and runs five batches, each one call a window. Three are read
against (:data:`FLOOR_SIDES`); two of them are the judge's own (its rank is the side;
:data:`pkb_core.contracts.commands_judge.JUDGE_SIDES`), and run first:

* ``null``: a side that only waits for each gate and closes it: the pure cost of a hand-off
  between the timekeeper's context and a side's (with the release of the inputs and the
  snapshot of the same bytes). Every side does at least this: a side whose windows are
  measurably shorter is ``flagged``, never read as fast;
* ``kernel``: the same hand-off to a side that runs one kernel, which writes as many bytes as
  the reference's calls export (their outputs and arguments after them) into ``out_slot`` with
  pkb's own copy: the least any honest call's window holds (every side hands over those bytes
  before its ``done``), so the export is not in what a speedup divides by. On a GPU without MPS the
  contexts are time-sliced, and a window whose side uses the compute engine costs a switch of
  that engine to the side's context and back (about 270 us on 2xH200, stable to a few us,
  docs/benchmarks/2026-11-28-h200x2-device-clock.md), whatever the kernel does. It is what is
  subtracted from a side whose windows reach it; a side whose windows stay below it (one that
  ran nothing on the compute engine: copies and memory operations only) has the hand-off
  alone subtracted;
* ``harness``: pkb's reference group placing each set, crossing the device barrier and exporting
  the set (as a call's arguments after it) and a stand-in as many bytes as the reference's
  outputs, with no call: what every honest side's window holds besides its call, run by the same
  kind of process with the same code as the candidate's. A candidate under it by more than two
  such groups differ by skipped part of pkb's harness in its own process: ``flagged``
  (:func:`_judge_against_harness`). Nothing is subtracted for it (what the candidate's process
  runs it could skip; the record keeps it as ``harness_us``). It runs last in each round, so that
  the reference never follows its own group's batch (where ``PKB_GROUP_OFFSETS=on``, beside
  ``candidate_harness``, the same batch in the candidate's group: a diagnostic of what the two
  groups differ by, :mod:`pkb_core.conduct.group_offsets`);

and the two compared, ``reference`` and ``candidate``, in a random order balanced over pairs of
rounds (after the judge's two, before the harness): two groups made the same way (forked by
zygotes, locked down, set up, frozen between batches, timed through the same code), the
reference group calling the problem's reference as its solution
(:meth:`pkb_core.launch.launcher.Launch.fork_reference_side`), so the two sides of a speedup
differ only in the code they call.

A batch's value is the median over its timed windows of the slowest rank's window (the first
window is a lead-in, and where a batch's snapshots are drawn a drawn window is checked, not timed:
:func:`timed_windows`). A side's per-call time in a round is its value less
the round's ``kernel`` value (or, below it, less the ``null`` value: :func:`per_call_us`). The
speedup is the median of the rounds' paired ratios with its interval
(:mod:`pkb_core.conduct.intervals`), as in every mode, widened by what two groups of the same code
differ by (:func:`group_share`; the record keeps the rounds' own interval); the raw
windows' ratio (nothing subtracted) stands beside it. Nothing a side's process says is a
time: the timekeeper's clock holds every number, it starts a window only once the side has
queued the call (:mod:`pkb_core.harness.windows`), and no side sees set ``w + 1`` before
call ``w``'s outputs were taken.

The job's run is used through the same public interface as latency mode's rounds
(:class:`pkb_core.conduct.timed_rounds.RoundsRun`; named, not imported: timed_rounds
imports this module).
"""
from __future__ import annotations

import os
import random
import secrets
import statistics
import time

from pkb_core.conduct.answers import combine, slot_sizes
from pkb_core.conduct.follow_rule import FOLLOW_MAX_PAIRS, follow_effect, follow_reading, judge_following
from pkb_core.conduct.group_offsets import CANDIDATE_HARNESS, group_offsets_on, offset_reading
from pkb_core.conduct.intervals import median_interval, ratio_reading, speedup, summarize, with_group_share
from pkb_core.conduct.second_reference import SECOND_REFERENCE, second_reference_reading
from pkb_core.conduct.stopping import StoppingRule
from pkb_core.contracts import commands_candidate as candidate
from pkb_core.contracts import commands_judge as judge
from pkb_core.contracts.commands_judge import CANDIDATE_GROUP_SIDES, HARNESS_SIDES, JUDGE_SIDES, REFERENCE_GROUP_SIDES
from pkb_core.contracts.outcome import JobEnded
from pkb_core.contracts.timing import ModeTiming
from pkb_core.contracts.verdict import Verdict
from pkb_core.errors import mib_text
from pkb_core.harness.copies import region_copies
from pkb_core.harness.parcel import skeleton_end
from pkb_core.machine.numa import online_nodes

#: The sides the two compared are read against, each a batch of every round: the judge's own
#: (:data:`JUDGE_SIDES`, before the pair) and ``harness``, pkb's harness with no call, run by the
#: reference group (the same kind of process as the candidate's, with the same harness code;
#: after the pair).
FLOOR_SIDES = (*JUDGE_SIDES, "harness")
#: A candidate is measurably shorter than the judge's empty hand-off when, round by round, its
#: window less the null's lies below zero by more than the larger of this many microseconds (a
#: window's spread on a GPU) and this share of the null, over the whole 95 % interval of the
#: rounds' median difference (:func:`_under`). (Against the ``harness`` side, two groups of the
#: same code, the allowance is what two such groups differ by: :func:`harness_slack`.)
BELOW_NULL_US = 2.0
BELOW_NULL_SHARE = 0.02
#: A batch whose input sets together exceed this has about :data:`SAMPLED_SNAPSHOTS` of its
#: windows copied out and checked (each drawn on its own before the batch; at least one). A side
#: that skips the work of half its windows, to move their median, is caught in a batch with a
#: chance of 1 - (1 - 4/k)^(k/2): 91 % at k = 12, 88 % at k = 51. (Checking every window cost
#: about 30 ms a window at 256 KiB on 2xH200: 9 s of a 22 s job of 25 batches of 12, 2026-11-29.)
SNAPSHOT_ALL_BYTES = 1 << 20
SAMPLED_SNAPSHOTS = 4
#: Warm-up batches at most (each of up to ``calls`` windows).
WARM_BATCHES = 3
#: Rounds a window-mode job takes where its ``--iters`` allow batches of at least
#: :data:`WINDOW_LEAST_CALLS` windows. Each call is its own window (no batch amortises a cost),
#: so a round's batch needs few windows, and rounds are the independent units: on 2xH200 the
#: reference against itself read 0.85-1.13 at 2 MiB over 6 rounds of 50 windows and 0.995
#: [0.942, 1.044] over 30 (docs/benchmarks/2026-11-28-h200x2-clock-aa.md).
WINDOW_ROUNDS = 24
WINDOW_LEAST_CALLS = 10
#: What two groups of processes running the same code differ by, as a share of a speedup: the
#: interval over one job's rounds cannot see it (each side is one group for the whole job) and is
#: widened by it each way (:func:`pkb_core.conduct.intervals.with_group_share`). On 2xH200 at
#: 128 MiB, where 60 rounds give intervals of +-0.3 %, 11 of 12 jobs of the reference against
#: itself read within 0.997-1.004 and 4 of those 12 intervals excluded 1.00 (the twelfth read
#: 1.048: docs/benchmarks/2026-11-28-h200x2-clock-aa.md).
GROUP_SHARE = 0.005
#: The same, as a time per call: at 4 KiB-256 KiB on 2xH200 (calls of 35-60 us beyond the
#: hand-off) the rounds' intervals of 3 of 48 A/A jobs missed 1.00 by 0.11-0.39 us a call,
#: ten times what :data:`GROUP_SHARE` covers there (docs/benchmarks/2026-11-28-h200x2-clock-rounds.md).
#: With the harness copying by kernels (the GPU default since 2026-11-29) two groups' medians at
#: 4 KiB differed by -0.52..+0.92 us a call over 16 jobs on one H200, and two side processes of
#: the same code by up to 0.7 us in pkb's own gates with no job around them, where the regions of
#: one process read within 0.2 us of each other: an offset of the process, not of its memory
#: (docs/benchmarks/2026-11-29-h200-harness-copies.md). 1 us covered every one of those. At the
#: default ``--iters`` (25 rounds, where the rounds' own intervals are +-1-2 %) over 22 jobs of the
#: reference against itself at the default size on 2xH200 (2026-11-30 night, one hardware queue a
#: process, problems of 17-96 us a call), 4 rounds' intervals missed 1.00 by more than 1 us a
#: call (1.1, 1.5, 1.5 and 3.5 us), the rest by less than 1 us: 2 us covers 21 of 22, and 5 of 5
#: jobs timed with it the same night (docs/benchmarks/2026-11-30-h200x2-window-headline.md).
GROUP_US = 2.0
#: Masked sets: the timekeeper waits for a side's ``taken`` no longer than the judge's ``kernel``
#: side's take (release to ``taken``: its copy of the set out of ``in_slot``; the 90th percentile
#: of the same round's, the slowest rank's) with this much room (a share of it, and a time) after
#: its set's release; a side still not taken when every rank is there is timed from then
#: (docs/timing.md, "A set released ahead of its window").
TAKE_ROOM_SHARE = 0.1
TAKE_ROOM_NS = 2000
#: A full filesystem is the candidate's doing where its group holds, beyond pkb's own reference
#: group, at least this share of it (and what did not fit): a neighbour that filled it leaves an
#: honest candidate a few pages beyond the reference group, never a quarter of the filesystem.
FILLED_SHARE = 0.25


class Batches:
    """The windows of one job and mode: arms, opens and checks batches of one side."""

    def __init__(self, run, calls: int):
        self.run = run
        self.calls = calls
        self.epoch = 1
        self.rng = random.Random()
        #: Which windows of a large batch are copied out and checked (the operating system's
        #: randomness: nothing a side can observe predicts it).
        self.draw = random.SystemRandom()
        #: The name of this job's meetings on the host engine's board (docs/timing.md).
        self.board = secrets.token_hex(8)
        #: Which engine timed the batches (the timekeeper's own answer).
        self.engines: set = set()
        #: Per side: each batch's spread of windows (p10, p90 in us), host time per call,
        #: garbage collections inside windows and the span of the side's own events around a call
        #: (``PKB_CALL_EVENTS``; the sides' own accounts: diagnostics, used for nothing): per kind
        #: (``call``: the whole call; ``place``: its placing and barrier), per side, each batch's
        #: per-rank medians.
        self.spread: dict = {}
        self.host: dict = {}
        self.collections: dict = {}
        self.call_events: dict = {}
        #: Per side: the timed batches in which a call was not queued ahead of its gate (the
        #: timekeeper's own observation), and the first such call.
        self.unqueued: dict = {}
        #: Per side: each batch's wall time on the conductor, in the timekeeper, and before the
        #: timekeeper's first window (ms; the slowest rank's).
        self.cost: dict = {}
        #: Per side: each batch's median release and snapshot copy inside a window, and its take of
        #: a masked set before it (us; the host engine's; the slowest rank's).
        self.copies: dict = {}
        #: Masked sets: the allowance for a side's take before its window (ns), from the last
        #: ``kernel`` batch; None before one, or where sets are not masked.
        self.take_allowance_ns: int | None = None
        #: Per side: the NUMA node of its gate region on each rank, as its batches found them (the
        #: host engine's; distinct values in order: a side whose region moved shows both).
        self.nodes: dict = {}
        #: Per side: each timed batch's share of calls queued before its first window opened
        #: (GPU, host engine; the slowest rank's).
        self.ahead: dict = {}
        #: Per side: the gate regions its timed batches ran on (:mod:`pkb_core.judge.region_pool`).
        self.regions: dict = {}
        #: How the sides' harness copied, as the judge told them with their regions
        #: (:mod:`pkb_core.harness.copies`), and whether their sets were masked (:mod:`pkb_core.harness.mask`).
        self.harness_copies: set = set()
        self.masked: set = set()
        #: Per side of the reference group: the most bytes of ``out_slot`` one of its calls filled, by
        #: the layouts it answered (pkb's own code: the ``harness`` batch exports what the
        #: reference's calls do). A candidate's layouts are read by the judge alone, under its limits.
        self.exported: dict = {}
        #: Per side: each checked batch's cost of its window check, per window (:meth:`_tally_check`).
        self.checks: dict = {}

    def _timeout(self) -> float:
        return max(1.0, self.run.deadline - time.monotonic() - 1.0)

    def batch(self, side: str, label: str, *, check: bool = False) -> list[float]:
        """One batch of ``side``: per timed window, the slowest rank's time in microseconds. The
        lead-in is not timed, nor is a window drawn for a snapshot in a batch whose snapshots are
        drawn (:func:`timed_windows`)."""
        run = self.run
        k = self.calls + 1
        group = run.reference_group if side in REFERENCE_GROUP_SIDES else \
            run.candidates if side in CANDIDATE_GROUP_SIDES else \
            run.reference_group_b if side == SECOND_REFERENCE else None
        folder = run.folder_of(group) if group is not None else ""
        began = time.monotonic()
        mine = run.folder_of(run.candidates) if run.candidates is not None else ""
        armed = run.ask_judge(judge.ArmWindows(side=side, round=label, k=k, folder=folder, candidate_folder=mine,
                                               board=self.board))
        ended = arm_failed(side, armed, lambda: (held_by(run, run.candidates), held_by(run, run.reference_group)))
        if ended is not None:
            raise ended
        if "/warm" not in label:
            self.regions.setdefault(side, set()).update(a.region.get("key") for a in armed)
        self.harness_copies.update(region_copies(a.region) for a in armed)
        self.masked.update(bool(a.region.get("masked")) for a in armed)
        epoch, self.epoch = self.epoch, self.epoch + k + 1
        # Which windows are copied out (and checked, for the candidate): all of a small batch's;
        # of a large one's, each by its own draw, before the batch and told to the timekeeper
        # alone. A side that learns from the timing which windows were copied learns nothing of
        # the later ones (a fixed number would tell it when the checks are over).
        snapshots = None
        if run.set_bytes * k > SNAPSHOT_ALL_BYTES:
            snapshots = [w for w in range(k) if self.draw.random() < SAMPLED_SNAPSHOTS / k] or \
                [self.draw.randrange(k)]
        opening = judge.OpenWindows(side=side, epoch=epoch, timeout_s=self._timeout(), board=self.board,
                                    snapshots=snapshots,
                                    take_allowance_ns=None if side in JUDGE_SIDES else self.take_allowance_ns)
        if group is not None:
            slots = slot_sizes([s for a in armed for s in a.skeletons])
            requests = [candidate.RunWindows(epoch=epoch, skeletons=a.skeletons, slots=slots, region=a.region,
                                             timeout_s=self._timeout(), harness_only=side in HARNESS_SIDES,
                                             fill=a.fill) for a in armed]
            times, answers = run.side_windows(group, requests, opening)
        else:
            times, answers = run.ask_judge(opening), None
        self.engines.update(t.engine for t in times if t.engine)
        self.cost.setdefault(side, []).append((
            (time.monotonic() - began) * 1e3,
            max((t.batch_ns or 0) for t in times) / 1e6,
            max((t.first_wait_ns or 0) for t in times) / 1e6))
        takes = [t.take_ns for t in times]
        for name, values in (("release_us", [t.release_ns for t in times]),
                             ("snapshot_us", [t.snapshot_ns for t in times]),
                             ("take_us", takes)):
            if values and all(isinstance(v, int) for v in values):
                self.copies.setdefault(side, {}).setdefault(name, []).append(max(values) / 1e3)
        if side == "kernel":
            self.take_allowance_ns = take_allowance_ns(times)
        ahead = [t.queued_ahead for t in times]
        # Timed batches only: a warm-up's first launches load their kernels, which waits for the
        # device behind its gate (one H200 at W = 1: every group's least share was 0, beside a
        # first batch of 1.3 s where a timed one took 29-60 ms).
        if ahead and all(isinstance(a, int) for a in ahead) and "/warm" not in label:
            self.ahead.setdefault(side, []).append(min(ahead) / k)
        placed = [t.region_node for t in times]
        if any(isinstance(node, int) for node in placed) and placed not in self.nodes.setdefault(side, []):
            self.nodes[side].append(placed)
        ended = batch_ended(side, times)
        if ended is not None:
            raise ended
        if check:
            indices = list(range(k)) if snapshots is None else snapshots
            checking = time.monotonic()
            findings = run.ask_judge([judge.CheckWindows(indices=indices, skeletons=layouts(a)) for a in answers])
            found = combine(findings, "rank")
            if found:
                raise JobEnded(*found)
            self._tally_check(side, len(indices), (time.monotonic() - checking) * 1e3, findings)
        late = [t.not_queued_ahead for t in times if isinstance(t.not_queued_ahead, int)]
        if late and "/warm" not in label:
            seen = self.unqueued.setdefault(side, {"batches": 0, "first_call": min(late)})
            seen["batches"] += 1
            seen["first_call"] = min(seen["first_call"], min(late))
        per_window = [max(t.times_ns[w] for t in times) / 1e3 for w in range(min(len(t.times_ns) for t in times))]
        if len(per_window) < k:
            raise JobEnded(Verdict.ERROR, f"the timekeeper timed {len(per_window)} of the {side}'s {k} calls")
        per_window = timed_windows(per_window, snapshots)
        ordered = sorted(per_window)
        self.spread.setdefault(side, []).append((ordered[len(ordered) // 10], ordered[(9 * len(ordered)) // 10]))
        reported = [a.host_us for a in answers] if answers else [t.host_us for t in times]
        if all(isinstance(h, (int, float)) and 0 <= h < 1e9 for h in reported):
            self.host.setdefault(side, []).append(max(reported))
        if answers and side in REFERENCE_GROUP_SIDES:
            filled = [skeleton_end(s) for a in answers for s in layouts(a)]
            self.exported[side] = max(self.exported.get(side, 0), *filled)
        if answers:  # a group's own events around its calls (PKB_CALL_EVENTS=on), each rank's
            for kind, own in (("call", [a.call_event_us for a in answers]),
                              ("place", [a.place_event_us for a in answers])):
                if all(isinstance(e, (int, float)) and 0 <= e < 1e9 for e in own):
                    self.call_events.setdefault(kind, {}).setdefault(side, []).append(own)
        collected = [a.collections for a in answers] if answers else [t.collections for t in times]
        if all(isinstance(c, int) and 0 <= c < 1e9 for c in collected):
            self.collections[side] = self.collections.get(side, 0) + sum(collected)
        return per_window

    def _tally_check(self, side: str, windows: int, wall_ms: float, findings: list) -> None:
        """Keep what checking ``windows`` windows of a batch cost per window (ms): on the
        conductor, and per part on the judge's slowest rank (the reference's calls and bounds, the
        snapshots' unpacking and copy to the device, the comparisons)."""
        per_window = {"wall": wall_ms / max(1, windows)}
        parts = [f.spent_ms for f in findings]
        if parts and all(isinstance(p, dict) for p in parts):
            for part in parts[0]:
                per_window[part] = max(float(p.get(part, 0.0)) for p in parts) / max(1, windows)
        self.checks.setdefault(side, []).append(per_window)

    def diagnostics(self) -> dict:
        """Per side: the median over batches of the windows' p10 and p90, and of the host time per call (us)."""
        found = {}
        for side, spreads in self.spread.items():
            found[side] = {"window_p10_us": round(statistics.median(p for p, _ in spreads), 3),
                           "window_p90_us": round(statistics.median(p for _, p in spreads), 3)}
            if self.host.get(side):
                found[side]["host_us_per_call"] = round(statistics.median(self.host[side]), 3)
            for kind, events in self.call_events.items():
                batches = events.get(side)
                if not batches:
                    continue
                found[side][f"{kind}_event_us"] = round(statistics.median(max(b) for b in batches), 3)
                # each rank's own: which rank's calls are the longer (a pipeline's last stage waits),
                # and how much of a call was its set's placing and the barrier (a rank that waits there
                # waits for another's gate or placing, not for the solution)
                found[side][f"{kind}_event_us_by_rank"] = [round(statistics.median(b[r] for b in batches), 3)
                                                           for r in range(min(len(b) for b in batches))]
            if side in self.exported:
                found[side]["exported_bytes"] = self.exported[side]
            if side in self.collections:
                found[side]["gc_collections_in_windows"] = self.collections[side]
            if side in self.unqueued:
                found[side]["not_queued_ahead"] = self.unqueued[side]
            if self.nodes.get(side):
                found[side]["region_nodes"] = self.nodes[side]
            if self.regions.get(side):
                found[side]["gate_regions"] = len(self.regions[side])
            if self.ahead.get(side):
                # The share of a batch's calls queued before its first window opened (GPU, host
                # engine), the slowest rank's, as a median over batches and the least of any.
                found[side]["queued_ahead_share"] = [round(statistics.median(self.ahead[side]), 3),
                                                     round(min(self.ahead[side]), 3)]
            if self.checks.get(side):
                # ms a checked window (the conductor's wall, and the judge's parts), median over batches
                checks = self.checks[side]
                found[side]["check_ms_per_window"] = {part: round(statistics.median(c.get(part, 0.0) for c in checks), 3)
                                                      for part in checks[0]}
            for name, values in self.copies.get(side, {}).items():
                found[side][name] = round(statistics.median(values), 3)
            if self.cost.get(side):
                costs = self.cost[side]
                found[side]["batch_ms"] = round(statistics.median(c[0] for c in costs), 3)
                found[side]["batch_ms_first_max"] = [round(costs[0][0], 3), round(max(c[0] for c in costs), 3)]
                found[side]["timekeeper_batch_ms"] = round(statistics.median(c[1] for c in costs), 3)
                found[side]["first_window_wait_ms"] = round(statistics.median(c[2] for c in costs), 3)
        return found


def timed_windows(per_window: list[float], snapshots: list | None) -> list[float]:
    """The windows of a batch that time its calls, from ``per_window`` (all of them, the lead-in
    first): every one but the lead-in where every window was copied out (``snapshots`` None), else
    those not drawn for a snapshot (all but the lead-in, should every one have been drawn).

    A drawn window holds the timekeeper's copy of the side's outputs into its snapshot, which
    grows with them (at 8 MiB, 3-4 ms of host copy in a window of 0.45 ms, on 2xH200), and how
    many are drawn varies from batch to batch: with them, a batch's median was a call or a
    snapshot as the draw fell (2xH200, 2026-11-29: the reference's windows at 8 MiB had a median of
    1.9 ms, the candidate's 0.46 ms, and speedups read [0.03, 8.7]). Every side's timed windows are
    then alike, and the drawn ones are what the judge checks. A side cannot tell a drawn window
    from another before it ends (the draw is told to the timekeeper alone), so what it skips in a
    window it hopes is not copied is caught in the windows that are."""
    if snapshots is None:
        return per_window[1:]
    drawn = set(snapshots)
    return [t for w, t in enumerate(per_window) if w and w not in drawn] or per_window[1:]


def window_batches(calls: int, least: int, cap: int) -> tuple[int, int]:
    """Window mode's ``(calls a batch, least calls)`` from the launcher's (``calls`` amortise a
    batch's cost, which a window does not have): batches small enough for :data:`WINDOW_ROUNDS`
    rounds within ``cap`` calls, but never under :data:`WINDOW_LEAST_CALLS` windows (nor more
    than ``calls``), and at least that many rounds unless ``cap`` stops them first."""
    calls = min(calls, max(WINDOW_LEAST_CALLS, cap // WINDOW_ROUNDS))
    return calls, min(cap, max(least, WINDOW_ROUNDS * calls))


def _started(start, what: str):
    """The group ``start()`` makes; a group that does not start is the job's ``error``, named."""
    try:
        return start()
    except JobEnded as ended:
        raise JobEnded(Verdict.ERROR, f"window mode's {what} did not start: {ended.reason}") from None


def time_windows(run, mode: str, budget_s: float, calls: int, least: int, cap: int) -> ModeTiming:
    """Window mode's rounds (see the module docstring) until the stopping rule says enough."""
    job = run.job
    calls, least = window_batches(calls, least, cap)
    if run.reference_group is None:
        run.reference_group = _started(run.reference_side, "reference group")
    second = run.reference_side_b is not None  # the launcher's, where PKB_SECOND_REFERENCE=on
    if second and run.reference_group_b is None:
        run.reference_group_b = _started(run.reference_side_b, "second reference group")
    batches = Batches(run, calls)
    # The batches after the pair: the harness, and the diagnostics' (PKB_GROUP_OFFSETS=on: the
    # candidate group's harness; PKB_SECOND_REFERENCE=on: the second reference group's calls).
    trailing = ("harness", CANDIDATE_HARNESS) if group_offsets_on() else ("harness",)
    if second:
        trailing += (SECOND_REFERENCE,)
    warm = min(WARM_BATCHES, max(1, -(-job.warmup // calls))) if job.warmup else 0
    for i in range(warm):
        for side in (*JUDGE_SIDES, "reference", "candidate", *trailing):
            batches.batch(side, f"{mode}/warm{i}", check=side == "candidate")
    rule = StoppingRule(min_samples=max(1, least), max_samples=cap)
    per_call = {"reference": [], "candidate": []}
    raw = {"reference": [], "candidate": [], **{side: [] for side in (*FLOOR_SIDES, *trailing)}}
    started = time.monotonic()
    round_, stopped, order, tail = 0, None, ("reference", "candidate"), trailing
    orders = []  # each round's order of the compared pair
    on_gpu = run.settings.device == "cuda"
    while stopped is None or (on_gpu and _more_pairs_wanted(raw, orders, time.monotonic() - started, budget_s)):
        order = balanced_order(order, round_, batches.rng)
        orders.append(order)
        for side in JUDGE_SIDES:
            raw[side].append(statistics.median(batches.batch(side, f"{mode}/{round_}/{side}")))
        for side in order:
            value = statistics.median(batches.batch(side, f"{mode}/{round_}/{side}", check=side == "candidate"))
            raw[side].append(value)
            # ms; never floored: a side shorter than the hand-off is judged once the rounds end
            per_call[side].append(per_call_us(value, raw["null"][-1], raw["kernel"][-1]) / 1e3)
        # After the pair, never just before one of them: a batch of the reference group right
        # before the reference's own read 0.4-1 us a call shorter at 4 KiB on one H200 (the
        # reference then follows its own group in half the rounds, the candidate in none).
        # The two groups' harness batches (PKB_GROUP_OFFSETS=on) balanced as the compared pair:
        # neither always follows the other's group.
        tail = balanced_order(tail, round_, batches.rng)
        for side in tail:
            raw[side].append(statistics.median(batches.batch(side, f"{mode}/{round_}/{side}")))
        round_ += 1
        samples = round_ * calls
        stopped = rule.decide_within(samples, *_positive(per_call), time.monotonic() - started, budget_s)
    _judge_against_null(raw)
    _judge_against_harness(raw)
    following = follow_effect(raw, orders)
    order_rule = follow_reading(raw, orders) if on_gpu else None
    judge_following(order_rule)
    pairs = list(zip(per_call["reference"], per_call["candidate"]))
    total = round_ * calls
    alignment = {"reference": "timekeeper windows", "candidate": "timekeeper windows"}
    extra = {"windows_us": {side: round(statistics.median(v), 3) for side, v in raw.items()},
             "raw_speedup": ratio_reading(list(zip(raw["reference"], raw["candidate"]))),
             "beyond_harness_speedup": beyond_harness_speedup(raw),
             "harness_us": round(statistics.median(raw["harness"]) - statistics.median(raw["kernel"]), 3),
             # A diagnostic, never a speedup: a side may skip pkb's harness in its own process.
             "beyond_harness_us": {side: round(statistics.median(raw[side]) - statistics.median(raw["harness"]), 3)
                                   for side in ("reference", "candidate")},
             "null_is_floor": null_is_floor(raw),
             # what following the other compared side's batch, not the judge's, did to each side's windows
             "follow_us": following,
             # the order rule's reading (GPU): the median pair of rounds, its interval, what it may reach
             "follow_rule": None if order_rule is None else order_rule.as_record(),
             # each round's median window of the compared pair, and which of them went first
             "rounds_us": {"reference": [round(v, 3) for v in raw["reference"]],
                           "candidate": [round(v, 3) for v in raw["candidate"]],
                           "first": [order[0] for order in orders]},
             "timekeeper": ",".join(sorted(batches.engines)),
             "harness_copies": ",".join(sorted(batches.harness_copies)),
             # released ahead of their windows, masked (true), or copied inside them (false)
             "masked_sets": ",".join(sorted(str(m).lower() for m in batches.masked)),
             # where the regions' nodes (window_diagnostics.<side>.region_nodes) are read
             "numa_nodes": len(online_nodes()),
             "window_diagnostics": batches.diagnostics()}
    if CANDIDATE_HARNESS in raw:
        extra["group_offsets"] = offset_reading(raw, per_call)
    if SECOND_REFERENCE in raw:
        second_per_call = [per_call_us(value, null, kernel) / 1e3
                           for value, null, kernel in zip(raw[SECOND_REFERENCE], raw["null"], raw["kernel"])]
        extra["second_reference"] = second_reference_reading({"reference": per_call["reference"],
                                                              SECOND_REFERENCE: second_per_call})
    return ModeTiming(reference=summarize(per_call["reference"], per_call["reference"], calls=total),
                      candidate=summarize(per_call["candidate"], per_call["candidate"], calls=total),
                      speedup=with_group_share(speedup(pairs),
                                               group_share(per_call)), stopped=stopped,
                      batches=round_, alignment=alignment, calls_per_batch=calls, extra=extra)


def _more_pairs_wanted(raw: dict, orders: list, spent_s: float, budget_s: float) -> bool:
    """Whether the rounds go on past the stopping rule for the order rule's sake
    (:mod:`pkb_core.conduct.follow_rule`): its median pair is above the allowance and its interval
    is not (or there are too few pairs for one), there are fewer than ``FOLLOW_MAX_PAIRS``, and the
    mode's time is not spent (a pair begun is finished: the two orders stay balanced). A flag
    needs evidence; an honest job whose few pairs happen to read high gets it the other way."""
    reading = follow_reading(raw, orders)
    return reading is not None and reading.undecided and reading.pairs < FOLLOW_MAX_PAIRS and \
        (spent_s <= budget_s or len(orders) % 2 == 1)


def balanced_order(sides: tuple, round_: int, rng) -> tuple:
    """The order of ``sides`` in round ``round_``: drawn at random for each pair of rounds, the
    other way round in its second round (``sides``: the order of the round before)."""
    return tuple(rng.sample(sides, len(sides))) if round_ % 2 == 0 else sides[::-1]


def group_share(per_call: dict) -> float:
    """The share each way by which a speedup's interval is widened for what two groups of the
    same code differ by: :data:`GROUP_SHARE`, and :data:`GROUP_US` of the faster side's median
    per-call time (``per_call``: ms per round, each side)."""
    faster_us = min(statistics.median(per_call[side]) for side in ("reference", "candidate")) * 1e3
    return GROUP_SHARE + (GROUP_US / faster_us if faster_us > 0 else 0.0)


def beyond_harness_speedup(raw: dict) -> dict | None:
    """The speedup of what each side's calls add to pkb's harness (the rounds' windows less the
    round's ``harness`` window), with its interval: the calls' own ratio, where the harness is a
    large share of a window (small sets). A diagnostic, never the headline: a side that skipped
    part of its harness, by less than :func:`harness_slack`, reads faster by that part of a
    small call here, where the headline (less the ``kernel`` window) divides it by the whole
    window. None where a round's window of either side did not reach its harness."""
    pairs = [(r - h, c - h) for r, c, h in zip(raw["reference"], raw["candidate"], raw["harness"])]
    if not pairs or min(min(pair) for pair in pairs) <= 0:
        return None
    return ratio_reading(pairs)


def per_call_us(value: float, null: float, kernel: float) -> float:
    """A side's time per call (us) from its round's median window ``value``: less the ``kernel``
    null where the window reaches it (the side used the compute engine, so its window holds
    the switch of that engine to its context and back), else less the empty hand-off, else
    (a window below the judge's own empty hand-off: judged by :func:`_judge_against_null`)
    nothing."""
    if value >= kernel:
        return value - kernel
    return value - null if value >= null else value


def _positive(per_call: dict) -> tuple[list, list]:
    """The sides' per-call values for the stopping rule (which needs positive times: a value at
    or below the hand-off's is judged by :func:`_judge_against_null` once the rounds end)."""
    return tuple([max(v, 1e-9) for v in per_call[side]] for side in ("reference", "candidate"))


def below_null_slack(null_rounds: list[float]) -> float:
    """How far (us) a side's median window may lie below the null's before the record says the
    null was no floor for it (:func:`null_is_floor`): the null's own noise, at least :data:`BELOW_NULL_US`."""
    median = statistics.median(null_rounds)
    return max(BELOW_NULL_US, BELOW_NULL_SHARE * median, max(null_rounds) - min(null_rounds))


def _under(side: list[float], floor: list[float], slack: float) -> tuple[bool, tuple[float, float]]:
    """Whether ``side``'s windows lie measurably under ``floor``'s: the rounds' differences (each
    round's two batches ran back to back, so what the round's conditions did to both cancels),
    and the 95 % interval of their median entirely below ``-slack`` (with fewer than six rounds,
    every round's difference). The interval, too."""
    differences = [a - b for a, b in zip(side, floor)]
    interval = median_interval(differences) or (min(differences), max(differences))
    return interval[1] < -slack, interval


def _flag_under(raw: dict, floor: str, what: str, meaning: str, slack: float) -> None:
    """``flagged`` where the candidate's windows are measurably under the ``floor`` side's
    (:func:`_under`, by more than ``slack`` us) while pkb's reference group's are not, in the same
    job: the reference runs everything the floor side does, so a side under it did less than
    every honest side must. Paired round by round, not the medians' gap against the floor's
    spread over the job: on a loaded CPU that spread (hundreds of us) let a side skip the whole
    of pkb's harness."""
    level = statistics.median(raw[floor])
    below, interval = _under(raw["candidate"], raw[floor], slack)
    if below and not _under(raw["reference"], raw[floor], slack)[0]:
        candidate = statistics.median(raw["candidate"])
        raise JobEnded(Verdict.FLAGGED,
                       f"the candidate's windows ({candidate:.1f} us, median over {len(raw['candidate'])} rounds) are "
                       f"shorter than {what} ({level:.1f} us) by {-interval[1]:.1f}-{-interval[0]:.1f} us a round "
                       f"(95 % interval; allowed {slack:.1f} us), which the reference's are not "
                       f"({statistics.median(raw['reference']):.1f} us): {meaning} (a timing cheat, never a speedup)")


def _judge_against_null(raw: dict) -> None:
    """A candidate whose windows are measurably shorter than a window with nothing in it did
    less than every side must (wait for its gate, close it): ``flagged``, with the numbers. The
    judge's null is that floor only where pkb's own reference group reaches it in the same job
    (a context's hand-off cost is the hardware's, and on a GPU it has been seen to differ between
    processes): where the reference does not, nothing is flagged and the record says so."""
    slack = max(BELOW_NULL_US, BELOW_NULL_SHARE * statistics.median(raw["null"]))
    _flag_under(raw, "null", "the judge's empty hand-off",
                "its calls did less than waiting for their gates and closing them", slack)


def batch_ended(side: str, times: list) -> JobEnded | None:
    """How a batch that did not end ``ok`` on every rank (its ``WindowTimes``) ends the job, or
    None: ``flagged`` where the judge found the side stopped it (``side_fault``), ``timeout``
    where a call never started or finished, else ``error``."""
    stopped = next((t.status for t in times if t.status != "ok"), None)
    if stopped is None:
        return None
    verdict = Verdict.FLAGGED if any(t.side_fault for t in times) else \
        Verdict.TIMEOUT if "never" in stopped else Verdict.ERROR
    return JobEnded(verdict, f"the {side}'s timed calls: {stopped}")


def arm_failed(side: str, armed: list, holdings) -> JobEnded | None:
    """How a batch whose memory the judge could not make on some rank (its ``Armed``) ends the
    job, or None: ``flagged`` where the judge found it the candidate's doing (``side_fault``: it
    shrank its region as it was made); where a filesystem was full (``room_needed``), ``flagged``
    if the candidate's group holds, beyond what pkb's own reference group holds, at least what did
    not fit and :data:`FILLED_SHARE` of the filesystem (``holdings() -> (candidate's bytes,
    reference group's)``, :func:`held_by`; read only then), else the judge's ``error`` (a machine
    that is full: another job's files, or the judge's own)."""
    failed = [a for a in armed if a.failed]
    if not failed:
        return None
    fault = next((a for a in failed if a.side_fault), None)
    if fault is not None:
        return JobEnded(Verdict.FLAGGED, f"the {side}'s batch: {fault.failed}")
    full = next((a for a in failed if a.room_needed is not None), None)
    if full is None:
        return JobEnded(Verdict.ERROR, f"the {side}'s batch: {failed[0].failed}")
    held, honest = holdings()
    beyond = held - honest
    if beyond >= max(full.room_needed, FILLED_SHARE * (full.room_whole or 0)):
        return JobEnded(Verdict.FLAGGED, f"the {side}'s batch: {full.failed}; the candidate's processes hold "
                                         f"{mib_text(held)} of it, {mib_text(beyond)} more than pkb's own reference "
                                         "group's: the solution filled the shared memory the judge times it through")
    return JobEnded(Verdict.ERROR, f"the {side}'s batch: {full.failed}; the candidate's processes hold "
                                   f"{mib_text(held)} of it, pkb's reference group's {mib_text(honest)}: not the "
                                   "candidate's doing (free room there, or run fewer jobs at once)")


def held_by(run, group) -> int:
    """The bytes of shared memory ``group`` (a job's group of processes, or None) holds: its
    cgroup's own count where it has one (tmpfs pages are charged to the cgroup of the process that
    wrote them, whatever their file's name, folder or link count, an unlinked file still open
    included), else what its folder and its user's files in the shared-memory root take
    (:func:`pkb_core.process.shm_held.held_bytes`)."""
    if group is None:
        return 0
    cgroup = group.containment.cgroup if getattr(group, "containment", None) is not None else None
    counted = cgroup.shmem_bytes() if cgroup is not None else None
    if counted is not None:
        return counted
    from pkb_core.process.shm_held import held_bytes

    folder = run.folder_of(group)
    return held_bytes(folder, os.path.dirname(os.path.dirname(folder)))  # /dev/shm/pkb-<launch>/<group>



def take_allowance_ns(times: list) -> int | None:
    """How long the timekeeper waits for a compared side's ``taken`` after a release, from the
    judge's ``kernel`` batch on every rank (their ``WindowTimes``): the slowest rank's 90th
    percentile of its takes (an honest take's spread is in steps of the copy engine, several us at
    1 MiB, so its median would call many honest takes late), with :data:`TAKE_ROOM_SHARE` and
    :data:`TAKE_ROOM_NS` of room; None where the batch's sets were not masked."""
    highs = [t.take_high_ns if t.take_high_ns is not None else t.take_ns for t in times]
    if not highs or not all(isinstance(v, int) for v in highs):
        return None
    return int(max(highs) * (1 + TAKE_ROOM_SHARE)) + TAKE_ROOM_NS


def harness_slack(harness_rounds: list[float]) -> float:
    """How far (us) a candidate's windows may lie under the ``harness`` side's, round by round and
    beyond the interval of the rounds, before they are read as having skipped part of pkb's
    harness: what two groups of processes running the same code differ by for a whole job
    (:data:`GROUP_US`, :data:`GROUP_SHARE` of the harness window), which no interval over the
    rounds sees."""
    return max(GROUP_US, GROUP_SHARE * statistics.median(harness_rounds))


def _judge_against_harness(raw: dict) -> None:
    """A candidate whose windows are measurably shorter than the ``harness`` side's (pkb's placing,
    device barrier and export with no call, run by the reference group: a group's process like
    the candidate's, with the candidate's harness code) skipped part of that harness in its own
    process (a rebound window loop: every honest side runs it, and a call on top), where the
    reference's calls, which run the same harness in the same processes, reach it in the same
    job: ``flagged``. (The harness exports each set once, as a call's arguments after it, and as
    many bytes as the reference's outputs: every honest call exports that much, its outputs being
    the reference's shapes and dtypes, so an honest side's windows hold the harness
    whatever the problem.) The allowance is
    what two groups of the same code differ by (:func:`harness_slack`), not a share of the
    harness: a side may skip no more of it than the clock cannot tell from that."""
    _flag_under(raw, "harness", "pkb's own harness with no call (the reference group's)",
                "its process skipped pkb's placing, barrier or export of each call", harness_slack(raw["harness"]))


def null_is_floor(raw: dict) -> bool:
    """Whether both sides' windows reached the judge's empty hand-off (see :func:`_judge_against_null`)."""
    floor = statistics.median(raw["null"]) - below_null_slack(raw["null"])
    return all(statistics.median(raw[side]) >= floor for side in ("reference", "candidate"))


def layouts(answer) -> list:
    """A side's word on where each call's outputs lie (``WindowsRan.skeletons``), as the judge's
    request takes it: a list, or none at all (then every checked call is "no layout was given",
    the side's ``fail``). Anything else it answered had the judge refuse the request, and the job
    read as the judge's ``error`` (a hostile review)."""
    return answer.skeletons if isinstance(answer.skeletons, list) else []
