"""The judge's commands and answers (handled by :class:`pkb_core.judge.rank.JudgeRank`'s
``on_<op>``; :mod:`pkb_core.contracts.commands` pairs them). The judge is pkb's own
process, but its answers are read with the same strict classes as a candidate's."""
from __future__ import annotations

import typing

import attrs

from pkb_core.contracts.job import Job
from pkb_core.contracts.messages import Answer, Parcel, Request, optional_text
from pkb_core.contracts.serial import optional


@attrs.frozen(kw_only=True)
class LoadJob(Request):
    """A new job: load its problem, forget the previous one. Its inputs are drawn from
    the run secret and ``job_key`` (the launcher's, fresh per job)."""

    OP = "job"
    job: Job
    job_key: str = ""


@attrs.frozen(kw_only=True)
class DrawInputs(Request):
    """Draw trial ``trial``'s inputs, keep them, write them to a parcel at ``path``."""

    OP = "inputs"
    trial: int
    path: str


@attrs.frozen(kw_only=True)
class Check(Request):
    """Run the reference on a copy of trial ``trial``'s inputs and compare the candidate's
    parcel (outputs, and its arguments after the call). ``dryrun``: only read the parcel."""

    OP = "check"
    trial: int
    candidate: Parcel
    dryrun: bool = False


@attrs.frozen(kw_only=True)
class Save(Request):
    """Keep the last trial's outputs in the run directory under ``outputs/<slug>``."""

    OP = "save"
    slug: str
    dryrun: bool = False


@attrs.frozen(kw_only=True)
class DrawPool(Request):
    """Draw ``k`` fresh input sets (round ``round``: ``<mode>/warm`` or ``<mode>/<n>``) into a
    parcel at ``path``; nothing runs on them yet."""

    OP = "pool"
    round: str
    k: int
    path: str


@attrs.frozen(kw_only=True)
class WarmReference(Request):
    """Start timing mode ``mode``: ``count`` warm-up calls on the warm-up sets (and their
    capture in graph mode)."""

    OP = "warm"
    mode: str
    count: int


@attrs.frozen(kw_only=True)
class TimeReference(Request):
    """One timed batch of the reference, with the candidate's harness work: read the
    round's parcel, place it, call, export outputs and arguments."""

    OP = "time"
    mode: str
    skeleton: typing.Any
    path: str
    #: Graph mode: how many times the captured batch is replayed.
    replays: int = 0


@attrs.frozen(kw_only=True)
class ReferenceTimed(Answer):
    """The reference's batch: its own per-call times (a diagnostic), its outputs' and
    arguments' bytes (which decide how many timed calls are checked), its barrier."""

    times: list[float]
    out_bytes: int
    alignment: str | None = optional_text(200)


@attrs.frozen(kw_only=True)
class CheckSample(Request):
    """Compare the candidate's timed calls ``indices`` (its parcel) with the reference's."""

    OP = "check_sample"
    indices: list[int]
    candidate: Parcel


@attrs.frozen(kw_only=True)
class ReadClocks(Request):
    """This GPU's clocks and throttle reasons."""

    OP = "clocks"


@attrs.frozen(kw_only=True)
class Clocks(Answer):
    """What :func:`pkb_core.machine.clocks.read_clocks` found (empty on CPU)."""

    clocks: dict | None = optional()


#: The judge's own sides in window mode, this rank as the side (:mod:`pkb_core.conduct.window_rounds`):
#: ``null``, the empty hand-off (each window a wait for ``go`` and ``done``); ``kernel``, the
#: hand-off to a side that runs one kernel, the export of as many bytes as the reference's calls
#: export (on a GPU, also what switching the compute engine to a side's context costs).
JUDGE_SIDES = ("null", "kernel")
#: Window mode's sides run by pkb's reference group: ``harness``, pkb's harness with no call
#: (placing each set, the device barrier and the export: what an honest side's window holds
#: besides its call, in a group's process like the candidate's), and ``reference``, the calls.
REFERENCE_GROUP_SIDES = ("harness", "reference")
#: Window mode's sides run by the candidate's group: ``candidate``, the calls, and (where
#: ``PKB_GROUP_OFFSETS=on``: :mod:`pkb_core.conduct.group_offsets`) ``candidate_harness``, the
#: same harness batch as ``harness`` in the candidate's processes, a diagnostic of what the two
#: groups differ by.
CANDIDATE_GROUP_SIDES = ("candidate", "candidate_harness")
#: The sides whose batches run pkb's harness with no call.
HARNESS_SIDES = ("harness", "candidate_harness")


@attrs.frozen(kw_only=True)
class ArmWindows(Request):
    """Draw ``k`` fresh input sets (round ``round``) into the timekeeper's private staging
    for ``side`` (``reference``, ``candidate``, ``harness`` or one of the judge's own
    :data:`JUDGE_SIDES`: docs/timing.md), keep them for
    the check, and make sure the side's gate region fits them. ``folder``: where a CPU
    region's file goes (the side's own shared-memory folder; empty: the judge's)."""

    OP = "arm"
    side: str
    round: str
    k: int
    folder: str = ""
    #: The candidate group's folder (window mode): a region made there that a side shrank as it
    #: was made is the candidate's doing.
    candidate_folder: str = ""
    #: The job's board token (host engine, two or more ranks of a node): the side's board is made
    #: with its memory, so that no board is first touched, and faulted in, once a batch is open.
    board: str = ""


