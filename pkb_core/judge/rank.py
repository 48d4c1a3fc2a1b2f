"""The judge's rank: inputs, the reference, comparison and the reference's timing.

One judge process per rank serves a whole launch (every job of one backend and
world size). It never imports candidate code and nothing in it is patched: it
holds the run secret, draws every input, runs the problem's reference with a
real process group (NCCL on GPU, gloo on CPU), reads what a candidate sent back
as data (:mod:`pkb_core.harness.parcel`), compares it and times the reference. Its
answers go to the launcher, which combines the ranks' verdicts and writes the
record. See docs/trust.md for why it is built this way.

Commands (each answered with the same ``op``; their request and answer classes are in
:mod:`pkb_core.contracts.commands_judge`, paired in :mod:`pkb_core.contracts.commands`):

``job``          load the problem of a job; forget the previous one
``inputs``       draw trial ``t``'s inputs, keep them, write them to a parcel
``check``        run the reference on a copy of trial ``t``'s inputs and compare
                 the candidate's parcel (outputs, and its arguments after the call)
``save``         keep a trial's outputs in the run directory (``--save-outputs``)
``pool``         draw ``k`` fresh input sets for timing (a mode's warm-up sets or a round's),
                 write them to a parcel; nothing runs on them yet
``warm``         start a timing mode: warm the reference up on the warm-up sets (capture
                 them in a CUDA graph in graph mode; the first one also makes the
                 judge's device barrier: :meth:`JudgeRank.align`)
``time``         one timed batch of the reference, the same harness work as the candidate's:
                 read the round's parcel, place it, call, export outputs and arguments
``check_sample`` compare the candidate's timed calls with the reference's: outputs and
                 the arguments after the call
``clocks``       this GPU's clocks and throttle reasons
``profile``      a profiler trace of a few reference calls
"""
from __future__ import annotations

import dataclasses
import signal
import time

import torch

from pkb_core.contracts.commands_judge import (JUDGE_SIDES, Armed, ArmWindows, Check, CheckSample, CheckWindows, Clocks,
                                               DrawInputs, DrawPool, LoadJob, OpenWindows, ReadClocks,
                                               ReferenceTimed, Save, TimeReference, WarmReference, WindowTimes)
from pkb_core.contracts.messages import Done, Finding, Packed, Parcel, Profiled, ProfileRequest, Warmed
from pkb_core.contracts.verdict import Verdict
from pkb_core.contracts.dtypes import torch_dtype
from pkb_core.errors import describe, mib_text
from pkb_core.judge.check import EXACT_TOLERANCE, Finding as Difference, compare
from pkb_core.judge.clock import NoRoom, TimekeeperFailed
from pkb_core.harness import mask
from pkb_core.harness.trees import leaves
from pkb_core.harness.parcel import TRUSTED, UNTRUSTED, Limits, ParcelError, pack, pack_into, packed_size, \
    skeleton_end, stand_in_outputs, unpack, unpack_from
from pkb_core.problem.contract import RunContext, read_spec
from pkb_core.harness.timing import BatchTimer
from pkb_core.harness.trees import clone, identical, restore


#: Every timed set (latency and window modes alike) draws its inputs with every mantissa bit used:
#: one kind of data for every timed call, as real data is. With every other set integer-valued, a
#: call that found which kind it had (from its window's index in pkb's own frames, or from one
#: element's value) took a path exact only on small integers (int8 codes) on those, and a batch's
#: median moved with half its windows: 1.07-1.17x "faster" for an all-reduce that is wrong on
#: any other data, in 3 of 3 CPU runs (a hostile review, 2026-12-01). The integer-valued draws,
#: compared bit for bit, are the trials' (:func:`full_mantissa_trial`).
TIMED_FULL_MANTISSA = True


def full_mantissa_trial(trial: int, trials: int) -> bool:
    """Whether checked trial ``trial`` of ``trials`` draws full-mantissa inputs: every odd one, or
    a single one (the even ones are integer-valued and compare bit for bit on ``EXACT`` problems)."""
    return trial % 2 == 1 or trials == 1


