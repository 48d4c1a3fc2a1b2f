"""A candidate's rank: one fresh process per rank and job, holding nothing of the judge.

It gets its inputs as data from the judge's parcels, places them in the
backend's symmetric heap, calls the solution, and sends back what it returned
(and what its argument buffers hold afterwards) as data. It never sees a
reference output, never compares, and nothing it reports is a time pkb uses:
the launcher's own clock times each of its batches from the outside
(:mod:`pkb_core.conduct.timed_rounds`). Before the solution is
imported, the process is locked down (:mod:`pkb_core.confine.lockdown`); a
custom-kernel backend's processes hold only the sealed world group
(:mod:`pkb_core.candidate.sealed`).

Commands (each answered with the same ``op``; their request and answer classes are in
:mod:`pkb_core.contracts.commands_candidate`, paired in :mod:`pkb_core.contracts.commands`):

``setup``    lockdown, then compile the solution (the process group, the backend's
             init and its heap were made at start-up: :meth:`CandidateRank.prepare`)
``trial``    place one trial's inputs, call the solution once, send its outputs back
``warm``     start a timing mode: place its warm-up input sets (never timed later),
             warm up on them, capture them in a CUDA graph in graph mode (the first
             one also makes the candidate side's device barrier: :meth:`CandidateRank.align`)
``time``     one timed batch: place the round's input sets (released to it only now,
             inside the launcher's timed window), call the solution on each, send every
             output and every argument buffer back
``profile``  a profiler trace of a few calls
``end``      the backend's finalize hook
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from pkb_core.contracts.commands_candidate import (CandidateTimed, End, RunWindows, Setup, SetupDone, TimeCandidate,
                                                   Trial, WarmCandidate, WindowsRan)
from pkb_core.contracts.job import Job
from pkb_core.contracts.messages import Done, Packed, Profiled, ProfileRequest, Warmed
from pkb_core.contracts.verdict import Verdict
from pkb_core.harness.barrier import StoreBarrier
from pkb_core.harness.copies import copy_all
from pkb_core.errors import BackendUnavailable, CompileError, SolutionFailed, SolutionUnsupported, describe
from pkb_core.harness.parcel import TRUSTED, linear_of, pack, packed_size, stand_in_outputs, unpack
from pkb_core.problem.contract import read_spec
from pkb_core.candidate.sealed import is_refusal
from pkb_core.candidate.late_reads import LATE_READS, returned_path, say_returned
from pkb_core.candidate.stagger import MOST_HOLD_S, Stagger
from pkb_core.harness.timing import BatchTimer, DeviceBarrierTimeout
from pkb_core.harness.trees import linear_tensors, restore


class CandidateRank:
    """What one candidate process does for the launcher (see the module docstring)."""

    def __init__(self, *, rank, world_size, local_rank, device, store, run_id, run_dir, send_event,
                 local_world_size=None, shm_dir=None, sandbox_uid=None):
        self.rank = rank
        #: The group's own shared-memory folder and user (the launcher's; None where it has none).
        self.shm_dir = shm_dir
        self.sandbox_uid = sandbox_uid
        self.local_world_size = world_size if local_world_size is None else local_world_size
        self.world_size = world_size
        self.local_rank = local_rank
        self.device = device
        self.store = store
        self.run_id = run_id
        self.run_dir = run_dir
        self.send_event = send_event
        self.harness_barrier = StoreBarrier(store, world_size, device, prefix="pkb-harness")
        self.stagger = Stagger()
        #: Trials this rank has run (every rank of the group runs the same ones).
        self.trials = 0
        self.groups = {}

    # -- setup ------------------------------------------------------------------
    def prepare(self, backend: str, custom_kernels: bool, options: dict) -> str | None:
        """Everything that does not depend on the job, done as soon as the
        process starts (while the previous job still runs): the process group,
        the CUDA context, the backend's init hook and its heap. Returns why the
        backend cannot run here (the ``ready`` message's ``unsupported``), or None."""
        from pkb_core.plugin.backend import WorkerContext
        from pkb_core.candidate.defaults import CoreDefaults
        from pkb_core.candidate.plugin_manager import worker_plugin_manager
        from pkb_core.symmetric import default_heap
        from pkb_core.harness.gates import side_stream

        self.custom_kernels = custom_kernels
        self._init_process_group(custom_kernels)
        if self.device.type == "cuda":
            torch.empty(1, device=self.device)  # the context and the allocator, now rather than in a job
            side_stream(self.device)  # pkb's one stream of its own, made at the same point in every group
        self.pm = worker_plugin_manager(backend, CoreDefaults())
        defaults = self.pm.get_plugin("pkb_core.candidate.defaults")
        ctx = WorkerContext(rank=self.rank, world_size=self.world_size, local_rank=self.local_rank,
                            device=self.device, control_group=dist.group.WORLD, run_dir=self.run_dir,
                            options=options, store=self.store, run_id=self.run_id, barrier=self.harness_barrier)
        self.state = None
        try:
            self.state = self.pm.hook.pkb_backend_init(ctx=ctx)
        except BackendUnavailable as exc:
            self.on_end(End())
            return str(exc)  # the launcher makes every job of this group unsupported
        defaults.heap = default_heap(self.device, self.harness_barrier, self.run_id, self.rank, self.world_size)
        self.core_heap = defaults.heap
        self._pay_first_uses(custom_kernels)
        self.slots = _Slots(self)
        self.pool_slots = []
        self.timer = BatchTimer(self.device, StoreBarrier(self.store, self.world_size, self.device,
                                                          prefix="pkb-timing"))
        self.aligned = False
        return None

    def align(self):
        """Make this side's device barrier (the first ``warm`` of a timed job;
        collective). Its flags live in an allocation of the core's heap made
        for it alone, never one the solution is handed, whatever heap the
        backend gives the solution; the timing code is the judge's
        (:mod:`pkb_core.harness.timing`), so both sides align the same way."""
        if self.aligned:
            return
        self.aligned = True
        from pkb_core.harness import device_barrier

        barrier, note = device_barrier.create(lambda: self.core_heap, self.device, store=self.store, rank=self.rank,
                                              world_size=self.world_size, local_world_size=self.local_world_size)
        self.timer.device_barrier, self.timer.alignment = barrier, note

    def _pay_first_uses(self, custom_kernels: bool) -> None:
        """On a GPU most of a fresh process's cost is in first uses: the symmetric
        heap's first rendezvous sets up its IPC, NCCL connects its channels on the
        first collective (2xH200: about 0.4 s per trial of a 5-trial job before).
        Paid here, while the previous job still runs."""
        self._warm_buffer = self.pm.hook.pkb_backend_allocate(state=self.state, shape=(64,), dtype=torch.uint8)
        if not custom_kernels:
            probe = torch.zeros(1, device=self.device)
            dist.all_reduce(probe)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def on_setup(self, request: Setup) -> SetupDone:
        """Lock the process down, then compile the job's solution (its code
        runs in this process from here on)."""
        from pkb_core.candidate.solution import check_source

        self.job = job = request.job
        self.problem = read_spec(job.problem_path).load()  # the problem pack's code: before the lockdown
        seal = getattr(self.store, "seal", None)
        if seal is not None:  # from here on the job's store serves barriers only (pkb_core.keeper)
            seal()
        missing = _lock_down(job, self.run_dir, network=not self.custom_kernels, scratch=self.shm_dir,
                             uid=self.sandbox_uid)
        _gate_multicast(self.device.type)
        try:
            check_source(self.pm, job.solution, self.device.type)
            self.program = self.pm.hook.pkb_backend_compile(state=self.state, problem=self.problem,
                                                            solution=job.solution)
            if self.program is None:
                raise CompileError("the backend returned None from pkb_backend_compile")
        except SolutionUnsupported as exc:
            return SetupDone(verdict=Verdict.UNSUPPORTED.value, reason=str(exc), lockdown=missing)
        except CompileError as exc:
            return SetupDone(verdict=Verdict.COMPILE_ERROR.value, reason=str(exc), lockdown=missing)
        except Exception as exc:  # noqa: BLE001 - a backend bug is still this job's verdict
            return SetupDone(verdict=Verdict.COMPILE_ERROR.value,
                             reason=f"compiling raised {describe(exc, job.solution)}", lockdown=missing)
        return SetupDone(lockdown=missing)

    def _init_process_group(self, custom_kernels: bool):
        if custom_kernels:
            from pkb_core.candidate.sealed import BACKEND_NAME, install_barrier, register_backend

            register_backend()
            dist.init_process_group(BACKEND_NAME, store=self.store, rank=self.rank, world_size=self.world_size)
            install_barrier(StoreBarrier(self.store, self.world_size, self.device,
                                         on_call=lambda: self.send_event({"event": "barrier"})))
        elif self.device.type == "cuda":
            dist.init_process_group("nccl", store=self.store, rank=self.rank, world_size=self.world_size,
                                    device_id=self.device)
        else:
            dist.init_process_group("gloo", store=self.store, rank=self.rank, world_size=self.world_size)

    def make_group(self, partition, index):
        """The group of block ``index`` of ``partition`` (all blocks created, in
        order, once per job: ``new_group`` is collective)."""
        key = tuple(partition)
        if key not in self.groups:
            self.groups[key] = [dist.new_group(list(block)) for block in partition]
        return self.groups[key][index]

    def on_end(self, request: End) -> Done:
        """The backend's finalize hook (the launcher ends a healthy job with it;
        a candidate that hung or crashed is killed without)."""
        if getattr(self, "pm", None) is not None and not getattr(self, "finalized", False):
            self.finalized = True
            self.pm.hook.pkb_backend_finalize(state=self.state)
        return Done()

    # -- one call ---------------------------------------------------------------
    def _call(self, fn):
        try:
            out = fn()
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            return out
        except Exception as exc:  # noqa: BLE001 - the solution's failure is its verdict
            raise _failed(exc, solution=self.job.solution) from None

    def on_trial(self, request: Trial) -> Packed:
        args = unpack(request.skeleton, request.path, limits=TRUSTED, device=self.device, make_group=self.make_group)
        placed = self.slots.place(args, request.slots)
        self.harness_barrier()  # every rank's inputs are in place before any solution reads its peers
        staggered, late = request.late_rank is not None, request.late_rank == self.rank
        self.trials += 1
        tag = f"{self.run_id}-{self.trials}"  # every rank counts the same trials
        if late:
            self.stagger.hold()
            if self.shm_dir:  # the group's own folder: where the others say they returned
                LATE_READS.arm([returned_path(self.shm_dir, tag, r) for r in range(self.world_size) if r != self.rank],
                               MOST_HOLD_S)
        started = time.monotonic()
        try:
            fn = self.pm.hook.pkb_backend_launch(state=self.state, program=self.program, inputs=placed)
            out = self._call(fn)
        finally:
            LATE_READS.disarm()
        # The arguments go back as the buffers that were passed in, whatever the
        # solution did to the argument lists it was handed (problem 21 updates
        # list elements in place: rebinding them must not count).
        after = self.slots.rebuild(args)
        packed = Packed(skeleton=pack({"out": out, "args": after}, request.out_path))
        self.stagger.took(time.monotonic() - started, waited_on_peer=staggered and not late)
        if staggered and not late:
            self.stagger.scrub(self.slots.buffers)
            if self.shm_dir:
                say_returned(self.shm_dir, tag, self.rank)
        return packed

    # -- timing -----------------------------------------------------------------
    def _place_pool(self, skeleton, path, slots) -> bool:
        """Place a pool's input sets into the pool's buffers (the same buffers
        from round to round while big enough, so a captured graph replays on the
        new values); True when a buffer had to move."""
        sets = unpack(skeleton, path, limits=TRUSTED, device=self.device, make_group=self.make_group)
        while len(self.pool_slots) < len(sets):
            self.pool_slots.append(_Slots(self))
        before = [list(map(id, slot.buffers)) for slot in self.pool_slots]
        self.pool = [self.pool_slots[i].place(s, slots[i]) for i, s in enumerate(sets)]
        moved = before != [list(map(id, slot.buffers)) for slot in self.pool_slots]
        self.pristine = sets
        self.calls = [self.pm.hook.pkb_backend_launch(state=self.state, program=self.program, inputs=placed)
                      for placed in self.pool]
        return moved

    def _refresh(self):
        mutates = self.problem.mutates
        if not mutates:
            return None
        return lambda i: restore(self.pool[i], self.pristine[i], mutates)

    def on_warm(self, request: WarmCandidate) -> Warmed:
        """Start a timing mode on its own warm-up sets: nothing warmed up on is timed."""
        self.align()
        self._place_pool(request.skeleton, request.path, request.slots)
        self.harness_barrier()  # every rank's inputs are in place before any solution reads its peers
        try:
            self.timer.warm_up(self.calls, request.count, self._refresh())
        except Exception as exc:  # noqa: BLE001
            raise _failed(exc, " while warming up", solution=self.job.solution) from None
        if request.mode == "graph":
            return Warmed(failure=self.timer.capture(self.calls))
        return Warmed()

    def on_time(self, request: TimeCandidate) -> CandidateTimed:
        """One timed batch, all of it inside the launcher's window: the inputs
        are placed here (in graph mode into the captured buffers), then timed."""
        mode = request.mode
        moved = self._place_pool(request.skeleton, request.path, request.slots)
        if mode == "graph" and moved:
            raise SolutionFailed("graph mode: the round's inputs did not fit the captured buffers")
        try:
            times, outputs = self.timer.run(self.calls, mode, refresh=self._refresh(), replays=request.replays)
        except DeviceBarrierTimeout:
            raise  # the harness's barrier, not the solution, reports it (an error)
        except Exception as exc:  # noqa: BLE001
            raise _failed(exc, " while timed", solution=self.job.solution) from None
        # Everything a call must produce comes back: its outputs and the argument
        # buffers it was handed, as they are now (read back like a trial's).
        after = [slot.rebuild(s) for slot, s in zip(self.pool_slots, self.pristine)]
        # ``times`` is the process's own account: a diagnostic the launcher labels
        # untrusted and never uses for a time, a speedup or a verdict.
        return CandidateTimed(times=times, skeleton=pack({"out": outputs, "args": after}, request.out_path),
                              alignment=self.timer.alignment)

    def on_windows(self, request: RunWindows) -> WindowsRan:
        """Call the solution once in each of the timekeeper's windows (docs/timing.md): each
        call's set arrives in the gate region only when its window opens, after the previous
        call's outputs were taken, and what it leaves in ``out_slot`` is what the judge checks."""
        from pkb_core.harness.windows import WindowSide, WindowTimeout

        self.align()
        if getattr(self, "window_slots", None) is None:
            # One end per kind of batch (the reference group runs the ``harness`` batches on a
            # pool of regions of their own): each pool stays mapped across batches.
            self.window_sides, self.window_slots = {}, _Slots(self)
        if request.harness_only not in self.window_sides:
            self.window_sides[request.harness_only] = WindowSide(self.device)
        window_side = self.window_sides[request.harness_only]
        window_side.attach(request.region)
        self.window_slots.copies = window_side.copies  # as the judge said with the region
        slots, barrier = self.window_slots, self.timer.device_barrier

        launched = {}

        def before_gate(views):
            # Everything but the copies, before the gate: the buffers' views (allocated or grown
            # here, a collective), the exported tree's, the launched callable. On CPU the host is
            # inside the window from the gate on, so only what a set's values need is left there.
            placed, pending = slots.prepare(views, request.slots)
            exported = slots.rebuild(views)
            if request.harness_only:
                # No call, but as many bytes exported as the reference's calls export (their outputs
                # and the arguments after them): the harness holds all an honest call's window
                # holds besides the call. One stand-in per size, made before any gate.
                key = ("stand-in", packed_size(exported))
                if key not in launched:
                    stand_in = stand_in_outputs(exported, request.fill, self.device)
                    launched[key] = lambda: stand_in
                return pending, launched[key], exported
            # The same buffers, shapes and other arguments as an earlier call: its launched callable
            # (the hook runs once per layout, not in every window: a pluggy call costs the host
            # microseconds). The other arguments belong to the key: a set's split sizes differ.
            layout = _layout_key(placed)
            if layout not in launched:
                launched[layout] = self.pm.hook.pkb_backend_launch(state=self.state, program=self.program,
                                                                   inputs=placed)
            return pending, launched[layout], exported

        def call(prepared):
            pending, launch, exported = prepared
            slots.fill(pending)
            if barrier is not None:
                barrier()  # every rank's set is in place before any call reads its peers
            window_side.placed()  # PKB_CALL_EVENTS=on: the call's own work starts here
            # The harness batch exports the placed set as a call's arguments after it, and its
            # stand-in for the reference's outputs: what every honest call exports.
            return launch(), exported

        try:
            written = window_side.run(epoch=request.epoch, skeletons=request.skeletons, call=call,
                                      before_gate=before_gate, timeout_s=request.timeout_s,
                                      make_group=self.make_group,
                                      fill=request.fill if request.harness_only else 0)
        except (DeviceBarrierTimeout, WindowTimeout):
            raise  # the harness's, not the solution's (an error)
        except Exception as exc:  # noqa: BLE001
            raise _failed(exc, " while timed", solution=self.job.solution) from None
        return WindowsRan(skeletons=written, host_us=window_side.host_us,
                          collections=window_side.collections, call_event_us=window_side.call_event_us,
                          place_event_us=window_side.place_event_us)

    def on_profile(self, request: ProfileRequest) -> Profiled:
        from pkb_core.harness.profiling import profile_calls

        return Profiled(summary=profile_calls(self.calls[0], device=self.device, calls=5, trace_path=request.path))


def _lock_down(job: Job, run_dir, *, network: bool, scratch: str | None, uid: int | None) -> list[str]:
    """Lock this process down for ``job`` (:mod:`pkb_core.confine.lockdown`):
    the group's own user and shared-memory folder come from the launcher
    (``uid``, ``scratch``); the solution's text is read first, while this
    process may still read it. Returns the protections missing."""
    import os

    from pkb_core.confine.lockdown import lock_down, protected_caches
    from pkb_core.confine.sandbox import use_scratch
    from pkb_core.candidate.solution import keep_source

    keep_source(job.solution)
    from pkb_core.cache import cache_dir

    # What it reads after the lockdown: its own file's folder (a solution may read files next to it),
    # the problem's, and pkb's cache (the compile phase's builds, which a solution loads).
    readable = [os.path.dirname(os.path.abspath(p)) for p in (job.solution, job.problem_path) if p]
    readable.append(str(cache_dir()))
    missing = lock_down(network=network, read_only=protected_caches(), hidden=[run_dir],
                        writable=[p for p in (scratch, "/dev/shm") if p], user=uid,
                        expose=readable, dev_shm=scratch)  # its /dev/shm is its own folder
    if uid is None:
        missing.append("a user of its own (the launcher is not root): other processes of your user "
                       "and the files it can write are reachable")
    if scratch:
        use_scratch(scratch)
    return missing


def _gate_multicast(device_type: str) -> None:
    """Where NVLink multicast is off, refuse it from here on, before the solution is
    imported (:mod:`pkb_core.candidate.multicast_gate`)."""
    from pkb_core.plugin.multicast import multicast_off

    why = multicast_off(device_type)
    if why is not None:
        from pkb_core.candidate import multicast_gate

        multicast_gate.install(why)


def _failed(exc: BaseException, when: str = "", *, solution=None) -> SolutionFailed:
    """The verdict line for a solution that raised: its place names the solution's own
    line first (``solution``: its file); a refused collective says so, and so does a
    failure for want of NVLink multicast (:func:`pkb_core.candidate.multicast_gate.refusal`)."""
    import sys
    import traceback

    import torch.distributed as dist

    from pkb_core.candidate import multicast_gate

    # The verdict's line names one place; the whole traceback goes to this rank's stderr, the
    # job's log (a new user found every log empty after an error it could not place).
    rank = f"rank {dist.get_rank()}: " if dist.is_initialized() else ""
    print(f"pkb: {rank}the solution raised{when}:", file=sys.stderr)
    traceback.print_exception(exc, file=sys.stderr)
    sys.stderr.flush()
    if is_refusal(exc):
        from pkb_core.candidate.sealed import REFUSAL_REASON

        return SolutionFailed(f"{REFUSAL_REASON}{when}: {describe(exc, solution)}", refused=True)
    multicast = multicast_gate.refusal(exc, solution)
    if multicast:
        return SolutionFailed(f"{multicast}{when}", multicast_off=True)
    return SolutionFailed(f"solution raised {describe(exc, solution)}{when}")


def _layout_key(tree) -> str:
    """What a launched callable depends on besides its buffers' values: every tensor's shape,
    dtype and address, and every other argument's value."""
    if isinstance(tree, torch.Tensor):
        return repr((tuple(tree.shape), tree.dtype, tree.data_ptr()))
    if isinstance(tree, (list, tuple)) and not isinstance(tree, torch.Size):
        return f"{type(tree).__name__}[{','.join(_layout_key(item) for item in tree)}]"
    if isinstance(tree, dict):
        return "{" + ",".join(f"{key!r}:{_layout_key(item)}" for key, item in tree.items()) + "}"
    if type(tree) is torch.nn.Linear:  # placed anew for each set, on the same buffers
        return f"Linear[{_layout_key(tree.weight)},{_layout_key(tree.bias)}]"
    return f"{type(tree).__name__}:{id(tree) if callable(tree) else repr(tree)}"


class _Slots:
    """Symmetric buffers for one argument tree's tensors, reused while big enough.

    ``sizes`` (from the launcher: the largest byte count of each tensor leaf
    over all ranks) is the same on every rank, so every rank allocates the same
    buffers in the same order, as the collective allocator requires.
    """

    def __init__(self, rank: CandidateRank):
        self.rank = rank
        self.buffers: list[torch.Tensor] = []
        #: How :meth:`place` copies (:mod:`pkb_core.harness.copies`): window mode's, as the judge
        #: says with each gate region; the copy engine elsewhere.
        self.copies = "engine"

    def place(self, args, sizes):
        """``args``'s tensors copied into this tree's buffers (allocated or grown to ``sizes``), the
        way :attr:`copies` says; the tree of their views."""
        placed, pending = self.prepare(args, sizes)
        self.fill(pending)
        return placed

    def prepare(self, args, sizes):
        """:meth:`place` less its copies: ``(the tree of views, the copies still to make)``, for
        :meth:`fill` (window mode makes the views before a call's gate, the copies after it)."""
        for i, nbytes in enumerate(sizes):
            if i >= len(self.buffers) or self.buffers[i].numel() < nbytes:
                buffer = self.rank.pm.hook.pkb_backend_allocate(state=self.rank.state, shape=(max(nbytes, 1),),
                                                                 dtype=torch.uint8)
                if i < len(self.buffers):
                    self.buffers[i] = buffer
                else:
                    self.buffers.append(buffer)
        pending = []
        return self._map(args, pending), pending

    def fill(self, pending) -> None:
        """Make the copies :meth:`prepare` left, the way :attr:`copies` says (with kernels, one
        launch for them all: :func:`pkb_core.harness.copies.copy_all`)."""
        copy_all(pending, self.copies)

    def rebuild(self, args):
        """A new tree shaped like ``args`` whose tensors are views of the
        buffers as they are now (what :meth:`place` handed out)."""
        return self._map(args, None)

    def _map(self, args, pending: list | None):
        """The tree of ``args`` with each tensor a view of its buffer; where ``pending`` is a list,
        the copies the views need are added to it and the other leaves are kept, else those are
        dropped (an export)."""
        placed = iter(range(len(self.buffers)))
        copy = pending is not None

        def to_slot(value):
            if isinstance(value, torch.Tensor):
                i = next(placed)
                nbytes = value.numel() * value.element_size()
                view = self.buffers[i][:nbytes].view(value.dtype).view(value.shape)
                if copy:
                    pending.append((view, value))
                return view
            if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
                return type(value)(to_slot(v) for v in value)
            if isinstance(value, dict):
                return {k: to_slot(v) for k, v in value.items()}
            if type(value) is torch.nn.Linear:
                # Its weight and bias are placed like any tensor (the launcher's sizes count them:
                # parcel.tensor_bytes); a layer of the placed views is what the call gets, and its
                # tensors are what an export sends back (the judge compares them as it does any
                # input: trees.leaves reads a layer so).
                weight = to_slot(value.weight.detach())
                bias = None if value.bias is None else to_slot(value.bias.detach())
                return linear_of(weight, bias) if copy else linear_tensors(weight, bias)
            # Only the tensors come back (a module or a group is no buffer of
            # the candidate's and cannot travel from it).
            return value if copy else None

        return to_slot(args)

