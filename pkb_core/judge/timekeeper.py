"""The judge's timekeeper: the one process whose clock times a call, on one rank.

Every timed call of either side runs in its own *window* (docs/timing.md): the timekeeper,
on its own stream (its own CUDA context, one per GPU; on CPU its own process and clock),

0. waits until the side says call ``w`` is queued (``queued``): on GPU the call's work is on
   the side's stream behind its gate, so the side's host is not inside the window;
1. stamps ``t0``;
2. *releases* the call's input set: copies it from its private staging (memory no side
   can map) into the side's ``in_slot`` (:mod:`pkb_core.harness.gates`);
3. opens the gate (``go := E + 1 + w``) and waits for the side's ``done``;
4. takes a *snapshot*: copies the side's ``out_slot`` (the call's outputs and argument
   buffers) into its private memory, which is what the judge checks;
5. stamps ``t1``.

So no side sees input set ``w + 1`` before call ``w`` has produced its outputs (calls
cannot be fused), nothing a side does before ``go`` or after its output has been copied
counts for it, and work a side leaves running past ``done`` is either in the snapshot
(inside the window) or missing from it (a wrong answer). The side never writes a time and
never holds a mapping of the staging or the snapshots.

The process is started by its judge rank (:class:`pkb_core.judge.clock.JudgeClock`) and
speaks JSON lines on its standard input and output. It imports neither torch nor any
problem or solution: on CPU only the standard library, on GPU CUDA's driver API.

Commands: ``region`` (make a side's gate region), ``staging`` (make the private staging and
snapshot memory), ``open`` (run one batch of windows for a side), ``exit``.
"""
from __future__ import annotations

import ctypes
import json
import os
import random
import statistics
import sys
import time

from pkb_core.harness.board import Board
from pkb_core.harness.gates import DONE, GO, HEADER, QUEUED, SPINS, HostRegion, HostWord, behind, checked, \
    driver, cyclic_gap, export_handle, map_host, slot_layout, store_fence, stream_wait, stream_write, unmap_host
from pkb_core.machine.numa import page_node, settle_on
from pkb_core.machine.placement import unplace

#: The NUMA node of the rank's GPU, from its judge rank (empty: unknown).
NODE_ENV = "PKB_TIMEKEEPER_NODE"
#: How long (GPU, the device engine) a batch's stream may take to drain once its gates are opened
#: from the control stream at the batch's deadline (its copies: a few ms).
DRAIN_S = 30.0
#: Windows queued ahead of the last one known finished (GPU): a stream's queue holds about a
#: thousand operations, and a host blocked in a full queue could not keep its deadline.
AHEAD = 48
#: Polls before a sleep of the host engine timing GPU sides (about a second of spinning).
HOST_ENGINE_SPINS = 10_000_000
#: How long (GPU) the timekeeper waits for a side to queue a call before it opens the call's
#: gate itself: a call whose queueing needs the device (an ``.item()``, a first allocation's
#: rendezvous) waits on work behind its own gate. Once a side stalls, its later calls of the
#: batch are not waited for (``not_queued_ahead``: their windows may hold the side's host).
STALL_S = 0.25
#: The same wait once a batch has stalled: the side may still announce calls it did queue.
STALL_AGAIN_S = 0.002
#: How long (GPU, host engine) the timekeeper waits for a side's ``queued`` word to move before
#: it stops waiting for the whole batch to be queued and opens the first window.
QUEUE_IDLE_S = 0.05
#: A snapshot is copied in pieces of at least this many bytes, at most :data:`SNAPSHOT_PIECES` of
#: them, in an order drawn for each window (:func:`snapshot_pieces`).
SNAPSHOT_PIECE_BYTES = 64 << 10
SNAPSHOT_PIECES = 64
DEVICE_SNAPSHOT_PIECES = 16
#: This process's own draws (the order of a snapshot's pieces): seeded from the operating system,
#: in a process no side can read.
_DRAW = random.Random(os.urandom(32))