@attrs.frozen(kw_only=True)
class Armed(Answer):
    """The sets' skeletons (their layout in the side's ``in_slot``: no values) and the gate
    region this batch runs on, one of the side's pool (:mod:`pkb_core.judge.region_pool`), as
    the side attaches it (handle or path, slot sizes, ``pool``, and ``key``, its name to the
    timekeeper)."""

    skeletons: list
    region: dict
    #: The bytes of ``out_slot`` the reference's calls fill (outputs and arguments after the
    #: call): what a side with nothing of its own to export says it filled.
    fill: int = 0
    #: Why the batch cannot run, where the judge could not make its memory (a filesystem with no
    #: room for a gate region, a board or the staging; a region shrunk under the timekeeper as it
    #: was made): the job's end, ``flagged`` where ``side_fault`` (the candidate's doing, by the
    #: judge's own evidence), else decided by the launcher where ``room_needed`` says a filesystem
    #: was full (:func:`pkb_core.conduct.window_rounds.arm_failed`: whose group holds the room), else
    #: the judge's ``error``.
    failed: str | None = optional_text()
    side_fault: bool | None = optional()
    #: A full filesystem: the bytes the judge could not make there, and the filesystem's size.
    room_needed: int | None = optional()
    room_whole: int | None = optional()


@attrs.frozen(kw_only=True)
class OpenWindows(Request):
    """Run the armed sets of ``side`` through the timekeeper's windows (round epoch
    ``epoch``); for the judge's own :data:`JUDGE_SIDES` the judge's rank is the side itself."""

    OP = "open"
    side: str
    epoch: int
    timeout_s: float
    #: The job's batches' name on the host engine's board, where one node's timekeepers meet
    #: before each window (one name for all ranks; "" for none).
    board: str = ""
    #: The windows whose outputs the timekeeper copies out (drawn by the launcher before the
    #: batch, never told to the side); None: every window's.
    snapshots: list[int] | None = optional()
    #: Masked sets (host engine): how long after a set's release the side may take before its
    #: window's clock starts anyway, in nanoseconds (the judge's ``kernel`` side's take in the same
    #: round, with room): time a side spends before saying ``taken`` beyond it is inside its
    #: window. None: the clock starts when the window opens.
    take_allowance_ns: int | None = optional()


@attrs.frozen(kw_only=True)
class WindowTimes(Answer):
    """The timekeeper's time of each window, in nanoseconds, and ``ok`` or what stopped it;
    ``host_us``: when the judge's rank was the side, its host time per call (a diagnostic)."""

    times_ns: list[int]
    status: str
    #: Whether what stopped the batch is the side's doing, by the judge's own evidence (its
    #: timekeeper killed by a shrunk gate region in the side's folder): ``flagged``, not an error.
    side_fault: bool | None = optional()
    host_us: float | None = optional()
    #: When the judge's rank was the side: its garbage collections during the batch.
    collections: int | None = optional()
    #: The first window whose call the side had not queued ahead of its gate (GPU: the
    #: timekeeper opened that gate itself after waiting; that window and the batch's later
    #: ones may hold the side's host time); None when every call was queued ahead.
    not_queued_ahead: int | None = optional()
    #: Which engine timed the batch: ``host`` (no CUDA context of the judge's on the side's GPU)
    #: or ``device`` (docs/timing.md, "The two engines").
    engine: str | None = optional()
    #: The timekeeper's own wall time for the batch, and (host engine) before its first window
    #: opened, in nanoseconds: what a batch costs beside its windows (diagnostics).
    batch_ns: int | None = optional()
    first_wait_ns: int | None = optional()
    #: The host engine's: the median time inside a window of the release of its set into
    #: ``in_slot`` and (over the windows copied out) of the snapshot, in nanoseconds: how much of
    #: a window is the engine's own copies (diagnostics).
    release_ns: int | None = optional()
    snapshot_ns: int | None = optional()
    #: The host engine's: the NUMA node holding the side's gate region on this rank
    #: (:mod:`pkb_core.machine.numa`; a diagnostic).
    region_node: int | None = optional()
    #: The host engine's on GPU: how many of the batch's calls the side had queued when its first
    #: window opened (all of them unless its queueing waited on the device; a diagnostic).
    queued_ahead: int | None = optional()
    #: Masked sets (host engine): the median time from a set's release to the side's ``taken`` (or
    #: to the allowance's end, where the window opened without it), in nanoseconds (the ``kernel``
    #: side's is the next batches' allowance).
    take_ns: int | None = optional()
    #: The same takes' 90th percentile (the ``kernel`` side's is the next batches' allowance: an
    #: honest take past the median by a step of the copy engine is not a late one).
    take_high_ns: int | None = optional()


@attrs.frozen(kw_only=True)
class CheckWindows(Request):
    """Compare what the candidate's calls ``indices`` left in their snapshots (laid out as
    its ``skeletons`` say, read under the untrusted limits) with the reference's."""

    OP = "check_windows"
    indices: list[int]
    skeletons: list