class JudgeRank:
    """What one judge process does for the launcher (see the module docstring)."""

    def __init__(self, *, rank, world_size, device, secret, barrier, run_dir, store=None, run_id="",
                 local_world_size=None, local_rank=None):
        self.rank = rank
        self.world_size = world_size
        self.device = device
        self.secret = secret
        self.run_dir = run_dir
        self.store = store
        self.run_id = run_id
        self.local_world_size = world_size if local_world_size is None else local_world_size
        self.local_rank = rank % self.local_world_size if local_rank is None else local_rank
        self.timer = BatchTimer(device, barrier)
        self.aligned = False
        self.groups = {}  # process groups the problems build, cached for the launch
        self.job = None
        self.problem = None

    def _sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def context(self, trial: int, full_mantissa=False, label: str | None = None) -> RunContext:
        job = self.job
        return RunContext(rank=self.rank, world_size=self.world_size, device=self.device,
                          dtype=torch_dtype(job.dtype), size=job.size, params=job.params, trial=trial,
                          secret=self.job_secret, problem_key=self.problem.spec.key, groups=self.groups,
                          full_mantissa=full_mantissa, label=label)

    # -- commands ---------------------------------------------------------------
    def on_job(self, request: LoadJob) -> Done:
        """A new job. Its inputs are drawn from the run secret *and* ``job_key``
        (the launcher's, fresh per job): input->output pairs one job saw answer
        no other job's inputs, even of the same problem and trial."""
        self.job = job = request.job
        self.job_secret = f"{self.secret}/{request.job_key}"
        self.problem = read_spec(job.problem_path).load()
        self.trial_args = None
        self.ref_out_bytes = self.ref_out_most = 0
        self.armed = {}
        self.pool = None
        self.timer = self.timer.renewed()
        if getattr(self, "clock", None) is not None:
            self.clock.leave_boards()  # the last job's: its batches are over on every rank
        return Done()

    def on_inputs(self, request: DrawInputs) -> Packed:
        trial = request.trial
        full = full_mantissa_trial(trial, self.job.trials)
        ctx = self.context(trial, full)
        args = self.problem.inputs(ctx)
        self.trial_args = clone(args)
        self.trial_full = full
        self.trial_exact = not full and self.problem.spec.exact
        return Packed(skeleton=pack(args, request.path, group_blocks=ctx.group_blocks))

    def on_check(self, request: Check) -> Finding:
        """The reference on a copy of the trial's inputs, then this rank's comparison.

        In a dry run only the candidate's outputs are read (for ``save``)."""
        candidate = request.candidate
        if request.dryrun:
            received = self._receive(candidate, budget=None)
            self.last_candidate = received if isinstance(received, dict) else None
            return Finding()
        ref_args = clone(self.trial_args)
        try:
            ref_out = self.problem.reference(*ref_args)
            self._sync()
        except Exception as exc:  # noqa: BLE001 - a reference that raises is the job's error
            return Finding(verdict=Verdict.ERROR, reason=f"the reference raised {describe(exc)}")
        self.last_reference = ref_out
        self.ref_out_bytes = packed_size({"out": ref_out, "args": ref_args})
        # The largest of the job's trials sizes window mode's out_slot: a problem's outputs may vary
        # in size with its draw (65's rows are a sum of random counts; a timed set's export
        # overflowed a slot sized from the last trial's on 2xH200).
        self.ref_out_most = max(self.ref_out_most, self.ref_out_bytes)
        # Collective (the reference on the magnitudes): every rank, before any rank can
        # return early on what its candidate sent, or its peers would wait for it.
        bound = self._exact_bound(self.trial_args) if self.trial_full and self.problem.spec.exact else None
        received = self._receive(candidate, budget=_nbytes(ref_out) + _nbytes(ref_args))
        if isinstance(received, str):
            return Finding(verdict=Verdict.FAIL, reason=received)
        self.last_candidate = received
        tolerance = EXACT_TOLERANCE if self.trial_exact else self.problem.spec.tolerance
        wrong = compare(received["out"], ref_out, tolerance, bound and bound[0])
        modified = self._arguments_after(received["args"], self.trial_args, ref_args, tolerance, bound and bound[1])
        problem = wrong or modified
        if wrong and modified:
            # Both: a wrong answer computed in its input says so, or the author reads the difference
            # alone and not its cause (a new user's `tensor.mul_(2); return tensor`).
            problem = Difference.of(f"{wrong}; and {modified}", wrong)
        return Finding(verdict=Verdict.FAIL if problem else None, reason=problem or "", **_finding(problem))

    def _exact_bound(self, args):
        """``(outputs, arguments)``: per element, how far an honest result may lie
        from the reference's on a full-mantissa draw of an ``EXACT`` problem.

        ``EXACT`` problems sum their inputs (with coefficients >= 0), so the
        reference run on the inputs' magnitudes gives, per element, the sum of
        the magnitudes ``S`` of the terms. Any order of summation in the working
        dtype lies within ``(n - 1) * u * S`` of the true sum (``u`` = eps / 2,
        ``n`` the terms: the world size), and so does the reference: two honest
        results lie within ``W * eps * S`` of each other. The dtype's own
        rounding is all the room there is: a wire format that drops bits (int8
        codes with a per-row scale, say) errs by far more on small elements and
        fails at bf16 as it does at fp32. (Collective: every rank runs it.)"""
        magnitudes = clone(args)
        with torch.no_grad():  # a layer's parameters are leaves that require grad
            for _, leaf in leaves(magnitudes):
                if isinstance(leaf, torch.Tensor) and leaf.is_floating_point():
                    leaf.abs_()
        out = self.problem.reference(*magnitudes)
        self._sync()

        def scaled(tree):
            if isinstance(tree, torch.Tensor):
                if not tree.is_floating_point():
                    return tree
                eps = torch.finfo(tree.dtype).eps
                return tree.to(torch.float64) * (self.world_size * eps)
            if isinstance(tree, (list, tuple)) and not isinstance(tree, torch.Size):
                return [scaled(v) for v in tree]
            if isinstance(tree, dict):
                return {k: scaled(v) for k, v in tree.items()}
            return tree

        return scaled(out), scaled(list(magnitudes))

    def _receive(self, candidate: Parcel, budget) -> dict | str:
        """The candidate's parcel as ``{"out", "args"}``, or why it cannot be read.

        :param budget: the bytes the reference's own answer takes; a parcel
            may hold twice that plus 1 MiB (room for a wrong answer to be
            reported as wrong, not for one that would exhaust this process).
        """
        limits = UNTRUSTED if budget is None else dataclasses.replace(UNTRUSTED, max_bytes=2 * budget + (1 << 20))
        try:
            value = unpack(candidate.skeleton, candidate.path, device=self.device, limits=limits)
        except ParcelError as exc:
            return f"the solution's outputs could not be read: {exc}"
        except Exception as exc:  # noqa: BLE001 - whatever its description makes fail is the candidate's
            return f"the solution's outputs could not be read: {describe(exc)}"
        if not (isinstance(value, dict) and set(value) == {"out", "args"}):
            return "the solution's outputs could not be read: not the harness's parcel"
        return value

    def _arguments_after(self, cand_args, before_args, ref_args, tolerance, bound=None) -> str | None:
        """The buffers the candidate was given, as they were after its call:
        arguments the problem updates in place (``MUTATES``) must match the
        reference's (``ref_args``, after its call); every other tensor must be
        as it was (``before_args``)."""
        mutates = self.problem.mutates
        if not isinstance(cand_args, (list, tuple)) or len(cand_args) != len(before_args):
            return "the solution's arguments could not be read back"
        for i, (after, before) in enumerate(zip(cand_args, before_args)):
            if i in mutates:
                problem = compare(after, ref_args[i], tolerance, bound and bound[i])
                if problem:
                    return Difference.of(f"argument {i} (updated in place): {problem.replace('out', 'value', 1)}",
                                      problem, output=f"argument {i} (updated in place)")
                continue
            # By path, every tensor of the argument as it was handed over: a tree sent back with
            # fewer leaves (an argument sent back as an empty tuple) has nothing to be compared
            # with, which a walk of both trees side by side stopped at and passed (a hostile file
            # all-reduced into its input and so skipped its clone, 2026-11-30): a tensor missing
            # from what came back is an input modified.
            sent_back = dict(leaves(after, f"argument {i}"))
            for path, b in leaves(before, f"argument {i}"):
                a = sent_back.get(path)
                if isinstance(b, torch.Tensor) and not (isinstance(a, torch.Tensor) and identical(a, b)):
                    return Difference.input_modified(path)
        return None

    def on_save(self, request: Save) -> Done:
        folder = self.run_dir / "outputs" / request.slug
        folder.mkdir(parents=True, exist_ok=True)
        payload = {"candidate": _to_cpu(self.last_candidate["out"]) if getattr(self, "last_candidate", None) else None}
        if not request.dryrun:
            payload.update(reference=_to_cpu(self.last_reference), inputs=_to_cpu(self.trial_args))
        torch.save(payload, folder / f"rank{self.rank}.pt")
        return Done()

    # -- timing ---------------------------------------------------------------
    def align(self):
        """Make the judge's device barrier, once per judge process (collective:
        every judge rank gets its first ``pool`` together). Its flags live in an
        allocation of the core's default heap made for it alone (the judge holds
        no other symmetric memory) in a folder only the judge can name. On one
        node a barrier that cannot be made is an error (the job's), never a
        silent fall-back to the host barrier; across nodes the host barrier is
        the one there is, and the records say so."""
        if self.aligned:
            return
        self.aligned = True
        from pkb_core.harness import device_barrier
        from pkb_core.harness.barrier import StoreBarrier
        from pkb_core.symmetric import default_heap

        def heap():
            pacing = StoreBarrier(self.store, self.world_size, self.device, prefix="pkb-judge-heap")
            return default_heap(self.device, pacing, self.run_id, self.rank, self.world_size)

        if self.store is None:
            self.timer.alignment = "host barrier only: no store to agree on a device barrier"
            return
        barrier, note = device_barrier.create(heap, self.device, store=self.store, rank=self.rank,
                                              world_size=self.world_size, local_world_size=self.local_world_size,
                                              key="pkb-judge-device-barrier", required=True)
        self.timer.device_barrier, self.timer.alignment = barrier, note

    def on_pool(self, request: DrawPool) -> Packed:
        """``k`` fresh input sets (a mode's warm-up sets, ``round`` ``<mode>/warm``,
        or one round's), written to a parcel and kept until ``warm`` or ``time``."""
        sets = []
        for i in range(request.k):
            ctx = self.context(i, full_mantissa=TIMED_FULL_MANTISSA, label=f"timing/{request.round}/{i}")
            sets.append(self.problem.inputs(ctx))
        self.drawn = sets
        return Packed(skeleton=pack(sets, request.path, group_blocks=ctx.group_blocks))

    def _place(self, sets) -> bool:
        """Copy ``sets`` into the reference's pool, at the same addresses from
        round to round when the layout allows (a captured graph replays on
        them); True when the pool had to move."""
        self.pristine = sets
        if self.pool is not None and _same_layout(self.pool, sets):
            for dst, src in zip(self.pool, sets):
                restore(dst, src, range(len(src)))
            return False
        self.pool = [clone(s) for s in sets]
        return True

    def _calls(self):
        reference = self.problem.reference
        return [(lambda args=args: reference(*args)) for args in self.pool]

    def _refresh(self):
        mutates = self.problem.mutates
        if not mutates:
            return None
        return lambda i: restore(self.pool[i], self.pristine[i], mutates)

    def on_warm(self, request: WarmReference) -> Warmed:
        self.align()
        self._place(self.drawn)
        self.timer.warm_up(self._calls(), request.count, self._refresh())
        if request.mode == "graph":
            self.timer = self.timer.renewed()
            return Warmed(failure=self.timer.capture(self._calls()))
        return Warmed()

    def on_time(self, request: TimeReference) -> ReferenceTimed:
        """The reference's batch, with the candidate's harness work: the round's
        parcel is read and placed inside the window (the judge's own drawn sets
        are what it places: the same values, already the judge's)."""
        mode = request.mode
        unpack(request.skeleton, request.path, limits=TRUSTED, device=self.device, make_group=lambda *_: None)
        moved = self._place(self.drawn)
        if mode == "graph" and moved:
            raise RuntimeError("graph mode: the round's inputs did not fit the captured buffers")
        times, outputs = self.timer.run(self._calls(), mode, refresh=self._refresh(), replays=request.replays)
        self.timed_outputs = outputs
        # The same export the candidate makes (outputs and argument buffers), so both
        # sides' harness costs match; into a file nobody else can open (the reference's
        # answers are never where a candidate could read or link them).
        pack({"out": outputs, "args": self.pool}, None)
        return ReferenceTimed(times=times, out_bytes=_nbytes(outputs) + _nbytes(self.pool),
                              alignment=self.timer.alignment)

    def on_check_sample(self, request: CheckSample) -> Finding:
        """Compare the candidate's timed calls ``indices`` with the reference's:
        every output, and every argument buffer after the call (``MUTATES``
        arguments against the reference's, the others unchanged)."""
        # Collective (the reference on the magnitudes), so every rank takes every index's
        # tolerance before any rank can return early on what its candidate sent.
        indices = request.indices
        tolerances = {index: self._timed_tolerance(index) for index in indices}
        received = self._receive(request.candidate, budget=_nbytes(self.timed_outputs) + _nbytes(self.pool))
        if isinstance(received, str):
            return Finding(verdict=Verdict.FAIL, reason=received)
        outputs, args = received["out"], received["args"]
        count = len(self.timed_outputs)
        if not (isinstance(outputs, (list, tuple)) and len(outputs) == count and
                isinstance(args, (list, tuple)) and len(args) == count):
            return Finding(verdict=Verdict.FAIL, reason="the solution's timed outputs could not be read back")
        for index in indices:
            tolerance, bound = tolerances[index]
            problem = compare(outputs[index], self.timed_outputs[index], tolerance, bound and bound[0]) or \
                self._arguments_after(args[index], self.pristine[index], self.pool[index], tolerance,
                                      bound and bound[1])
            if problem:
                return Finding(verdict=Verdict.FAIL, reason=f"timed call {index} of a batch, on fresh inputs: {problem} "
                                                            "(the timed calls must compute what the checked ones do)",
                               **_finding(problem, call=f"timed call {index} of a batch"))
        return Finding()

    def _timed_tolerance(self, index):
        """``(tolerance, bound)`` for timed call ``index``: every timed set uses the
        full mantissa (:data:`TIMED_FULL_MANTISSA`), so an ``EXACT`` problem's
        compares within the dtype's own rounding of the sum (:meth:`_exact_bound`),
        as its full-mantissa trials do."""
        if not self.problem.spec.exact:
            return self.problem.spec.tolerance, None
        return self.problem.spec.tolerance, self._exact_bound(self.pristine[index])

    # -- the timekeeper's windows (docs/timing.md) -------------------------------------
    def _clock(self):
        if getattr(self, "clock", None) is None:
            import os

            from pkb_core.judge.clock import JudgeClock
            from pkb_core.symmetric.shm import SHM_DIR_ENV

            self.clock = JudgeClock(self.device, os.environ.get(SHM_DIR_ENV) or None, rank=self.rank,
                                    local_rank=self.local_rank, local_ranks=self.local_world_size)
        return self.clock

    def on_arm(self, request: ArmWindows) -> Armed:
        """Draw ``k`` fresh sets for ``side`` into the timekeeper's staging (never a side's memory)."""
        from pkb_core.judge.clock import stride

        clock = self._clock()
        sets, blocks = [], None
        for i in range(request.k):
            ctx = self.context(i, full_mantissa=TIMED_FULL_MANTISSA, label=f"windows/{request.round}/{i}")
            sets.append(self.problem.inputs(ctx))
            blocks = ctx.group_blocks
        set_bytes = max(packed_size(s) for s in sets)
        # What a call leaves in its out_slot: outputs and argument buffers, as the reference's in
        # the largest trial (twice over: a candidate's tree may be laid out less tightly, and a
        # set's outputs may be larger than any trial's; the compare judges it).
        out_bytes = 2 * max(self.ref_out_most, set_bytes) + 4096
        keeper = clock.arm(request.side, set_bytes)
        try:
            keeper.memory(request.k, set_bytes, out_bytes)
        except NoRoom as full:
            return self._no_room(full)
        step = stride(set_bytes)
        sizes = [packed_size(s) for s in sets]
        keys = None
        if mask.masks_sets(self.device.type == "cuda", keeper.host_engine, set_bytes):
            # Released ahead of each window, unreadable until it opens (docs/timing.md, "A set
            # released ahead of its window"): a fresh key a window; each set packed and masked on
            # this device, then copied into the staging once.
            keys = [mask.new_key() for _ in sets]
            # Zeroed: the gaps between a set's tensors would otherwise carry old device memory.
            scratch = torch.zeros(step, dtype=torch.uint8, device=self.device)
            skeletons = []
            for w, s in enumerate(sets):
                skeletons.append(pack_into(s, scratch, group_blocks=blocks))
                n = 4 * mask.words(sizes[w])
                mask.mask_in_place(scratch[:n], keys[w])
                keeper.staging[w * step:w * step + n].copy_(scratch[:n])
        else:
            skeletons = [pack_into(s, keeper.staging[w * step:(w + 1) * step], group_blocks=blocks)
                         for w, s in enumerate(sets)]
        self._sync()
        try:
            made = keeper.region(request.side, set_bytes, out_bytes, request.folder or None)
        except NoRoom as full:
            return self._no_room(full)
        except TimekeeperFailed as exc:
            # The timekeeper allocates and touches a region before it hands the file to the
            # side's user, so under root no side can shrink it there; without root the candidate
            # runs as the judge's user (a lockdown gap) and can: a SIGBUS while the timekeeper
            # made a file in the candidate's own folder is the candidate's, as in a window.
            if not (request.folder and request.folder == request.candidate_folder and exc.status == -signal.SIGBUS):
                raise
            self._fresh_clock()
            return Armed(skeletons=[], region={}, side_fault=True,
                         failed="the judge's timekeeper was killed (SIGBUS) making the candidate's gate region: "
                                "a file in the candidate's folder was shrunk under it")
        try:
            if keeper.host_engine:
                clock.make_board(request.board, request.side)
        except NoRoom as full:
            return self._no_room(full)
        region = {**made, "masked": keys is not None}
        self.armed[request.side] = {"sets": sets, "skeletons": skeletons, "region": region, "keys": keys,
                                    "sizes": sizes, "set_stride": step,
                                    "snap_stride": stride(out_bytes), "out_bytes": region["out_bytes"]}
        return Armed(skeletons=skeletons, region=region, fill=min(self.ref_out_bytes, region["out_bytes"]))

    def on_open(self, request: OpenWindows) -> WindowTimes:
        """The armed sets of ``request.side`` through the timekeeper's windows. For the
        judge's own sides (:data:`JUDGE_SIDES`) this rank is the side, and calls nothing."""
        armed = self.armed[request.side]
        clock = self._clock()
        keeper = clock.of(request.side)
        own = request.side in JUDGE_SIDES  # the reference and the candidate are groups
        window_side = self._window_side(request.side, armed) if own else None
        # Before the timekeeper waits for it.
        call = self._side_call(request.side, min(self.ref_out_bytes, armed["out_bytes"])) if own else None
        meeting = clock.board(request.board, request.side) if keeper.host_engine else {}
        masked = {"keys": armed["keys"], "take_allowance_ns": request.take_allowance_ns} if armed["keys"] else {}
        keeper.send("open", side=armed["region"]["key"], epoch=request.epoch, sizes=armed["sizes"],
                    set_stride=armed["set_stride"], snap_stride=armed["snap_stride"], timeout_s=request.timeout_s,
                    snapshots=request.snapshots, **meeting, **masked)
        failure = None
        if own:
            try:
                # The judge's own sides say they filled what the reference's calls fill, so the
                # host engine copies as much out of their windows as out of a real side's.
                window_side.run(epoch=request.epoch, skeletons=armed["skeletons"], call=call,
                                timeout_s=request.timeout_s, make_group=lambda *_: None,
                                fill=min(self.ref_out_bytes, armed["out_bytes"]))
            except Exception as exc:  # noqa: BLE001 - reported after the timekeeper's answer
                failure = exc
        try:
            answer = keeper.receive()
        except TimekeeperFailed as exc:
            if request.side != "candidate" or exc.status != -signal.SIGBUS:
                raise
            return self._region_shrunk(meeting, request.epoch + len(armed["sizes"]), keeper.engine)
        if failure is not None:
            raise failure
        armed["copied"] = answer.get("copied")  # the host engine's: bytes of each snapshot
        return WindowTimes(times_ns=answer["times_ns"], status=answer["status"], engine=keeper.engine,
                           batch_ns=answer.get("batch_ns"), first_wait_ns=answer.get("first_wait_ns"),
                           release_ns=answer.get("release_ns"), snapshot_ns=answer.get("snapshot_ns"),
                           region_node=answer.get("region_node"), queued_ahead=answer.get("queued_ahead"),
                           take_ns=answer.get("take_ns"), take_high_ns=answer.get("take_high_ns"),
                           host_us=window_side.host_us if own else None,
                           collections=window_side.collections if own else None,
                           not_queued_ahead=answer.get("not_queued_ahead"))

    def _region_shrunk(self, meeting: dict, last: int, engine: str) -> WindowTimes:
        """The candidate's batch when the timekeeper died of SIGBUS: it touches only the gate
        region of the side it times, populated when it was made, in that side's folder, which the
        candidate's user owns and may truncate (a hostile file shrank it under the timekeeper and
        restored it, and its job read as the judge's error). The candidate's doing: ``flagged``.
        The dead timekeeper's board is left for it (the node's other ranks wait for no window of
        it) and the next batch gets a fresh clock, and the judge's own sides fresh mappings."""
        from pkb_core.harness.board import Board

        if meeting:
            board = Board(meeting["board"], meeting["ranks"], meeting["index"])
            board.leave(last)
            board.close()
        self._fresh_clock()
        return WindowTimes(times_ns=[], status="the judge's timekeeper was killed (SIGBUS) touching the candidate's "
                                               "gate region: a file in the candidate's folder was shrunk under it",
                           engine=engine, side_fault=True)

    def _fresh_clock(self) -> None:
        """Let a timekeeper a side killed go: the next batch gets a fresh one, and the judge's own
        sides fresh mappings (they map the dead one's regions; a new one's reuse their names)."""
        self.clock.close()
        self.clock = None
        for side in self.__dict__.pop("window_sides", {}).values():
            side.close()

    @staticmethod
    def _no_room(full: NoRoom) -> Armed:
        """The batch when the judge found no room for its memory (a gate region, in the side's
        folder or the judge's; a board or the staging, in the judge's): a filesystem the judge
        shares with the groups of its job. The judge says what is full and what did not fit; whose
        doing it was, the launcher decides, which holds the groups' cgroups (a fill is charged to
        the writer's) and folders (:func:`pkb_core.conduct.window_rounds.arm_failed`)."""
        return Armed(skeletons=[], region={}, room_needed=full.needed, room_whole=full.whole,
                     failed=f"{full.filesystem} is full ({mib_text(full.free)} free of {mib_text(full.whole)}): the judge "
                            f"could not make {full.what} ({mib_text(full.needed)})")

    def _window_side(self, side: str, armed):
        """This rank's end of ``side``'s gate region, one per judge side: each stays mapped
        across batches (mapping a host engine's region pins its pages, milliseconds a MiB)."""
        from pkb_core.harness.windows import WindowSide

        sides = self.__dict__.setdefault("window_sides", {})
        if side in sides and not sides[side].in_pool(armed["region"]):
            # A new pool (a new job's larger sets, or another engine's timekeeper): every old
            # mapping goes before a new one is made (a device engine may reuse their addresses).
            for old in sides.values():
                old.close()
            sides.clear()
        if side not in sides:
            sides[side] = WindowSide(self.device)
        sides[side].attach(armed["region"])
        sides[side].call_events = False  # the groups' account (PKB_CALL_EVENTS), not the judge's own sides'
        return sides[side]

    def _side_call(self, side: str, fill: int):
        """This rank as one of the judge's own sides: what it does in each window (None:
        nothing but the hand-off; ``kernel``: the least any honest call's window holds besides
        the hand-off, one kernel that writes ``fill`` bytes, what the reference's calls export
        (their outputs and their arguments after them), into ``out_slot``).

        Every side's window must hand its outputs' bytes to the judge's memory before its
        ``done``, so the ``kernel`` window that is subtracted from each side's holds that export,
        made in one launch by pkb's copy, as an honest side's export is made: what is left of a
        window after it is the call and the rest of pkb's harness, and a side gains only what its
        own writing of those bytes saves on pkb's copy (the launch, writing them from its own
        kernel; docs/trust.md)."""
        if side == "null":
            return None
        # fill's bytes (less than one alignment short), made once per size: a job's batches share it.
        floors = self.__dict__.setdefault("export_floors", {})
        if fill not in floors:
            floors.clear()
            floors[fill] = stand_in_outputs([], fill, self.device)
            if floors[fill] is not None:
                floors[fill].zero_()
        floor = floors[fill]
        if floor is not None:
            return lambda views: (floor, None)
        tick = torch.zeros(1, dtype=torch.int32, device=self.device)

        def one_kernel(views):
            tick.add_(1)  # the least work on the device's compute engine any call does
            return None, None

        return one_kernel

    def on_check_windows(self, request: CheckWindows) -> Finding:
        """Compare the candidate's windowed calls ``indices`` with the reference's: what the
        timekeeper snapshotted, read as the candidate's skeletons describe it."""
        armed = self.armed["candidate"]
        sets, keeper = armed["sets"], self._clock().of("candidate")
        copied = armed.get("copied") or []
        self.pristine = sets
        indices = [i for i in request.indices if 0 <= i < len(sets)]
        began = time.perf_counter()
        spent = {"reference": 0.0, "unpack": 0.0, "to_device": 0.0, "compare": 0.0}
        # Collective: every rank runs the reference on every index before any rank compares.
        expected = {}
        for index in indices:
            ref_args = clone(sets[index])
            expected[index] = (self.problem.reference(*ref_args), ref_args, self._timed_tolerance(index))
        self._sync()
        spent["reference"] = time.perf_counter() - began
        skeletons = request.skeletons if isinstance(request.skeletons, list) else []
        for index in indices:
            began = time.perf_counter()
            ref_out, ref_args, (tolerance, bound) = expected[index]
            at = index * armed["snap_stride"]
            # What the snapshot holds: the bytes the timekeeper copied (on the host engine what the
            # call said it filled; nothing for a window it was not told to copy).
            kept = copied[index] if index < len(copied) else armed["out_bytes"]
            budget = Limits(max_bytes=kept)
            try:
                if index >= len(skeletons):
                    raise ParcelError("no layout was given for this call's outputs")
                if kept < armed["out_bytes"] and skeleton_end(skeletons[index]) > kept:
                    raise ParcelError(f"its layout reaches byte {skeleton_end(skeletons[index])} of its slot, past "
                                      f"the {kept} bytes it said it filled before its done (the `used` word), "
                                      "which is all its snapshot holds")
                received = unpack_from(skeletons[index], keeper.snap[at:at + kept], limits=budget)
            except Exception as exc:  # noqa: BLE001 - whatever its description makes fail is the candidate's
                shown = exc if isinstance(exc, ParcelError) else describe(exc)
                return Finding(verdict=Verdict.FAIL, reason=f"timed call {index}: its outputs could not be read "
                                                            f"back ({shown})")
            if not (isinstance(received, dict) and set(received) == {"out", "args"}):
                return Finding(verdict=Verdict.FAIL, reason=f"timed call {index}: its outputs could not be read back")
            unpacked = time.perf_counter()
            spent["unpack"] += unpacked - began
            received = _to_device(received, self.device)  # a host engine's snapshot
            self._sync()
            compared = time.perf_counter()
            spent["to_device"] += compared - unpacked
            problem = compare(received["out"], ref_out, tolerance, bound and bound[0]) or \
                self._arguments_after(received["args"], sets[index], ref_args, tolerance, bound and bound[1])
            spent["compare"] += time.perf_counter() - compared
            if problem:
                return Finding(verdict=Verdict.FAIL, reason=f"timed call {index} of a batch, on fresh inputs: {problem} "
                                                            "(the timed calls must compute what the checked ones do)",
                               **_finding(problem, call=f"timed call {index} of a batch"))
        return Finding(spent_ms={part: round(seconds * 1e3, 3) for part, seconds in spent.items()})

    def on_clocks(self, request: ReadClocks) -> Clocks:
        from pkb_core.machine.clocks import read_clocks

        return Clocks(clocks=read_clocks(self.device))

    def on_profile(self, request: ProfileRequest) -> Profiled:
        from pkb_core.harness.profiling import profile_calls

        calls = self._calls()
        return Profiled(summary=profile_calls(calls[0], device=self.device, calls=5, trace_path=request.path))