def snapshot_pieces(nbytes: int, pieces: int = SNAPSHOT_PIECES) -> list[tuple[int, int]]:
    """``(offset, length)`` pieces that cover ``nbytes`` once, in an order drawn now.

    A snapshot is taken once the side says ``done``, and a copy of megabytes takes a while (a
    host copy of 16 MiB, milliseconds). Copied front to back, work a side left running past its
    ``done`` that writes its outputs front to back, faster than the copy reads them (a kernel
    writing host memory over the bus, against the host's copy), would stay ahead of it and be in
    the snapshot, outside the window. In a drawn order, the first piece read (microseconds after
    ``done``) is any piece: a side whose outputs are not all written by then is read wrong with a
    chance of the share it has not written, in every window drawn for a snapshot."""
    if nbytes <= 0:
        return []
    size = max(SNAPSHOT_PIECE_BYTES, -(-nbytes // pieces))
    found = [(at, min(size, nbytes - at)) for at in range(0, nbytes, size)]
    _DRAW.shuffle(found)
    return found


def snapshot_bytes(out_bytes: int, snap_stride: int) -> int:
    """The most bytes of a window's ``out_slot`` (``out_bytes`` long) its snapshot holds: no more
    than the batch's snapshot stride. A region of a pool made for an earlier job's larger outputs
    is longer than this job's stride (the judge's own sides keep their pool from job to job), and a
    whole slot copied into each window's snapshot would run into the next window's, past the end
    of the last: on the device engine the copy failed (``CUDA_ERROR_INVALID_VALUE``, the triton
    all-to-all at 256 MiB after the scatter at 256 MiB, 2xH200, 2026-11-30); on the host engine,
    for a side that said it filled its whole slot, the copy ran into the next window's snapshot and
    past the last one's raised."""
    return max(0, min(out_bytes, snap_stride))


class HostClock:
    """The host engine: shared-memory files, polls, ``time.perf_counter_ns``. It times CPU sides,
    and GPU sides whose device maps the region's file (``PKB_TIMEKEEPER=host``: no context of the
    judge's on the side's GPU); ``spins``: polls of a word before each poll sleeps (a GPU host
    has cores to spare for a timekeeper that never sleeps inside a window; a CPU one does not;
    None: :class:`pkb_core.harness.gates.HostWord`'s own default for its kind of word);
    ``woken``: the regions' and the board's words wake their waiters (CPU sides: every word is a
    process's write, :mod:`pkb_core.harness.host_wake`)."""

    def __init__(self, spins: int | None = SPINS, stall_s: float | None = None, woken: bool = False):
        self.spins = spins
        self.woken = woken
        #: GPU sides only: how long to wait for a call's ``queued`` before opening its gate (as
        #: :class:`DeviceClock` does); a CPU side announces a call before it waits, so never stalls.
        self.stall_s = stall_s
        self.regions: dict = {}
        #: Per side: the NUMA node its region's pages are on (:mod:`pkb_core.machine.numa`).
        self.nodes: dict = {}
        self.staging = self.snap = None

    def region(self, side: str, in_bytes: int, out_bytes: int, path: str) -> dict:
        old = self.regions.pop(side, None)
        if old is not None:
            old[0].close()
        _, _, total = slot_layout(in_bytes, out_bytes)
        region = HostRegion(path, total, create=True, woken=self.woken)  # allocated and touched
        self.regions[side] = (region, in_bytes, out_bytes)
        self.nodes[side] = page_node(region.map)
        return {"path": path}

    def make_staging(self, staging_bytes: int, snap_bytes: int, staging_path: str, snap_path: str) -> dict:
        for old in (self.staging, self.snap):
            if old is not None:
                old.close()
        self.staging = self.snap = None  # none until both are made (a full filesystem: neither)
        staging = HostRegion(staging_path, max(1, staging_bytes), create=True)
        try:
            self.snap = HostRegion(snap_path, max(1, snap_bytes), create=True)
        except BaseException:
            staging.close()
            raise
        self.staging = staging
        return {"staging": staging_path, "snap": snap_path}

    def open(self, side: str, epoch: int, sizes: list, set_stride: int, snap_stride: int, deadline: float,
             board: Board | None = None, snapshots: list | None = None, keys: list | None = None,
             take_allowance_ns: int | None = None) -> dict:
        """The windows of one batch. With ``keys`` (one a window) the staging holds masked sets
        (:mod:`pkb_core.harness.mask`): set ``w`` is released once the side has announced call
        ``w`` and call ``w - 1``'s outputs are in the snapshot, the window opens once the side has taken the set
        out of ``in_slot``, and the window's key is written as it opens, just before ``go``;
        without, each set is copied into ``in_slot`` inside its window. ``take_allowance_ns``:
        a window's clock starts no later than that long after its set's release, and the window
        opens then if the side has not said ``taken``, so what a side does before saying it
        beyond an honest side's copy (work that needs no value of the set) is inside its window,
        never free."""
        region, in_bytes, out_bytes = self.regions[side]
        in_at, out_at, _ = slot_layout(in_bytes, out_bytes)
        out_bytes = snapshot_bytes(out_bytes, snap_stride)
        times, copied, stalled_at, status = [], [], None, "ok"
        released, snapped = [], []  # ns inside each window: the release's copy, the snapshot's
        takes = []  # masked sets: ns from each release to the side's taken
        last, began, first = epoch + len(sizes), time.perf_counter_ns(), None
        # The launcher ends a batch that cannot finish through the board (a rank died, or left its
        # peers waiting in a collective): every wait below gives up then, not at the deadline.
        stop = (lambda: board.stopped(last)) if board is not None else None
        # GPU: no window opens before the side has queued the whole batch (or stopped queueing),
        # so every window follows the last one after the same work of this timekeeper's, however
        # fast the side's host queues. Windows opened as their calls were queued followed the
        # side's host's pace: on one H200 two side processes of the same code differed by up to
        # 1.3 us a 4 KiB window for a whole run, and by 0.03-0.55 us (11 of 13 runs within 0.17)
        # once each batch was queued first (docs/benchmarks/2026-11-29-h200-window-groups.md).
        ahead = (_queued_ahead(region.queued, epoch, len(sizes), deadline, self.stall_s, self.spins)
                 if self.stall_s is not None else None)
        try:
            for w, n in enumerate(sizes):
                mark = epoch + 1 + w
                # A side announces a call once it waits for the gate (CPU) or once the call is on its
                # stream (GPU): what it did since the last window is outside this one.
                if stalled_at is None and self.stall_s is not None:
                    if not region.queued.wait(mark, min(deadline, time.monotonic() + self.stall_s), self.spins,
                                              stop=stop):
                        stalled_at = w  # its queueing waits on the device: open its gates from here on
                elif stalled_at is None and not region.queued.wait(mark, deadline, self.spins, stop=stop):
                    status = f"call {w} never started (the side never waited for its gate)"
                    break
                if keys is not None:
                    # Unreadable without the key, which only the window's opening writes; taken out of
                    # in_slot by the side before the window, so neither copy is inside it.
                    whole = -(-n // 4) * 4
                    region.view(in_at, whole)[:] = self.staging.view(w * set_stride, whole)
                    store_fence()  # the set is in place before released, on every processor
                    region.released.write(mark)
                    filled = time.perf_counter_ns()
                    # With an allowance the window opens at its end, taken or not: the side's clock
                    # runs from there, and a side that never takes its set (that reads in_slot inside
                    # its window, or does not follow the protocol) costs only its own windows.
                    limit = deadline if take_allowance_ns is None else \
                        min(deadline, time.monotonic() + take_allowance_ns / 1e9)
                    if not region.taken.wait(mark, limit, self.spins, stop=stop) and take_allowance_ns is None:
                        status = f"call {w}'s set was never taken (no taken before the deadline)"
                        break
                    takes.append(time.perf_counter_ns() - filled)
                # Every rank's window opens once every rank's side has queued the call: a call that
                # meets its peers (a collective) never waits inside one rank's window for another
                # rank's host.
                if board is not None and not board.meet(mark, deadline, self.spins, stop=stop):
                    status = f"call {w} never started on every rank (another rank's side was not queued)"
                    break
                opened = t0 = time.perf_counter_ns()
                first = t0 - began if first is None else first
                if keys is not None and take_allowance_ns is not None and behind(region.taken.read(), mark):
                    # Still not taken once every rank is there: its lateness since the allowance ran
                    # out is its own. A side that took its set is not charged the wait for the other
                    # ranks: the judge's own sides (no allowance) never are, so that charge landed on
                    # the compared sides alone, more the slower the other ranks' releases.
                    t0 = min(t0, filled + take_allowance_ns)
                if keys is None:
                    region.view(in_at, n)[:] = self.staging.view(w * set_stride, n)
                else:
                    region.write_key(keys[w])
                released.append(time.perf_counter_ns() - opened)
                store_fence()  # the set (or its key) is in place before go, on every processor
                region.go.write(mark)
                if not region.done.wait(mark, deadline, self.spins, stop=stop):
                    status = f"call {w} never finished (no done before the deadline)"
                    break
                used = region.used.read()
                keep = used if 0 <= used <= out_bytes else out_bytes
                if snapshots is not None and w not in snapshots:
                    keep = 0
                seen = time.perf_counter_ns()
                for at, n_bytes in snapshot_pieces(keep):
                    self.snap.view(w * snap_stride + at, n_bytes)[:] = region.view(out_at + at, n_bytes)
                t1 = time.perf_counter_ns()
                times.append(t1 - t0)
                copied.append(keep)
                if keep:
                    snapped.append(t1 - seen)
            if status != "ok" and stop is not None and stop():
                # The side's own doing, as a call that never finished is (a timeout, not the judge's error).
                status = f"call {w} never finished: the launcher ended the batch (a rank of the group died or left it)"
            if status != "ok":
                self.drain(side, last)
        finally:
            if board is not None:
                board.leave(last)  # a rank that stopped early (or failed) holds no other rank's windows
        return {"times_ns": times, "status": status, "not_queued_ahead": stalled_at, "copied": copied,
                "first_wait_ns": first, "batch_ns": time.perf_counter_ns() - began,
                "release_ns": statistics.median_high(released) if released else None,
                "snapshot_ns": statistics.median_high(snapped) if snapped else None,
                "region_node": self.nodes.get(side), "queued_ahead": ahead,
                "take_ns": statistics.median_high(takes) if takes else None,
                "take_high_ns": sorted(takes)[(len(takes) - 1) * 9 // 10] if takes else None}

    def drain(self, side: str, last: int) -> None:
        """Open every gate of ``side``'s region up to ``last``, releasing no set: a GPU side's
        stream, queued ahead, waits on these words and drains, so a batch that ended early (a
        side that stalled or hung, or this process's own failure) costs its own job, never the
        process that waits for that stream (the judge's own sides are the judge's rank)."""
        found = self.regions.get(side)
        if found is not None:
            found[0].released.write(last)
            found[0].go.write(last)

    def forget(self, sides: list) -> dict:
        """Unmap the regions of ``sides`` (a pool the judge let go)."""
        for side in sides:
            found = self.regions.pop(side, None)
            if found is not None:
                found[0].close()
            self.nodes.pop(side, None)
        return {}

    def close(self):
        for region, *_ in self.regions.values():
            region.close()


def _queued_ahead(queued: HostWord, epoch: int, count: int, deadline: float, first_s: float,
                  spins: int = SPINS) -> int:
    """Wait until a side has announced all ``count`` calls of the batch from ``epoch`` on, or
    until it stops: its first call not announced within ``first_s`` (its queueing waits on the
    device, as a call's may after :data:`STALL_S`), or its ``queued`` word not moved for
    ``QUEUE_IDLE_S`` since (a stream's queue that is full). The calls announced by then.

    The idle wait starts at the first announcement, not when the batch is opened: a side's host
    may take longer than ``QUEUE_IDLE_S`` to reach its batch (its command's trip through the
    launcher on a loaded machine), and a wait timed from the opening gave up before any call was
    queued, opening that batch's windows call by call."""
    last = epoch + count
    if not queued.wait(epoch + 1, min(deadline, time.monotonic() + first_s), spins):
        return 0  # no call of this batch announced
    seen, since = queued.read(), time.monotonic()
    while behind(seen, last):
        now = time.monotonic()
        if now > deadline or now - since > QUEUE_IDLE_S:
            break
        value = queued.read()
        if value != seen:
            seen, since = value, now
    return max(0, min(count, cyclic_gap(seen, epoch)))


class DeviceClock:
    """The CUDA engine: judge-owned device memory, stream memory operations, CUDA events."""

    #: Its words are the device's: no process wakes for them (:class:`HostClock`'s ``woken``).
    woken = False

    def __init__(self, ordinal: int):
        cu = driver()
        checked(cu.cuInit(0))
        device = checked(cu.cuDeviceGet(ordinal))
        self.context = checked(cu.cuDevicePrimaryCtxRetain(device))
        checked(cu.cuCtxSetCurrent(self.context))
        flags = cu.CUstream_flags.CU_STREAM_NON_BLOCKING
        self.stream = checked(cu.cuStreamCreate(flags))
        self.control = checked(cu.cuStreamCreate(flags))
        self.regions: dict = {}
        self.staging = self.snap = None
        self.events: list = []

    def _alloc(self, n: int) -> int:
        cu = driver()
        ptr = int(checked(cu.cuMemAlloc(n)))
        checked(cu.cuMemsetD8(cu.CUdeviceptr(ptr), 0, n))
        return ptr

    def _free(self, ptr):
        if ptr:
            cu = driver()
            checked(cu.cuMemFree(cu.CUdeviceptr(ptr)))

    def region(self, side: str, in_bytes: int, out_bytes: int, path: str) -> dict:
        """Device memory for the slots and the words the devices write, and at ``path`` a page of
        host memory, the *announce page*, whose ``queued`` the side's host writes itself and this
        engine's stream waits on (pinned and mapped into this context when made). A word the side
        wrote with a stream operation would land only once its hardware queue reached it: with one
        queue a context (:data:`pkb_core.machine.device.GPU_ENVIRONMENT`), behind its own gate,
        which opens only after that word. This engine writes the page only through its device
        address, never through the file (which the side owns, and can shrink or punch)."""
        self._drop(self.regions.pop(side, None))
        _, _, total = slot_layout(in_bytes, out_bytes)
        announce = HostRegion(path, HEADER, create=True)  # first: a page that fails leaves nothing behind
        mapped = map_host(ctypes.addressof(ctypes.c_char.from_buffer(announce.map)), HEADER)
        ptr = self._alloc(total)
        self.regions[side] = (ptr, in_bytes, out_bytes, announce, mapped)
        return {"handle": export_handle(ptr), "announce": path}

    def _drop(self, found) -> None:
        """Free a region of :attr:`regions`: its device memory, its announce page and the page's file."""
        if found is None:
            return
        ptr, _, _, announce, _ = found
        self._free(ptr)
        unmap_host(ctypes.addressof(ctypes.c_char.from_buffer(announce.map)))
        announce.close()
        try:
            os.unlink(announce.path)
        except OSError:
            pass  # gone, or replaced by the side with what it may not be unlinked as (its folder)

    def make_staging(self, staging_bytes: int, snap_bytes: int, staging_path: str, snap_path: str) -> dict:
        self._free(self.staging)
        self._free(self.snap)
        self.staging, self.snap = self._alloc(max(1, staging_bytes)), self._alloc(max(1, snap_bytes))
        return {"staging": export_handle(self.staging), "snap": export_handle(self.snap)}

    def _event(self, i: int):
        cu = driver()
        while len(self.events) <= i:
            self.events.append(checked(cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DEFAULT)))
        return self.events[i]

    def open(self, side: str, epoch: int, sizes: list, set_stride: int, snap_stride: int, deadline: float,
             board: Board | None = None, snapshots: list | None = None) -> dict:
        """The windows of one batch (each copied out, or those of ``snapshots``). ``board`` is the
        host engine's: this engine's windows open on each rank once that rank's side is queued
        (its queue runs ahead of the device where calls are long, which is where it is chosen)."""
        cu = driver()
        ptr, in_bytes, out_bytes, _, announced = self.regions[side]
        in_at, out_at, _ = slot_layout(in_bytes, out_bytes)
        out_bytes = snapshot_bytes(out_bytes, snap_stride)
        stream, n, began = self.stream, len(sizes), time.perf_counter_ns()
        handle = int(stream)
        queued = finished = 0
        status, stalled_at = "ok", None
        while finished < n:
            while queued < n and queued - finished < AHEAD:
                w, mark = queued, epoch + 1 + queued
                if stalled_at is None:
                    # The clock starts once the side's host has put call w on its queue.
                    stream_wait(handle, announced + QUEUED, mark)
                checked(cu.cuEventRecord(self._event(2 * w), stream))
                checked(cu.cuMemcpyDtoDAsync(cu.CUdeviceptr(ptr + in_at), cu.CUdeviceptr(self.staging + w * set_stride),
                                             sizes[w], stream))
                stream_write(handle, ptr + GO, mark)
                stream_wait(handle, ptr + DONE, mark)
                if snapshots is None or w in snapshots:
                    # In a drawn order, as the host engine's (snapshot_pieces), fewer and larger pieces:
                    # each is a call into the driver, and the copy engine reads gigabytes a millisecond.
                    for at, n_bytes in snapshot_pieces(out_bytes, DEVICE_SNAPSHOT_PIECES):
                        checked(cu.cuMemcpyDtoDAsync(cu.CUdeviceptr(self.snap + w * snap_stride + at),
                                                     cu.CUdeviceptr(ptr + out_at + at), n_bytes, stream))
                checked(cu.cuEventRecord(self._event(2 * w + 1), stream))
                queued += 1
            # Window ``finished`` starts when the side announces it; a side that does not (its
            # queueing waits on work behind this very gate) has the gate opened for it.
            wait = STALL_S if stalled_at is None else STALL_AGAIN_S
            if not self._wait_event(self._event(2 * finished), min(deadline, time.monotonic() + wait)):
                if stalled_at is None:
                    stalled_at = finished
                # Through the page's device address, on the control stream: the frame this stream
                # waits on is the one pinned when the page was made, which the side can take out
                # of its file (a hole punched, truncated and grown again), so a write through a
                # mapping of the file could miss it for good.
                stream_write(int(self.control), announced + QUEUED, epoch + n)
            if not self._wait_event(self._event(2 * finished + 1), deadline):
                status = f"call {finished} never finished (no done before the deadline)"
                # Opening every gate from the control stream lets this stream drain whatever the
                # side does, so a hung side costs its own job, never the judge.
                stream_write(int(self.control), announced + QUEUED, epoch + n)
                stream_write(int(self.control), ptr + DONE, epoch + n)
                if not self._wait_stream(stream, time.monotonic() + DRAIN_S):
                    raise RuntimeError(f"its stream did not drain within {DRAIN_S:.0f} s of the gates opened")
                break
            finished += 1
        times = [int(checked(cu.cuEventElapsedTime(self._event(2 * w), self._event(2 * w + 1))) * 1e6)
                 for w in range(finished)]
        copied = [out_bytes if snapshots is None or w in snapshots else 0 for w in range(finished)]
        return {"times_ns": times, "status": status, "not_queued_ahead": stalled_at, "copied": copied,
                "batch_ns": time.perf_counter_ns() - began}

    def drain(self, side: str, last: int) -> None:
        """Nothing to open: this engine's own stream writes its gates (a failed batch opens them)."""

    def _wait_stream(self, stream, deadline: float) -> bool:
        """Whether ``stream`` has run all its work by ``deadline`` (a bounded synchronize)."""
        return _until_done(lambda: driver().cuStreamQuery(stream)[0], deadline, 1e-3)

    def _wait_event(self, event, deadline: float) -> bool:
        return _until_done(lambda: driver().cuEventQuery(event)[0], deadline, 20e-6)

    def forget(self, sides: list) -> dict:
        """Free the regions of ``sides`` (a pool the judge let go)."""
        for side in sides:
            self._drop(self.regions.pop(side, None))
        return {}

    def close(self):
        for found in self.regions.values():
            self._drop(found)
        self.regions = {}
        self._free(self.staging)
        self._free(self.snap)


def _until_done(query, deadline: float, nap_s: float) -> bool:
    """Poll ``query()`` (a CUDA query's result: done, not ready, or an error) every ``nap_s``
    until done (True) or ``deadline`` (False); an error raises."""
    cu = driver()
    while True:
        err = query()
        if err == cu.CUresult.CUDA_SUCCESS:
            return True
        if err != cu.CUresult.CUDA_ERROR_NOT_READY:
            raise RuntimeError(f"the timekeeper's stream failed: {err}")
        if time.monotonic() > deadline:
            return False
        time.sleep(nap_s)


def serve(clock, read, write) -> None:
    """Answer commands (one JSON object a line) until ``exit`` or the end of input."""
    for line in read:
        request = json.loads(line)
        op = request.pop("op")
        try:
            if op == "exit":
                write({"op": "exit"})
                return
            if op == "region":
                answer = clock.region(request["side"], request["in_bytes"], request["out_bytes"], request.get("path", ""))
            elif op == "forget":
                answer = clock.forget(request["sides"])
            elif op == "staging":
                answer = clock.make_staging(request["staging_bytes"], request["snap_bytes"],
                                            request.get("staging_path", ""), request.get("snap_path", ""))
            elif op == "open":
                deadline = time.monotonic() + request["timeout_s"]
                board = (Board(request["board"], request["ranks"], request["index"], clock.woken)
                         if request.get("board") else None)
                try:
                    chosen, keys = request.get("snapshots"), request.get("keys")
                    masked = {"keys": [[int(word) for word in key] for key in keys],
                              "take_allowance_ns": request.get("take_allowance_ns")} if keys else {}
                    answer = clock.open(request["side"], request["epoch"], request["sizes"], request["set_stride"],
                                        request["snap_stride"], deadline, board,
                                        None if chosen is None else {int(w) for w in chosen}, **masked)
                finally:
                    if board is not None:
                        board.close()
            else:
                raise ValueError(f"unknown timekeeper command {op!r}")
        except Exception as exc:  # noqa: BLE001 - the judge turns it into the job's error
            if op == "open" and "side" in request:
                clock.drain(request["side"], int(request["epoch"]) + len(request["sizes"]))
            answer = {"error": f"{type(exc).__name__}: {exc}"}
            if isinstance(exc, OSError) and exc.errno is not None:
                answer["errno"] = exc.errno  # a full filesystem (gates.NO_ROOM) is told apart by it
        write({"op": op, **answer})


def main() -> int:
    import ctypes
    import gc

    # Trusted and non-dumpable (PR_SET_DUMPABLE = 4): no candidate may read or trace it.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(4, 0, 0, 0, 0)
    libc.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG: SIGKILL when its judge rank dies
    gc.disable()  # nothing of a long-lived heap collects inside a window
    unplace()  # CPU: not on its judge rank's core (pkb_core.machine.placement)
    # On its GPU's node (or the one it starts on), its memory there too: every gate region of
    # this rank on one node, whichever side it is for (pkb_core.machine.numa).
    node = os.environ.get(NODE_ENV, "")
    settle_on(int(node) if node.isdigit() else None)
    ordinal = os.environ.get("PKB_TIMEKEEPER_DEVICE", "cpu")
    if ordinal == "cpu":
        clock = HostClock(spins=None, woken=True)
    elif ordinal == "host":
        clock = HostClock(spins=HOST_ENGINE_SPINS, stall_s=STALL_S)
    else:
        clock = DeviceClock(int(ordinal))
    out = sys.stdout

    def write(message):
        out.write(json.dumps(message) + "\n")
        out.flush()

    try:
        serve(clock, sys.stdin, write)
    finally:
        clock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