def _same_layout(old_sets, new_sets) -> bool:
    left = [leaf for s in old_sets for _, leaf in leaves(s)]
    right = [leaf for s in new_sets for _, leaf in leaves(s)]
    if len(left) != len(right):
        return False
    for a, b in zip(left, right):
        if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
            return False
        if isinstance(a, torch.Tensor) and (a.shape != b.shape or a.dtype != b.dtype):
            return False
        if not isinstance(a, torch.Tensor) and not isinstance(a, torch.nn.Module) and a is not b:
            try:
                if not bool(a == b):
                    return False
            except Exception:  # noqa: BLE001
                return False
    return True


def _nbytes(tree) -> int:
    return sum(leaf.numel() * leaf.element_size() for _, leaf in leaves(tree) if isinstance(leaf, torch.Tensor))


def _to_device(value, device):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(_to_device(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _to_device(v, device) for k, v in value.items()}
    return value


def _to_cpu(value):
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, (list, tuple)):
        return [_to_cpu(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    return value


def _finding(problem, **more) -> dict:
    """The answer's ``finding``: the structured detail of a comparison's line
    (:class:`pkb_core.judge.check.Finding`), for the record's feedback."""
    detail = getattr(problem, "detail", None)
    return {"finding": {**detail, **more}} if detail else {}
